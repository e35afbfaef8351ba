"""The runtime quarantine manifest: round trip, crash safety, scan manifests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest

from datacheck.errors import InputError, UsageError
from datacheck.torch import indices_from_scan, read_quarantine
from datacheck.torch._quarantine import COLUMNS, QuarantineWriter, quarantined_indices, rank_file


def record(index: int, rank: int = 0, step: int = 0, check: str = "nan") -> dict:
    return {
        "index": index,
        "check": check,
        "severity": "error",
        "key": "image",
        "value": "nan",
        "count": 1,
        "rank": rank,
        "epoch": 0,
        "step": step,
        "time": "2024-05-01T12:00:00+00:00",
    }


def test_records_of_every_rank_come_back_as_one_typed_frame(tmp_path):
    for rank in (1, 0):
        writer = QuarantineWriter(tmp_path, rank)
        writer.write([record(10 + rank, rank, step=2), record(20 + rank, rank, step=1)])
        writer.close()
    df = read_quarantine(tmp_path)
    assert list(df.columns) == list(COLUMNS)
    assert df[["index", "rank", "step"]].values.tolist() == [
        [20, 0, 1],
        [21, 1, 1],
        [10, 0, 2],
        [11, 1, 2],
    ]
    assert str(df["index"].dtype) == "Int64" and str(df["count"].dtype) == "int32"
    assert isinstance(df["time"].dtype, pd.DatetimeTZDtype) and str(df["time"].dt.tz) == "UTC"
    assert df["check"].dtype == "string" and df["value"].dtype == "string"
    assert quarantined_indices(tmp_path) == {10, 11, 20, 21}
    # files of older versions (no sample/source/dataset) read with those columns null
    assert df[["sample", "source", "dataset"]].isna().all().all()


def test_stream_records_name_samples_by_key_and_source_without_an_index(tmp_path):
    writer = QuarantineWriter(tmp_path, 0)
    stream = {**record(0), "index": None, "sample": "000007", "source": "shard-000001.tar"}
    writer.write([stream, record(7)])
    writer.close()
    df = read_quarantine(tmp_path)
    assert df["index"].tolist()[0] == 7 and pd.isna(df["index"].tolist()[1])
    assert df["sample"].tolist()[1] == "000007" and df["sample"].dtype == "string"
    assert quarantined_indices(tmp_path) == {7}  # the key '000007' is not index 7


def test_missing_or_empty_folder_reads_as_an_empty_frame(tmp_path):
    df = read_quarantine(tmp_path / "nowhere")
    assert df.empty and list(df.columns) == list(COLUMNS)
    assert quarantined_indices(tmp_path) == set()


def test_a_torn_last_line_is_ignored_but_a_corrupt_middle_line_is_an_error(tmp_path):
    writer = QuarantineWriter(tmp_path, 0)
    writer.write([record(1), record(2)])
    writer.close()
    path = rank_file(tmp_path, 0)
    with open(path, "a") as f:
        f.write(json.dumps(record(3))[:25])  # the crash hit mid-write
    assert read_quarantine(tmp_path)["index"].tolist() == [1, 2]
    with open(path, "a") as f:
        f.write("\n" + json.dumps(record(4)) + "\n")
    with pytest.raises(InputError, match="line 3: not JSON"):
        read_quarantine(tmp_path)


def test_writer_creates_the_folder_only_when_something_is_bad(tmp_path):
    writer = QuarantineWriter(tmp_path / "q", 3, fsync=True)
    writer.write([])
    assert not (tmp_path / "q").exists()
    writer.write([record(5, rank=3)])
    writer.close()
    assert rank_file(tmp_path / "q", 3).name == "quarantine-rank00003.jsonl"
    assert read_quarantine(tmp_path / "q")["index"].tolist() == [5]


@pytest.fixture
def scan_manifest(tmp_path):
    df = pd.DataFrame(
        {
            "path": ["a.parquet", "a.parquet", "a.parquet", "b.parquet", "b.parquet"],
            "row": pd.array([4, 4, 7, 0, None], dtype="Int64"),
            "column": ["x", "y", "x", "x", None],
            "check": ["nan", "inf", "extreme", "nan", "corrupt"],
        }
    )
    path = tmp_path / "quarantine.parquet"
    df.to_parquet(path)
    return path


def test_indices_from_scan_with_a_frame_a_mapping_or_a_function(scan_manifest):
    frame = pd.DataFrame({"path": ["a.parquet"] * 10, "row": range(10), "index": range(100, 110)})
    frame = pd.concat([frame, pd.DataFrame({"path": ["b.parquet"], "row": [0], "index": [7]})])
    assert indices_from_scan(scan_manifest, frame) == {104, 107, 7}
    unmapped = pd.DataFrame({"path": ["b.parquet"], "row": [0], "index": pd.array([None], "Int64")})
    assert indices_from_scan(scan_manifest, unmapped) == set()  # files outside the dataset
    mapping = {("a.parquet", 4): 1, ("b.parquet", 0): 2}  # row 7 unmapped: ignored
    assert indices_from_scan(scan_manifest, mapping) == {1, 2}
    offsets = {"a.parquet": 0, "b.parquet": 1000}
    assert indices_from_scan(pd.read_parquet(scan_manifest), lambda p, r: offsets[p] + r) == {
        4,
        7,
        1000,
    }


def test_indices_from_scan_refuses_a_frame_without_path_and_row():
    with pytest.raises(UsageError, match="path, row"):
        indices_from_scan(pd.DataFrame({"file": ["a"]}), {})


CHILD = """
import sys, time
from pathlib import Path
import torch
from torch.utils.data import DataLoader, Dataset
from datacheck.torch import GuardedLoader

class Planted(Dataset):
    def __len__(self):
        return 10_000
    def __getitem__(self, i):
        x = torch.full((16,), float(i))
        if i % 8 == 3 and i < 40:
            x[5] = float("nan")
        return x

folder, ready = Path(sys.argv[1]), Path(sys.argv[2])
loader = GuardedLoader(DataLoader(Planted(), batch_size=8, num_workers=2), quarantine=folder)
for step, batch in enumerate(loader):
    if step == 6:  # mid-epoch, five bad batches behind us
        ready.write_text("ok")
        time.sleep(600)
"""


@pytest.mark.slow
def test_a_crash_mid_epoch_leaves_a_readable_manifest(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "q"), str(ready)], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert proc.poll() is None, "the child died before the crash point"
            assert time.monotonic() < deadline, "the child never reached the crash point"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the child and its DataLoader workers
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    df = read_quarantine(tmp_path / "q")
    assert df["index"].tolist() == [3, 11, 19, 27, 35]
    assert df["step"].tolist() == [0, 1, 2, 3, 4] and set(df["check"]) == {"nan"}


def test_appending_after_a_crash_drops_the_torn_record_and_stays_readable(tmp_path):
    writer = QuarantineWriter(tmp_path, 0)
    writer.write([record(1)])
    writer.close()
    with open(rank_file(tmp_path, 0), "a") as f:
        f.write(json.dumps(record(3))[:25])  # the crash hit mid-write
    writer = QuarantineWriter(tmp_path, 0)  # the next run appends
    writer.write([record(5)])
    writer.close()
    assert read_quarantine(tmp_path)["index"].tolist() == [1, 5]
