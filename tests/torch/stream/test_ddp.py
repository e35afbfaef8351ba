"""Each stream stack on 2 real gloo ranks (``torch.distributed.run``), each rank reading the
share its library gives it (WebDataset's ``split_by_node``, ``datasets``'
``split_dataset_by_node``, MosaicML's and litdata's own rank partition, the user's split in a
``torchdata.nodes`` pipeline), 2 DataLoader workers per rank, a DDP model trained on the batches.

The three planted samples (NaN, unreadable, 1e30 with ``fits="fp16"``) are dropped on whichever
rank reads them and recorded under the pipeline's identity; every clean sample is delivered
exactly once per epoch across the ranks; the next run, on a grown dataset read in another
order (samples moved between ranks), never yields a bad one and skips no clean one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from datacheck.torch import read_quarantine
from tests.torch.stream._ddp_streams import GROWN
from tests.torch.stream._kit import BAD, BATCH, CLEAN, N

ROOT = Path(__file__).resolve().parents[3]
NEEDS = {
    "webdataset": "webdataset",
    "hf": "datasets",
    "mosaic": "streaming",
    "litdata": "litdata",
    "nodes": "torchdata.nodes",
}


def _write(kind: str, data: Path) -> dict[int, tuple[str | None, str]]:
    """The first and the grown dataset, by the library's own writer; the (source, sample)
    each planted sample must be recorded under."""
    first, grown = list(range(N)), list(range(N, N + GROWN))
    if kind == "webdataset":
        from tests.torch.stream.test_webdataset import write_shards

        urls = write_shards(data / "first", first)
        write_shards(data / "grown", grown, prefix="extra")
        return {i: (urls[i // 10], f"s{i:05d}") for i in BAD}
    if kind == "hf":
        from tests.torch.stream.test_hf_datasets import write_parquet

        files = write_parquet(data / "first", first)
        write_parquet(data / "grown", grown, prefix="extra")
        return {i: (files[i // 10], str(i % 10)) for i in BAD}
    if kind == "mosaic":
        from streaming.base.util import clean_stale_shared_memory

        from tests.torch.stream.test_mosaic import identities, write_mds

        clean_stale_shared_memory()
        write_mds(data / "grown", grown)
        ids = identities(write_mds(data / "first", first), first)
        return {i: ids[i] for i in BAD}
    if kind == "litdata":
        from tests.torch.stream.test_litdata import identities, write_chunks

        first += list(range(N, N + BATCH))  # whole batches per rank: see _ddp_streams.litdata
        ids = identities(write_chunks(data / "first", first), first)
        return {i: ids[i] for i in BAD}
    return {i: (None, f"rec{i}") for i in BAD}


def _launch(kind: str, data: Path, out: Path) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ["PYTHONPATH"]])}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        f"--master_port={port}",
        "-m",
        "tests.torch.stream._ddp_streams",
        kind,
        str(data),
        str(out),
    ]
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280, check=False
    )
    errors = [line for line in proc.stderr.splitlines() if "Error" in line or "error:" in line]
    assert proc.returncode == 0, ("\n".join(errors[:20]), proc.stderr[-3000:])
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def _once(shares: list[list[list[int]]], clean: list[int]) -> None:
    """Every clean sample exactly once across the ranks' batches, no bad one."""
    counts = Counter(i for share in shares for batch in share for i in batch)
    assert sorted(counts) == sorted(clean), sorted(set(clean) ^ set(counts))
    assert max(counts.values()) == 1, [i for i, c in counts.items() if c > 1]


@pytest.mark.slow
@pytest.mark.timeout(320)
@pytest.mark.parametrize("kind", sorted(NEEDS))
def test_every_clean_sample_once_per_epoch_across_two_ranks_and_the_next_run_skips_the_bad(
    tmp_path, kind
):
    pytest.importorskip(NEEDS[kind])
    data, out = tmp_path / "data", tmp_path / "out"
    out.mkdir()
    names = _write(kind, data)
    ranks = _launch(kind, data, out)
    clean = CLEAN + (list(range(N, N + BATCH)) if kind == "litdata" else [])
    for epoch in range(2):
        shares = [r["epochs"][epoch] for r in ranks]
        _once(shares, clean)
        assert len(shares[0]) == len(shares[1])  # the same steps on both ranks
        assert all(len(b) <= BATCH for s in shares for b in s)
        read = [sorted(i for b in s for i in b) for s in shares]
        assert read[0] and read[1]  # each rank had its own share
    q = read_quarantine(out / "q")
    got = {
        (s if isinstance(s, str) else None, k): c
        for s, k, c in zip(q["source"], q["sample"], q["check"], strict=True)
    }
    assert got == {names[i]: check for i, check in BAD.items()}, got
    assert set(q["epoch"]) == {0}  # found in epoch 0, never read again
    rerun = [r["rerun"] for r in ranks]
    _once(rerun, clean if kind == "litdata" else CLEAN + list(range(N, N + GROWN)))
    assert sum(r["stats"]["bad"] for r in ranks) == 0
