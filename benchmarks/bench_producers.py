"""ML-dataset readers against the libraries' own reading loops, on files those libraries wrote.

For each family, ``--samples`` samples (an ``int``, a ``float32`` scalar, a 64-float vector and
a short string: values every reader must decode) are written by the real producer, then, in ONE
run, each variant is timed in a fresh subprocess (the shared harness), interleaved, fastest of
``--rounds`` (warm page cache):

- ``mds-library``: ``streaming.StreamingDataset`` reads every sample (``ds[i]``, decoded);
  ``mds-scan``: ``datacheck.scan`` of the same folder (one worker, in-process);
- ``litdata-library``: ``litdata.StreamingDataset`` reads every item; ``litdata-scan``;
- ``wds-library``: ``webdataset.WebDataset(...).decode()`` iterates every sample; ``wds-scan``.

The scan does more than the library loop (every value checked, offsets and sizes validated, a
report and manifest written), so the ratio is the price of the check over reading the data.
The scan child warms up on a tiny dataset first (one-off imports are not counted).  Results:
``results/producers.json``.

    python benchmarks/bench_producers.py                    # 100,000 samples each
    python benchmarks/bench_producers.py --samples 2000     # smoke run
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from _harness import Table, child_main, interleaved, write_results

_SHIM = Path(__file__).resolve().parents[1] / "tests" / "_shims" / "sitecustomize.py"


def _streaming() -> Any:
    """``import streaming`` where torchvision is missing (tests/_shims/README.md)."""
    if importlib.util.find_spec("torchvision") is None:
        spec = importlib.util.spec_from_file_location("_bench_shims", _SHIM)
        assert spec is not None and spec.loader is not None
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    import streaming

    return streaming


def sample(i: int) -> dict[str, Any]:
    return {
        "label": i,
        "score": np.float32(i / 7),
        "vec": np.linspace(0, 1, 64, dtype=np.float32),
        "text": f"sample number {i}",
    }


def write_mds(folder: Path, n: int) -> None:
    columns = {"label": "int", "score": "float32", "vec": "ndarray:float32:64", "text": "str"}
    with _streaming().MDSWriter(out=str(folder), columns=columns, size_limit=1 << 24) as out:
        for i in range(n):
            out.write(sample(i))


def _lit_item(i: int) -> dict[str, Any]:
    s = sample(i)
    return {**s, "score": float(s["score"])}  # litdata pickles a NumPy scalar


def write_litdata(folder: Path, n: int) -> None:
    import litdata

    litdata.optimize(
        fn=_lit_item,
        inputs=list(range(n)),
        output_dir=str(folder),
        chunk_bytes="16MB",
        num_workers=1,
        start_method="fork",
        verbose=False,
    )


def write_wds(folder: Path, n: int) -> None:
    import webdataset as wds

    folder.mkdir(parents=True)
    with wds.ShardWriter(str(folder / "shard-%06d.tar"), maxcount=50_000, verbose=0) as sink:
        for i in range(n):
            s = sample(i)
            sink.write(
                {
                    "__key__": f"s{i:08d}",
                    "cls": s["label"],
                    "npy": s["vec"],
                    "json": {"score": float(s["score"])},
                    "txt": s["text"],
                }
            )


WRITERS = {"mds": write_mds, "litdata": write_litdata, "wds": write_wds}


def mds_library(args: list[str]) -> dict[str, Any]:
    ds = _streaming().StreamingDataset(local=args[0], batch_size=1)
    start = time.perf_counter()
    n = sum(1 for i in range(len(ds)) if ds[i] is not None)
    return {"samples": n, "timed": time.perf_counter() - start}


def litdata_library(args: list[str]) -> dict[str, Any]:
    import litdata

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = litdata.StreamingDataset(args[0])
        start = time.perf_counter()
        n = sum(1 for i in range(len(ds)) if ds[i] is not None)
    return {"samples": n, "timed": time.perf_counter() - start}


def wds_library(args: list[str]) -> dict[str, Any]:
    import webdataset as wds

    shards = sorted(str(p) for p in Path(args[0]).glob("*.tar"))
    start = time.perf_counter()
    n = sum(1 for _ in wds.WebDataset(shards, shardshuffle=False).decode())
    return {"samples": n, "timed": time.perf_counter() - start}


def _scan(path: str, out: str) -> Any:
    import datacheck

    return datacheck.scan(path, out=out, executor="inprocess", workers=1, isolate=False)


def scan(args: list[str]) -> dict[str, Any]:
    folder, warm = args[0], args[1]
    out = tempfile.mkdtemp()
    try:
        _scan(warm, str(Path(out) / "warm"))
        start = time.perf_counter()
        report = _scan(folder, str(Path(out) / "o"))
        timed = time.perf_counter() - start
        rows = sum(e["rows"] for e in report.data["files"])
        statuses = sorted({e["status"] for e in report.data["files"]})
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"samples": rows, "statuses": statuses, "timed": timed}


VARIANTS = {
    "mds-library": mds_library,
    "litdata-library": litdata_library,
    "wds-library": wds_library,
    "scan": scan,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-producers-"))
    os.environ["DATA_OPTIMIZER_CACHE_FOLDER"] = str(tmp / "litdata-cache")
    try:
        rows, results = [], {}
        for family, writer in WRITERS.items():
            data, warm = tmp / family, tmp / f"{family}-warm"
            writer(data, opts.samples)
            os.environ["DATA_OPTIMIZER_CACHE_FOLDER"] = str(tmp / f"{family}-warm-cache")
            writer(warm, 50)
            lib = f"{family}-library"  # the library variants ignore the warm-up folder
            best = interleaved(__file__, [lib, "scan"], [str(data), str(warm)], opts.rounds)
            assert best[lib]["samples"] == best["scan"]["samples"] == opts.samples, best
            assert best["scan"]["statuses"] == ["ok"], best["scan"]
            results[family] = best
            floor = best[lib]["timed"]
            for name, r in (
                (f"{family}: the library's reading loop", best[lib]),
                (f"{family}: datacheck scan (1 worker)", best["scan"]),
            ):
                rows.append(
                    [name, r["timed"], opts.samples / r["timed"], r["timed"] / floor, r["rss_mb"]]
                )
        table = Table(
            ["variant", "seconds", "samples/s", "× library", "peak RSS MB"],
            rows,
            title=f"{opts.samples:,} samples a family (int, float32, 64 floats, a string)",
        )
        write_results("producers", results, table=table, params={"samples": opts.samples})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if not child_main(VARIANTS):
        main()
