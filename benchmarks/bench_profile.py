"""Profile benchmark: a scan with a profile-based schema against the default scan.

Generates ~200 MB of Parquet (8 shards; 12 standardised float32 features, a float64 column, an
int64 label, an 8-wide float32 embedding; row groups of 128k rows), infers a schema from it
(``reference_stats`` + ``normalized`` on every column, so the scan profiles every column and
runs the drift checks), then, in ONE run, times in fresh subprocesses, alternating:

1. default:  ``datacheck.scan`` with the default checks;
2. schema:   ``datacheck.scan`` with the inferred schema (moments per column, z-score bounds,
             range checks, drift and unnormalized checks, profile.json);
3. sketch:   the default scan plus ``profile=True`` (moments and quantile sketches).

Each variant runs ``--repeat`` times (default 3); the fastest run counts (warm page cache).
``load`` (``datacheck.load_schema``: importing pandera and parsing the YAML, ~1 s once per
command) is timed apart from ``scan`` (the scan given the compiled schema; its spawned workers
receive the compiled rules and never import pandera).  The target (issue 5) is
scan(schema) / scan(default) <= 1.3; ``total/default`` adds the one-time load.

    python benchmarks/bench_profile.py                # ~200 MB
    python benchmarks/bench_profile.py --rows 50000   # smoke run
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FEATURES = 12
EMBED = 8
ROW_GROUP = 128 * 1024


def _shard(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    cols: dict[str, pa.Array] = {
        f"f{i:02d}": pa.array(rng.standard_normal(rows, dtype=np.float32)) for i in range(FEATURES)
    }
    cols["amount"] = pa.array(rng.standard_normal(rows))
    cols["label"] = pa.array(rng.integers(0, 100, rows))
    emb = rng.standard_normal(rows * EMBED, dtype=np.float32)
    cols["embedding"] = pa.FixedSizeListArray.from_arrays(pa.array(emb), EMBED)
    return pa.table(cols)


def generate(root: Path, rows: int, shards: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        path = root / f"shard-{s:03d}.parquet"
        if not path.exists():
            pq.write_table(_shard(rows, s), path, row_group_size=ROW_GROUP, compression="snappy")


_CHILD = """
import sys, time, datacheck
data, schema, profile, workers = sys.argv[1], sys.argv[2] or None, sys.argv[3] == "1", int(sys.argv[4])
t = time.perf_counter()
compiled = datacheck.load_schema(schema)  # imports pandera and parses the YAML: a fixed cost
t_load = time.perf_counter() - t
t = time.perf_counter()
r = datacheck.scan(data, compiled, out=sys.argv[5], profile=profile, workers=workers, fail_on="never")
t_scan = time.perf_counter() - t
print(t_load, t_scan, r.summary["rows"], sum(sum(v.values()) for v in r.summary["sites"].values()))
"""


def _time(
    data: Path, schema: str, profile: bool, workers: int, out: Path
) -> tuple[float, float, str]:
    args = [sys.executable, "-c", _CHILD, str(data), schema, "1" if profile else "0",
            str(workers), str(out)]  # fmt: skip
    res = subprocess.run(args, capture_output=True, text=True, check=True)
    load, scan, rows, sites = res.stdout.split()
    return float(load), float(scan), f"{int(rows):,} rows, {sites} finding sites"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("benchmarks/data/profile"))
    ap.add_argument(
        "--rows", type=int, default=260_000, help="rows per shard (default: ~25 MB shards)"
    )
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    data = args.root / f"rows{args.rows}"
    generate(data, args.rows, args.shards)
    size = sum(p.stat().st_size for p in data.glob("*.parquet"))
    schema = args.root / f"schema-rows{args.rows}.yaml"
    if not schema.exists():
        from datacheck._infer import infer

        t = time.perf_counter()
        infer(data, out=schema)
        print(f"infer: {time.perf_counter() - t:.2f} s")
    variants = {"default": ("", False), "schema": (str(schema), False), "sketch": ("", True)}
    best: dict[str, tuple[float, float]] = {}
    notes: dict[str, str] = {}
    for _ in range(args.repeat):
        for name, (sch, prof) in variants.items():
            load, scan, note = _time(data, sch, prof, args.workers, args.root / f"out-{name}")
            if name not in best or load + scan < sum(best[name]):
                best[name] = (load, scan)
            notes[name] = note
    print(f"data: {args.shards} shards, {size / 1e6:.0f} MB, workers {args.workers}")
    base = best["default"][1]
    print(
        f"{'variant':8s} {'load':>7s} {'scan':>7s} {'MB/s':>7s} {'scan/default':>13s} {'total/default':>14s}"
    )
    for name, (load, scan) in best.items():
        print(f"{name:8s} {load:7.3f} {scan:7.3f} {size / scan / 1e6:7.0f} {scan / base:13.2f}"
              f" {(load + scan) / base:14.2f}  ({notes[name]})")  # fmt: skip
    result = {
        "bytes": size, "workers": args.workers,
        "seconds": {k: {"load_schema": v[0], "scan": v[1]} for k, v in best.items()},
        "ratio_schema_scan": best["schema"][1] / base,
        "ratio_schema_total": sum(best["schema"]) / base,
        "ratio_sketch": best["sketch"][1] / base,
    }  # fmt: skip
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
