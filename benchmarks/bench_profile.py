"""Profile benchmark: a scan with a profile-based schema against the default scan.

Generates ~250 MB of Parquet (8 shards; 12 standardised float32 features, a float64 column, an
int64 label, an 8-wide float32 embedding; row groups of 128k rows), infers a schema from it
(``reference_stats`` + ``normalized``, so the scan profiles every column and runs the drift
and z-score checks), then, in ONE child process, times alternating rounds of:

1. default:  ``datacheck.scan`` with the default checks;
2. schema:   ``datacheck.scan`` with the inferred schema (moments per column, z-score bounds,
             ranges, drift and unnormalized checks, profile.json);
3. sketch:   the default scan plus ``profile=True`` (moments and quantile sketches).

A first round warms the page cache and lazy imports and is not counted; best and median of
``--repeat`` rounds are reported.  ``datacheck.load_schema`` (importing pandera, parsing the
YAML: once per command, whatever the data size) is reported apart.  Target (issue 5):
schema / default <= 1.3.

    python benchmarks/bench_profile.py                  # ~250 MB, 2 workers
    python benchmarks/bench_profile.py --workers 1      # in-process
    python benchmarks/bench_profile.py --rows 50000     # smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _harness import Table, write_results

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
import json, sys, time
t = time.perf_counter()
import datacheck
compiled = datacheck.load_schema(sys.argv[2])  # imports pandera and parses the YAML: once per command
load = time.perf_counter() - t
data, workers, repeat, out = sys.argv[1], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
variants = {"default": (None, False), "schema": (compiled, False), "sketch": (None, True)}
times = {k: [] for k in variants}
notes = {}
for i in range(repeat + 1):  # the first round warms caches and lazy imports; not counted
    for name, (schema, profile) in variants.items():
        t = time.perf_counter()
        r = datacheck.scan(data, schema, out=out, profile=profile, workers=workers, fail_on="never")
        if i:
            times[name].append(time.perf_counter() - t)
        notes[name] = f"{r.summary['rows']:,} rows, {sum(sum(v.values()) for v in r.summary['sites'].values())} finding sites"
print(json.dumps({"load_schema": load, "times": times, "notes": notes}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("benchmarks/data/profile"))
    ap.add_argument(
        "--rows", type=int, default=260_000, help="rows per shard (default: ~30 MB shards)"
    )
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
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
    cmd = [
        sys.executable,
        "-c",
        _CHILD,
        str(data),
        str(schema),
        str(args.workers),
        str(args.repeat),
        str(args.root / "out"),
    ]
    doc = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    times = doc["times"]
    best = {k: min(v) for k, v in times.items()}
    median = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"data: {args.shards} shards, {size / 1e6:.0f} MB, workers {args.workers}, "
        f"{args.repeat} alternating rounds after a warm-up"
    )
    print(
        f"{'variant':8s} {'best s':>7s} {'median s':>9s} {'MB/s':>6s} {'x best':>7s} {'x median':>9s}"
    )
    for name in times:
        print(
            f"{name:8s} {best[name]:7.3f} {median[name]:9.3f} {size / best[name] / 1e6:6.0f} "
            f"{best[name] / best['default']:7.2f} {median[name] / median['default']:9.2f}"
            f"  ({doc['notes'][name]})"
        )
    print(f"load_schema (pandera import + YAML, once per command): {doc['load_schema']:.3f} s")
    result = {
        "bytes": size,
        "workers": args.workers,
        "load_schema_s": doc["load_schema"],
        "seconds": times,
        "ratio_schema": best["schema"] / best["default"],
        "ratio_schema_median": median["schema"] / median["default"],
        "ratio_sketch": best["sketch"] / best["default"],
    }
    print(json.dumps({k: v for k, v in result.items() if k != "seconds"}))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    table = Table(
        ["variant", "best s", "× default (best)", "× default (median)"], title="profiles and drift"
    )
    for name in times:
        table.rows.append(
            [name, best[name], best[name] / best["default"], median[name] / median["default"]]
        )
    write_results(
        f"profile-w{args.workers}",
        result,
        table=table,
        params={k: str(v) for k, v in vars(args).items()},
    )


if __name__ == "__main__":
    main()
