"""Scan benchmark: datacheck against the floor (just reading the data) and the usual checks.

Generates ~1.5 GB of Parquet (8 shards; 16 float32 columns, an int64 column and a 32-wide
float32 embedding column; row groups of 256k rows), then, in ONE run, times each variant in a
fresh subprocess (the shared harness, ``_harness.py``: wall time and the child's own peak RSS)
and prints ratios to the floor:

1. floor:    pyarrow reads every row group and does nothing else;
2. datacheck: ``datacheck.scan`` with default checks, one worker (``inprocess``: readers in one
   isolated worker process, whose own peak RSS is reported as ``worker RSS``);
   ``datacheck-unisolated``: the same with ``isolate=False`` (readers in the process itself);
3. pandas:   ``read_parquet`` + ``isnull().sum()`` + ``np.isinf(...).sum()``;
4. pandera:  validating the same checks (finite, fp16 bound) on pandas;
5. nan10:    datacheck on a shard where 10% of values are NaN, against its clean twin;
6. schema:   ``datacheck.scan`` with a pandera schema (every column's dtype, ``in_range`` on the
   features, ``ge`` on the id: what a training set's schema says), one worker, in-process;
   ``--baseline PATH`` (a checkout of an older commit, e.g. ``git worktree add /tmp/base
   <commit>``) also runs it with that code, interleaved: ``schema-baseline``.

Each variant runs ``--repeat`` times (default 3), interleaved, and the fastest run counts (warm
page cache).  Peak RSS is the child's own VmHWM.  Results: ``benchmarks/results/scan.json``.

    python benchmarks/bench_scan.py                  # full size (~1.5 GB, a few minutes)
    python benchmarks/bench_scan.py --rows 200000    # smoke run
    python benchmarks/bench_scan.py --only-schema --baseline /tmp/base --rows 200000 --shards 2
"""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _harness import Table, child_main, interleaved, write_results

ROW_GROUP = 256 * 1024
FEATURES = 16
EMBED = 32


def _shard(rows: int, seed: int, nan_fraction: float = 0.0) -> pa.Table:
    rng = np.random.default_rng(seed)
    cols: dict[str, pa.Array] = {"id": pa.array(np.arange(rows, dtype=np.int64))}
    for i in range(FEATURES):
        x = rng.standard_normal(rows, dtype=np.float32)
        if nan_fraction:
            x[rng.random(rows) < nan_fraction] = np.nan
        elif i == 0:
            x[rng.integers(0, rows, 3)] = np.nan  # a few planted faults
        cols[f"f{i:02d}"] = pa.array(x)
    emb = rng.standard_normal(rows * EMBED, dtype=np.float32)
    if nan_fraction:
        emb[rng.random(rows * EMBED) < nan_fraction] = np.nan
    cols["embedding"] = pa.FixedSizeListArray.from_arrays(pa.array(emb), EMBED)
    return pa.table(cols)


def generate(root: Path, rows: int, shards: int) -> None:
    clean = root / "clean"
    clean.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        p = clean / f"shard-{s:03d}.parquet"
        if not p.exists():
            pq.write_table(_shard(rows, s), p, row_group_size=ROW_GROUP)
    nan = root / "nan10"
    nan.mkdir(exist_ok=True)
    if not (nan / "shard-nan.parquet").exists():
        pq.write_table(_shard(rows, 100, 0.10), nan / "shard-nan.parquet", row_group_size=ROW_GROUP)
        pq.write_table(_shard(rows, 100), nan / "shard-clean.parquet", row_group_size=ROW_GROUP)


# --- variants (each runs in its own process) -------------------------------------------------


def v_floor(paths: list[str]) -> None:
    for p in paths:
        pf = pq.ParquetFile(p)
        for i in range(pf.metadata.num_row_groups):
            pf.read_row_group(i)


def v_datacheck(paths: list[str], isolate: bool = True, baseline: bool = False) -> dict[str, float]:
    """The default scan; ``baseline``: the code at ``DATACHECK_BENCH_BASELINE``."""
    if baseline:
        import sys

        sys.path.insert(0, os.environ["DATACHECK_BENCH_BASELINE"])
    import datacheck
    from datacheck.execute import _workers

    datacheck.scan(paths, executor="inprocess", workers=1, fail_on="never", isolate=isolate)
    peaks = [_vm_hwm_mb(w.proc.pid) for w in _workers._IDLE]  # the reader ran there
    return {"worker_rss_mb": max(peaks, default=0.0)}


def v_schema(paths: list[str], baseline: bool = False) -> None:
    """The scan with a schema; ``baseline``: the code at ``DATACHECK_BENCH_BASELINE``."""
    if baseline:
        import sys

        sys.path.insert(0, os.environ["DATACHECK_BENCH_BASELINE"])
    import pandera.pandas as pa_

    import datacheck

    features = {
        f"f{i:02d}": pa_.Column("float32", pa_.Check.in_range(-10, 10), nullable=False)
        for i in range(FEATURES)
    }
    schema = pa_.DataFrameSchema({"id": pa_.Column("int64", pa_.Check.ge(0)), **features})
    datacheck.scan(
        paths, schema=schema, executor="inprocess", workers=1, fail_on="never", isolate=False
    )


def _vm_hwm_mb(pid: int | None) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def v_pandas(paths: list[str]) -> None:
    import pandas as pd

    for p in paths:
        df = pd.read_parquet(p)
        df.isnull().sum()
        num = df.select_dtypes("number")
        np.isinf(num).sum()


def v_pandera(paths: list[str]) -> None:
    import pandas as pd
    import pandera.pandas as pa_

    from datacheck.checks._pandas import register_pandera_checks

    register_pandera_checks()
    checks = [pa_.Check.finite(), pa_.Check.fp16_safe()]  # type: ignore[attr-defined]
    cols = {
        f"f{i:02d}": pa_.Column("float32", checks=checks, nullable=False) for i in range(FEATURES)
    }
    cols["id"] = pa_.Column("int64")
    schema = pa_.DataFrameSchema(cols)  # the embedding column: pandera has no element-wise check
    for p in paths:
        df = pd.read_parquet(p)
        with contextlib.suppress(pa_.errors.SchemaErrors):  # the planted NaN fail it
            schema.validate(df, lazy=True)


VARIANTS = {
    "floor": v_floor,
    "datacheck": v_datacheck,
    "datacheck-unisolated": lambda paths: v_datacheck(paths, isolate=False),
    "pandas": v_pandas,
    "pandera": v_pandera,
    # the 10%-NaN shard against its clean twin (the paths are given to the child)
    "nan10-clean": lambda paths: v_datacheck(
        [str(Path(paths[0]) / "nan10" / "shard-clean.parquet")]
    ),
    "nan10-nan": lambda paths: v_datacheck([str(Path(paths[0]) / "nan10" / "shard-nan.parquet")]),
    "datacheck-baseline": lambda paths: v_datacheck(paths, baseline=True),
    "nan10-clean-baseline": lambda paths: v_datacheck(
        [str(Path(paths[0]) / "nan10" / "shard-clean.parquet")], baseline=True
    ),
    "nan10-nan-baseline": lambda paths: v_datacheck(
        [str(Path(paths[0]) / "nan10" / "shard-nan.parquet")], baseline=True
    ),
    "schema": v_schema,
    "schema-baseline": lambda paths: v_schema(paths, baseline=True),
}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=str(Path(__file__).parent / "data" / "scan"))
    ap.add_argument("--rows", type=int, default=960_000, help="rows per shard")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--baseline", help="a checkout of older code: the *-baseline variants run it, interleaved"
    )
    ap.add_argument("--only-schema", action="store_true", help="the schema variants only")
    args = ap.parse_args()
    root = Path(args.data)
    generate(root, args.rows, args.shards)
    paths = sorted(str(p) for p in (root / "clean").glob("*.parquet"))
    size = sum(os.path.getsize(p) for p in paths)
    rg_bytes = _shard(min(ROW_GROUP, args.rows), 0).nbytes
    print(
        f"dataset: {len(paths)} shards, {size / 1e9:.2f} GB on disk, "
        f"{args.rows:,} rows each; one row group = {rg_bytes / 1e6:.0f} MB in memory"
    )
    load = os.getloadavg()
    if args.only_schema:
        return schema_only(args, paths, size, load)
    main_variants = ["floor", "datacheck", "datacheck-unisolated", "pandas", "pandera", "schema"]
    nan_variants = ["nan10-clean", "nan10-nan"]
    if args.baseline:  # the same scans with older code, interleaved: a regression shows
        os.environ["DATACHECK_BENCH_BASELINE"] = str(Path(args.baseline).resolve())
        main_variants += ["datacheck-baseline", "schema-baseline"]
        nan_variants += ["nan10-clean-baseline", "nan10-nan-baseline"]
    best = interleaved(__file__, main_variants, paths, args.repeat)
    nan = interleaved(__file__, nan_variants, [str(root)], args.repeat)
    floor = best["floor"]["seconds"]
    table = Table(
        ["variant", "seconds", "× floor", "peak RSS (MB)", "worker RSS (MB)"],
        title="scan, one worker",
    )
    for v in main_variants:
        r = best[v]
        worker = r.get("worker_rss_mb") or ""
        table.rows.append([v, r["seconds"], r["seconds"] / floor, r["rss_mb"], worker])
    ratio = nan["nan10-nan"]["seconds"] / nan["nan10-clean"]["seconds"]
    table.rows.append(
        [
            "10%-NaN shard × its clean twin",
            nan["nan10-nan"]["seconds"],
            ratio,
            nan["nan10-nan"]["rss_mb"],
            nan["nan10-nan"].get("worker_rss_mb", ""),
        ]
    )
    extra: dict[str, Any] = {}
    if args.baseline:
        base = nan["nan10-nan-baseline"]["seconds"] / nan["nan10-clean-baseline"]["seconds"]
        table.rows.append(["10%-NaN × clean twin, baseline code", "", base, "", ""])
        extra = {
            "baseline": args.baseline,
            "nan10_ratio_baseline": base,
            "datacheck_x_baseline": best["datacheck"]["seconds"]
            / best["datacheck-baseline"]["seconds"],
            "schema_x_baseline": best["schema"]["seconds"] / best["schema-baseline"]["seconds"],
        }
    write_results(
        "scan",
        {
            **best,
            **nan,
            **extra,
            "nan10_ratio": ratio,
            "datacheck_x_floor": best["datacheck"]["seconds"] / floor,
        },
        table=table,
        params={"rows": args.rows, "shards": args.shards, "repeat": args.repeat, "bytes": size},
        load_before=load,
    )


def schema_only(args: argparse.Namespace, paths: list[str], size: int, load: Any) -> None:
    """The floor, the scan with a schema and (``--baseline``) the same with older code."""
    variants = ["floor", "schema"]
    if args.baseline:
        os.environ["DATACHECK_BENCH_BASELINE"] = str(Path(args.baseline).resolve())
        variants.append("schema-baseline")
    best = interleaved(__file__, variants, paths, args.repeat)
    floor = best["floor"]["seconds"]
    table = Table(["variant", "seconds", "× floor", "peak RSS (MB)"], title="scan with a schema")
    for v in variants:
        table.rows.append([v, best[v]["seconds"], best[v]["seconds"] / floor, best[v]["rss_mb"]])
    result: dict[str, Any] = {**best, "schema_x_floor": best["schema"]["seconds"] / floor}
    if args.baseline:
        result["schema_x_baseline"] = best["schema"]["seconds"] / best["schema-baseline"]["seconds"]
        result["baseline"] = args.baseline
    params = {"rows": args.rows, "shards": args.shards, "repeat": args.repeat, "bytes": size}
    write_results("scan-schema", result, table=table, params=params, load_before=load)


if __name__ == "__main__" and not child_main(VARIANTS):
    main()
