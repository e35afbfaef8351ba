"""Bounded at any size (issue 27): the whole command's memory, and the dirtiest shard's time.

Every variant runs the real command line (``datacheck ...``, or the peer tool) as a child of
a fresh harness child, which samples the summed PSS and RSS of the command's whole process
tree (parent, reader workers) every 10 ms; variants of one case run interleaved, fastest
round counted (``_harness.py``).  Cases:

1. ``huge``: a Parquet file of ``2**--huge-log2`` NaN (2**27: 320 KB on disk) through
   ``datacheck scan`` with its defaults, ``datacheck scan --html``, ``datacheck report`` and
   the Python API (``load_report``: ``findings`` refused past its limit, ``iter_findings``
   counted, ``samples()``, ``plot.by_shard()``).  Bound: 1 GiB for the whole tree.
2. ``dirty``: the scan benchmark's shard (``--rows`` rows, 16 float32 + int64 + a 32-wide
   embedding) with 0 / 10 / 50 / 100 % NaN, ``datacheck scan`` with defaults, each against
   its clean twin.  Target: the 10 % shard within 1.5x of the clean one.
3. ``npz``: an ``.npz`` of three Fortran-order float32 members of ``--npz-mib`` MiB of zeros
   (deflated to ~3 KB per MiB).
4. ``peers``: 6 Parquet + 2 CSV shards of ``--peer-rows`` (200,000) rows (10 float + id + label columns, a few
   NaN) through ``datacheck scan``, polars and DuckDB computing the same counts (null, NaN,
   Inf, |x| > 65504 per column).  Targets: faster than polars, within 1.5x of its tree PSS.

    python benchmarks/bench_bounded.py                       # everything (minutes)
    python benchmarks/bench_bounded.py --cases huge --huge-log2 22 --rounds 1   # smoke
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from _harness import Table, child_main, interleaved, run_tree, write_results

BOUND_MB = 1024
DATACHECK = [sys.executable, "-m", "datacheck"]

_API = """
import datacheck as dc
r = dc.load_report({out!r})
try:
    r.findings
except dc.DatacheckError as exc:
    print("refused:", exc)
n = sum(len(df) for df in r.iter_findings())
assert n == sum(sum(s.values()) for s in r.summary["sites"].values()), n
r.samples(); r.samples(per="path")
r.plot.by_shard()
"""

_POLARS = """
import glob, polars as pl
for f in sorted(glob.glob({root!r} + "/*")):
    lf = pl.scan_parquet(f) if f.endswith(".parquet") else pl.scan_csv(f)
    schema = lf.collect_schema()
    exprs = [pl.col(c).null_count().alias(c + ":null") for c in schema]
    for c, t in schema.items():
        if t in (pl.Float32, pl.Float64):
            exprs += [pl.col(c).is_nan().sum().alias(c + ":nan"),
                      pl.col(c).is_infinite().sum().alias(c + ":inf"),
                      (pl.col(c).abs() > 65504).sum().alias(c + ":extreme")]
    lf.select(exprs).collect()
"""

_DUCKDB = """
import glob, duckdb
con = duckdb.connect()
for f in sorted(glob.glob({root!r} + "/*")):
    src = f"read_parquet('{{f}}')" if f.endswith(".parquet") else f"read_csv('{{f}}')"
    exprs = []
    for name, typ, *_ in con.execute(f"DESCRIBE SELECT * FROM {{src}}").fetchall():
        exprs.append(f'count(*) - count("{{name}}")')
        if typ in ("FLOAT", "DOUBLE"):
            exprs += [f'sum(isnan("{{name}}")::int)', f'sum(isinf("{{name}}")::int)',
                      f'sum((abs("{{name}}") > 65504)::int)']
    con.execute(f"SELECT {{', '.join(exprs)}} FROM {{src}}").fetchall()
"""


# --- data --------------------------------------------------------------------------------


def _huge(root: Path, log2: int) -> Path:
    path = root / f"nan-2e{log2}.parquet"
    if not path.exists():
        pq.write_table(pa.table({"x": np.full(1 << log2, np.nan, np.float32)}), path)
    return path


def _dirty(root: Path, rows: int, fraction: float) -> Path:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_scan import _shard  # the scan benchmark's shard shape

    path = root / f"shard-nan{round(fraction * 100)}.parquet"
    if not path.exists():
        table = _shard(rows, 100, fraction) if fraction else _shard(rows, 100)
        pq.write_table(table, path, row_group_size=256_000)
    return path


def _npz(root: Path, mib: int) -> Path:
    path = root / f"fortran-3x{mib}mib.npz"
    if not path.exists():
        a = np.zeros((16384, (mib << 20) // (16384 * 4)), dtype=np.float32, order="F")
        np.savez_compressed(path, a=a, b=a, c=a)
    return path


def _peers(root: Path, rows: int) -> Path:
    folder = root / f"peers-{rows}"
    if folder.exists():
        return folder
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(8):
        n = rows
        cols: dict[str, object] = {"id": np.arange(n) + i * n}
        for j in range(10):
            x = rng.standard_normal(n).astype(np.float32 if j % 2 else np.float64)
            x[rng.integers(0, n, 3)] = np.nan
            cols[f"f{j}"] = x
        cols["label"] = rng.integers(0, 10, n)
        table = pa.table(cols)
        if i < 6:
            pq.write_table(table, folder / f"part-{i}.parquet")
        else:
            pacsv.write_csv(table, folder / f"part-{i}.csv")
    return folder


# --- variants (each in a fresh child, which runs the command and samples its tree) --------


def _fresh_out(args: list[str]) -> str:
    out = args[-1]
    shutil.rmtree(out, ignore_errors=True)
    return out


def v_scan(args: list[str]) -> dict[str, object]:
    """``PATH [FLAGS...] OUT``: ``datacheck scan`` with its defaults (and FLAGS)."""
    out = _fresh_out(args)
    return run_tree([*DATACHECK, "scan", args[0], "--out", out, "--no-progress", *args[1:-1]])


def v_report(args: list[str]) -> dict[str, object]:
    return run_tree([*DATACHECK, "report", args[0]])


def v_api(args: list[str]) -> dict[str, object]:
    return run_tree([sys.executable, "-c", _API.format(out=args[0])])


def v_tool(args: list[str]) -> dict[str, object]:
    code = {"polars": _POLARS, "duckdb": _DUCKDB}[args[0]].format(root=args[1])
    return run_tree([sys.executable, "-c", code])


VARIANTS = {"scan": v_scan, "report": v_report, "api": v_api, "tool": v_tool}


# --- parent side ---------------------------------------------------------------------------


def _run(name: str, args: list[str], rounds: int) -> dict[str, object]:
    """The fastest of ``rounds`` runs of one command (its own interleaving is by case)."""
    return interleaved(__file__, [name], args, rounds)[name]


def case_huge(root: Path, out: Path, log2: int, rounds: int, table: Table) -> dict:
    data = _huge(root, log2)
    res = {
        "scan": _run("scan", [str(data), str(out / "h")], rounds),
        "scan --html": _run("scan", [str(data), "--html", str(out / "hh")], rounds),
        "report": _run("report", [str(out / "h")], rounds),
        "python API": _run("api", [str(out / "h")], rounds),
    }
    for what, r in res.items():
        ok = "yes" if r["tree_rss_mb"] <= BOUND_MB else "**no**"
        table.rows.append([f"2^{log2} NaN: {what}", r["seconds"], "", r["tree_rss_mb"], ok])
    return res


def case_dirty(root: Path, out: Path, rows: int, rounds: int, table: Table) -> dict:
    shards = {f: _dirty(root, rows, f) for f in (0.0, 0.1, 0.5, 1.0)}
    res: dict[str, dict] = {}
    for _ in range(rounds):
        for f, path in shards.items():
            r = _run("scan", [str(path), str(out / f"d{f}")], 1)
            key = f"{round(f * 100)}% NaN"
            if key not in res or r["seconds"] < res[key]["seconds"]:
                res[key] = r
    clean = res["0% NaN"]["seconds"]
    for key, r in res.items():
        ok = "" if key == "0% NaN" else ("yes" if r["seconds"] <= 1.5 * clean else "**no**")
        ratio = r["seconds"] / clean
        table.rows.append(
            [f"{key} shard ({rows:,} rows)", r["seconds"], ratio, r["tree_rss_mb"], ok]
        )
    return res


def case_npz(root: Path, out: Path, mib: int, rounds: int, table: Table) -> dict:
    r = _run("scan", [str(_npz(root, mib)), str(out / "n")], rounds)
    ok = "yes" if r["tree_rss_mb"] <= BOUND_MB else "**no**"
    table.rows.append(
        [f"npz, 3 Fortran members of {mib} MiB", r["seconds"], "", r["tree_rss_mb"], ok]
    )
    return {"scan": r}


def case_peers(root: Path, out: Path, rows: int, rounds: int, table: Table) -> dict:
    folder = _peers(root, rows)
    res: dict[str, dict] = {}
    for _ in range(rounds):
        for name, (variant, args) in {
            "datacheck": ("scan", [str(folder), str(out / "p")]),
            "polars": ("tool", ["polars", str(folder)]),
            "duckdb": ("tool", ["duckdb", str(folder)]),
        }.items():
            r = _run(variant, args, 1)
            if name not in res or r["seconds"] < res[name]["seconds"]:
                res[name] = r
    polars = res["polars"]
    for name, r in res.items():
        table.rows.append(
            [
                f"peers: {name}",
                r["seconds"],
                r["seconds"] / polars["seconds"],
                r["tree_rss_mb"],
                f"PSS {r['tree_pss_mb']:.0f} MB ({r['tree_pss_mb'] / polars['tree_pss_mb']:.2f}x polars)",
            ]
        )
    return res


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", default=str(Path(__file__).parent / "data" / "bounded"))
    ap.add_argument("--cases", default="huge,dirty,npz,peers")
    ap.add_argument("--huge-log2", type=int, default=27)
    ap.add_argument("--rows", type=int, default=960_000)
    ap.add_argument("--npz-mib", type=int, default=768)
    ap.add_argument("--peer-rows", type=int, default=200_000, help="rows per peers shard")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--name", default="bounded")
    args = ap.parse_args()
    root = Path(args.data)
    root.mkdir(parents=True, exist_ok=True)
    cases = set(args.cases.split(","))
    load = os.getloadavg()
    table = Table(
        ["case", "seconds", "ratio", "tree peak RSS (MB)", "within target"],
        title="bounded at any size",
    )
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="dc-bounded-") as tmp:
        out = Path(tmp)
        if "huge" in cases:
            results["huge"] = case_huge(root, out, args.huge_log2, args.rounds, table)
        if "dirty" in cases:
            results["dirty"] = case_dirty(root, out, args.rows, args.rounds, table)
        if "npz" in cases:
            results["npz"] = case_npz(root, out, args.npz_mib, args.rounds, table)
        if "peers" in cases:
            results["peers"] = case_peers(root, out, args.peer_rows, args.rounds, table)
    write_results(args.name, results, table=table, params=vars(args), load_before=load)


if __name__ == "__main__" and not child_main(VARIANTS):
    main()
