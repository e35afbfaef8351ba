"""The exports keep out every file the gate fails whole, so the copy passes the same gate.

The new user's path: ``datacheck demo`` (plus a shard scaled x1000 by a bad preprocessing
step, written by pyarrow) -> ``datacheck infer`` on a trusted shard -> ``datacheck scan``
(exit 1: drift, unnormalized, schema, corrupt) -> ``clean_copy`` / ``exclusion_list`` /
``GuardedLoader(exclude=report)`` -> a rescan of the copy with the same schema passes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import datacheck as dc


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "datacheck", *args], capture_output=True, text=True, timeout=180
    )


@pytest.fixture(scope="module")
def inferred(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(data, schema inferred from shard-000, report of the scan with it), through the CLI."""
    root = tmp_path_factory.mktemp("gate")
    data, schema, out = root / "d", root / "s.yaml", root / "r"
    assert _cli("demo", str(data)).returncode == 0
    shard = pq.read_table(data / "train" / "shard-000.parquet")
    x1000 = pc.multiply(shard["x0"], pa.scalar(1000.0, pa.float32()))
    scaled = shard.set_column(1, "x0", x1000)
    pq.write_table(scaled, data / "train" / "shard-005.parquet")  # every x0 value x1000
    r = _cli("infer", str(data / "train" / "shard-000.parquet"), "--out", str(schema))
    assert r.returncode == 0, r.stderr
    r = _cli("scan", str(data), "--schema", str(schema), "--out", str(out))
    assert r.returncode == 1, r.stdout + r.stderr
    for check in ("drift", "unnormalized", "schema", "corrupt"):
        assert f"  {check} " in r.stdout
    return data, schema, out


def _by_name(frame, column: str) -> dict[str, object]:
    names = frame["path"].str.rsplit("/", n=1).str[-1]
    return dict(zip(names, frame[column], strict=True))


def test_clean_copy_leaves_out_whole_file_failures_and_its_rescan_passes(
    inferred: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    data, schema, out = inferred
    report = dc.load_report(out)
    result = report.clean_copy(tmp_path / "clean")
    assert _by_name(result, "status") == {
        "shard-000.parquet": "copied",
        "shard-001.parquet": "cleaned",  # NaN rows
        "shard-002.parquet": "cleaned",  # Inf and out-of-range rows: a few outliers, no drift
        "shard-003.csv": "skipped",  # schema: the embedding column is missing
        "shard-004.parquet": "skipped",  # corrupt
        "shard-005.parquet": "skipped",  # drift + unnormalized (x0 x1000)
    }
    reason = _by_name(result, "reason")
    assert reason["shard-005.parquet"].startswith("x0: drift (99")  # 99x of 1,000 values ...
    assert "x0: unnormalized (" in reason["shard-005.parquet"]
    assert reason["shard-003.csv"] == "embedding: schema (column missing)"
    assert reason["shard-004.parquet"].startswith("corrupt: ArrowInvalid")
    assert sorted(p.name for p in (tmp_path / "clean").rglob("*.*")) == [
        "shard-000.parquet",
        "shard-001.parquet",
        "shard-002.parquet",
    ]
    # The gate the copy was made for: the same schema, the CLI's defaults.
    r = _cli("scan", str(tmp_path / "clean"), "--schema", str(schema), "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "scanned 3 files (3 ok, 0 flagged, 0 corrupt), 2,993 rows" in r.stdout


def test_clean_copy_at_warning_passes_a_warning_gate(
    inferred: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    data, schema, out = inferred
    result = dc.load_report(out).clean_copy(tmp_path / "clean", severity="warning")
    assert _by_name(result, "status")["shard-001.parquet"] == "cleaned"
    rescan = dc.scan(
        tmp_path / "clean", schema, out=tmp_path / "o", fail_on="warning", executor="inprocess"
    )
    assert rescan.exit_code() == 0, rescan.summary["sites"]


def test_exclusion_list_lists_whole_file_failures_whole(inferred: tuple[Path, Path, Path]) -> None:
    data, schema, out = inferred
    excl = dc.load_report(out).exclusion_list()
    per_file = excl.groupby("path").size()
    per_file.index = [p.rsplit("/", 1)[-1] for p in per_file.index]
    assert per_file.to_dict() == {
        "shard-001.parquet": 3,  # its NaN rows
        "shard-002.parquet": 4,  # +/-Inf at 42 and 99, x0 1.5e6 at 7, an embedding 3e5 at 600
        "shard-003.csv": 1000,  # every row: schema
        "shard-004.parquet": 1,  # corrupt: rows unknown, one row without a row number
        "shard-005.parquet": 1000,  # every row: drift
    }
    drifted = excl[excl["path"].str.endswith("shard-005.parquet")]
    assert list(drifted["row"]) == list(range(1000))
    # Shards concatenated in the report's order, the corrupt one left out: 4 x 1000 before it.
    assert list(drifted["index"]) == list(range(4000, 5000))
    # Every row names the whole-file findings first, then its own (x0 out of range).
    assert set(drifted["checks"].str.slice(0, 27)) == {"x0: drift; x0: unnormalized"}
    # A row with a finding of its own names it after the whole-file ones.
    schema_gone = excl[excl["path"].str.endswith("shard-003.csv")]
    assert schema_gone.loc[schema_gone["row"] == 8, "checks"].item() == (
        "embedding: schema; x0: inf"
    )
    corrupt = excl[excl["path"].str.endswith("shard-004.parquet")]
    assert corrupt["row"].isna().all() and corrupt["index"].isna().all()
    assert set(excl["index"].dropna()) >= set(range(3000, 5000)) | {1017, 1250, 1503}


def test_guarded_loader_excludes_the_files_a_report_fails_whole(
    inferred: tuple[Path, Path, Path],
) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, Dataset

    from datacheck.torch import GuardedLoader

    data, schema, out = inferred
    names = ["shard-000.parquet", "shard-001.parquet", "shard-002.parquet", "shard-003.csv"]
    names.append("shard-005.parquet")
    files = [str(data / "train" / n) for n in names]

    class Rows(Dataset):
        """1,000 rows per shard, concatenated; lists its files per index (``path_of``)."""

        def __len__(self) -> int:
            return 5000

        def __getitem__(self, i: int):
            return torch.tensor(float(i))

    report = dc.load_report(out)
    for exclude in (report, out, report.exclusion_list()):
        loader = GuardedLoader(
            DataLoader(Rows(), batch_size=100), exclude=exclude, path_of=lambda i: files[i // 1000]
        )
        seen = np.concatenate([b.numpy() for b in loader]).astype(int)
        kept = set(seen.tolist())
        assert not kept & set(range(3000, 5000)), type(exclude)  # schema, drift: never loaded
        assert set(range(1000)) <= kept
