"""Text formats benchmark: datacheck's CSV and JSON Lines scan against the floor (Arrow's own
streaming reader reading every batch, nothing else), in ONE run on the shared harness.

Generates one CSV and one JSON Lines file of ``--rows`` rows (12 float columns and an integer
label, as the round's multi-shard job), then times, each in a fresh child process, interleaved
``--repeat`` times (fastest counts):

1. ``floor-csv`` / ``floor-jsonl``: ``pyarrow.csv.open_csv`` / ``pyarrow.json.open_json``;
2. ``datacheck-csv`` / ``datacheck-jsonl``: ``datacheck.scan`` of the file, default checks, one
   worker (``inprocess``; readers in one isolated worker process).

To compare two versions of datacheck side by side, run it once from each tree (the ratios to
the floor, each measured in its own run, are what compare)::

    PYTHONPATH=/path/to/old python benchmarks/bench_text.py --rows 400000
    PYTHONPATH=/path/to/new python benchmarks/bench_text.py --rows 400000

Results: ``benchmarks/results/text.json``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
from _harness import Table, child_main, interleaved, write_results

FEATURES = 12


def generate(root: Path, rows: int) -> tuple[Path, Path]:
    import pyarrow.csv as pacsv

    root.mkdir(parents=True, exist_ok=True)
    csv, jsonl = root / f"t-{rows}.csv", root / f"t-{rows}.jsonl"
    if csv.exists() and jsonl.exists():
        return csv, jsonl
    rng = np.random.default_rng(0)
    cols = {f"f{i:02d}": rng.standard_normal(rows).astype(np.float32) for i in range(FEATURES)}
    cols["label"] = rng.integers(0, 10, rows)
    table = pa.table(cols)
    pacsv.write_csv(table, csv)
    with open(jsonl, "w") as fh:
        for batch in table.to_batches(65536):
            frame = batch.to_pandas()
            fh.write(frame.to_json(orient="records", lines=True))
    return csv, jsonl


def v_floor_csv(paths: list[str]) -> None:
    import pyarrow.csv as pacsv

    for _ in pacsv.open_csv(paths[0]):
        pass


def v_floor_jsonl(paths: list[str]) -> None:
    import pyarrow.json as pajson

    for _ in pajson.open_json(paths[1]):
        pass


def v_datacheck(path: str) -> dict[str, int]:
    import datacheck

    report = datacheck.scan(path, executor="inprocess", workers=1, fail_on="never")
    return {"rows": int(report.summary["rows"])}


VARIANTS = {
    "floor-csv": v_floor_csv,
    "datacheck-csv": lambda paths: v_datacheck(paths[0]),
    "floor-jsonl": v_floor_jsonl,
    "datacheck-jsonl": lambda paths: v_datacheck(paths[1]),
}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=str(Path(__file__).parent / "data" / "text"))
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    csv, jsonl = generate(Path(args.data), args.rows)
    sizes = {p.suffix: os.path.getsize(p) for p in (csv, jsonl)}
    load = os.getloadavg()
    best = interleaved(__file__, list(VARIANTS), [str(csv), str(jsonl)], args.repeat)
    table = Table(["variant", "seconds", "× floor", "peak RSS (MB)"], title="text formats")
    for fmt in ("csv", "jsonl"):
        floor = best[f"floor-{fmt}"]["seconds"]
        for v in (f"floor-{fmt}", f"datacheck-{fmt}"):
            r = best[v]
            table.rows.append([v, r["seconds"], r["seconds"] / floor, r["rss_mb"]])
    ratios = {
        f"{fmt}_x_floor": best[f"datacheck-{fmt}"]["seconds"] / best[f"floor-{fmt}"]["seconds"]
        for fmt in ("csv", "jsonl")
    }
    write_results(
        "text",
        {**best, **ratios},
        table=table,
        params={"rows": args.rows, "repeat": args.repeat, "bytes": sizes},
        load_before=load,
    )


if __name__ == "__main__" and not child_main(VARIANTS):
    main()
