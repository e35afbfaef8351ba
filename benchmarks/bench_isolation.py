"""What crash isolation costs: small scans end to end, readers in a worker vs in-process.

Each variant is ``datacheck scan`` run through ``datacheck.cli.main`` in a fresh process
(imports, worker start-up and report included):

- ``demo``: the demo dataset with its schema (5 files, 4,000 rows);
- ``small``: three 1,000-row Parquet files;
- ``crash``: ``small`` plus a 12-byte Feather v1 file on which pyarrow segfaults (isolated only:
  in-process, that scan dies with no report).

``-isolated`` is the default (one worker process, started while the files are listed);
``-inprocess`` is ``--executor inprocess --no-isolation``, the old default path.

    python benchmarks/bench_isolation.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Table, child_main, interleaved, write_results  # noqa: E402

CASES = ("demo", "small", "crash")


def _scan(args: list[str], extra: list[str]) -> dict[str, Any]:
    from datacheck.cli import main

    root, case = Path(args[0]), args[1]
    data = root / ("demo" if case == "demo" else case)
    argv = ["scan", str(data), "--out", str(root / f"out-{case}"), "--no-progress", *extra]
    if case == "demo":
        argv += ["--schema", str(data / "schema.yaml")]
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return {"exit_code": code}


VARIANTS = {
    "isolated": lambda a: _scan(a, []),
    "inprocess": lambda a: _scan(a, ["--executor", "inprocess", "--no-isolation"]),
}


def _write_data(root: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from datacheck._demo import write_demo

    write_demo(str(root / "demo"))
    for case in ("small", "crash"):
        (root / case).mkdir()
        for i in range(3):
            x = np.random.default_rng(i).standard_normal(1000)
            pq.write_table(pa.table({"x": x}), root / case / f"s{i}.parquet")
    (root / "crash" / "bad.feather").write_bytes(b"FEA1\0\0\0\0FEA1")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    opts = p.parse_args()
    load = list(os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="dc-bench-iso-") as tmp:
        root = Path(tmp)
        _write_data(root)
        results: dict[str, Any] = {}
        for case in CASES:
            variants = ["isolated"] if case == "crash" else ["isolated", "inprocess"]
            best = interleaved(__file__, variants, [str(root), case], rounds=opts.rounds)
            results[case] = best
    rows = []
    for case, best in results.items():
        iso = best["isolated"]
        inp = best.get("inprocess")
        rows.append(
            [
                case,
                iso["seconds"],
                inp["seconds"] if inp else "dies (SIGSEGV)",
                f"+{iso['seconds'] - inp['seconds']:.2f} s" if inp else "",
                iso["exit_code"],
            ]
        )
    table = Table(
        ["scan", "isolated (default) s", "in-process s", "cost", "exit"],
        rows,
        title="Crash isolation: small scans end to end (fresh process, fastest round)",
    )
    write_results(
        "isolation", results, table=table, params={"rounds": opts.rounds}, load_before=load
    )


if __name__ == "__main__":
    if not child_main(VARIANTS):
        main()
