"""Tensor scan vs the NumPy floor on ``.npy`` shards, each variant in a fresh process.

Writes ~1 GB (``--size-gb``) of float32 shards shaped ``[N, 3, 64, 64]`` with a few planted
NaN, then runs, in one invocation and each in its own subprocess:

* ``floor``: per shard ``np.load(mmap_mode="r")`` + ``np.isfinite(a).all()``;
* ``scan``: ``datacheck.scan(dir, executor="inprocess", workers=1)`` (report and manifest
  written; every planted NaN must be found at the right sample).

Each variant runs ``--repeats`` times (default 2) alternating floor/scan; the first run of each
warms the page cache and is dropped, the warm runs count (their median time and the largest
peak; with the default 2 repeats: the second run).  Times exclude interpreter start-up and imports
(the scan child first scans a tiny file of its own to load datacheck's lazy imports).
Peak memory is read in the child: ``VmHWM`` (this process's own peak RSS) and ``ru_maxrss``
(which Linux carries across exec, so it can include the launcher's peak; the launcher stays
small here).

    python benchmarks/bench_tensor.py             # ~1 GB
    python benchmarks/bench_tensor.py --small     # ~64 MB smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _harness import Table, write_results

SAMPLE_SHAPE = (3, 64, 64)
SAMPLE_BYTES = 4 * 3 * 64 * 64


def write_shards(root: Path, size_gb: float, shard_mb: int, seed: int = 0) -> list[tuple[str, int]]:
    """Write the shards (streamed: the writer's RSS stays small); return planted (file, sample)."""
    root.mkdir(parents=True, exist_ok=True)
    total = int(size_gb * (1 << 30)) // SAMPLE_BYTES
    per_shard = max(1, (shard_mb << 20) // SAMPLE_BYTES)
    rng = np.random.default_rng(seed)
    planted: list[tuple[str, int]] = []
    for i, start in enumerate(range(0, total, per_shard)):
        n = min(per_shard, total - start)
        path = root / f"shard-{i:04d}.npy"
        bad = sorted(rng.choice(n, size=min(2, n), replace=False).tolist())
        planted += [(str(path), int(b)) for b in bad]
        header = {"descr": "<f4", "fortran_order": False, "shape": (n, *SAMPLE_SHAPE)}
        with open(path, "wb") as fh:
            np.lib.format.write_array_header_1_0(fh, header)
            for lo in range(0, n, 256):
                block = rng.standard_normal((min(256, n - lo), *SAMPLE_SHAPE), dtype=np.float32)
                for b in bad:
                    if lo <= b < lo + len(block):
                        block[b - lo, 1, 2, 3] = np.nan
                fh.write(block.tobytes())
    return planted


def _peaks() -> dict[str, float]:
    hwm = 0.0
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return {
        "vmhwm_mb": hwm,
        "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def child_floor(root: str) -> dict[str, float]:
    files = sorted(Path(root).glob("*.npy"))
    start = time.perf_counter()
    bad = 0
    for f in files:
        a = np.load(f, mmap_mode="r")
        bad += not bool(np.isfinite(a).all())
        del a
    return {"seconds": time.perf_counter() - start, "flagged_files": bad}


def child_scan(root: str, planted: str) -> dict[str, float]:
    import datacheck

    out = tempfile.mkdtemp(prefix="bench-tensor-")
    # Warm-up on a tiny file of its own: lazy imports (pyarrow.parquet, pandas, the readers)
    # are not timed, as the floor's ``import numpy`` is not.
    np.save(Path(out) / "warm.npy", np.zeros((2, 3), np.float32))
    datacheck.scan(
        str(Path(out) / "warm.npy"), executor="inprocess", workers=1, out=Path(out) / "w"
    )
    out = str(Path(out) / "run")
    start = time.perf_counter()
    report = datacheck.scan(root, executor="inprocess", workers=1, out=out)
    seconds = time.perf_counter() - start
    found = {(r.path, int(r.row)) for r in report.findings.itertuples() if r.check == "nan"}
    expected = {(p, r) for p, r in json.loads(Path(planted).read_text())}
    shutil.rmtree(Path(out).parent, ignore_errors=True)
    assert found == expected, (sorted(found)[:5], sorted(expected)[:5])
    return {"seconds": seconds, "flagged_files": len({p for p, _ in found})}


def child_units(root: str, planted: str) -> dict[str, float]:
    """Readers + checks only: ``scan_unit`` per file, no report, manifest, parts or journal."""
    from datacheck.engine._discover import discover, plan_units
    from datacheck.engine._unit import scan_unit

    warm = Path(tempfile.mkdtemp(prefix="bench-tensor-")) / "warm.npy"
    np.save(warm, np.zeros((2, 3), np.float32))
    scan_unit(plan_units([(str(warm), str(warm.parent))])[0], None)
    shutil.rmtree(warm.parent, ignore_errors=True)
    start = time.perf_counter()
    results = [scan_unit(u, None) for u in plan_units(discover([root])[0])]
    seconds = time.perf_counter() - start
    nan = sum(r.counts.get("nan", 0) for r in results)
    assert nan == len(json.loads(Path(planted).read_text())), nan
    return {"seconds": seconds, "flagged_files": sum(1 for r in results if r.counts)}


def run_child(variant: str, root: Path, planted: Path) -> dict[str, float]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        variant,
        "--dir",
        str(root),
        "--planted",
        str(planted),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.0, help="total size of the shards (GiB)")
    ap.add_argument("--small", action="store_true", help="smoke run: 64 MiB in 16 MiB shards")
    ap.add_argument("--shard-mb", type=int, default=128, help="shard size (MiB)")
    ap.add_argument("--repeats", type=int, default=2, help="runs per variant; the last counts")
    ap.add_argument("--dir", help="data folder (default: a temporary one, removed after)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--child", choices=["floor", "scan", "units"], help=argparse.SUPPRESS)
    ap.add_argument("--planted", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        if args.child == "floor":
            fn = child_floor(args.dir)
        else:
            fn = (child_scan if args.child == "scan" else child_units)(args.dir, args.planted)
        print(json.dumps({**fn, **_peaks()}))
        return 0
    if args.small:
        args.size_gb, args.shard_mb = 1 / 16, 16
    tmp = None if args.dir else tempfile.mkdtemp(prefix="bench-tensor-data-")
    root = Path(args.dir or tmp)
    try:
        planted = write_shards(root, args.size_gb, args.shard_mb)
        planted_file = root.parent / f"{root.name}.planted.json"
        planted_file.write_text(json.dumps(planted))
        data_mb = sum(f.stat().st_size for f in root.glob("*.npy")) / (1 << 20)
        runs: dict[str, list[dict[str, float]]] = {"floor": [], "scan": [], "units": []}
        for _ in range(args.repeats):
            for variant in runs:
                runs[variant].append(run_child(variant, root, planted_file))
        result = _summarise(runs, data_mb, len(list(root.glob("*.npy"))), len(planted))
        print(_table(result))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
        table = Table(
            ["variant", "seconds", "× floor", "peak RSS (MiB)"], title="tensor scan (.npy)"
        )
        for name, key in (
            ("floor: np.load(mmap) + isfinite", "floor"),
            ("datacheck scan", "scan"),
            ("readers + checks", "units"),
        ):
            v = result[key]
            table.rows.append(
                [name, v["seconds"], v["seconds"] / result["floor"]["seconds"], v["vmhwm_mb"]]
            )
        write_results(
            "tensor", result, table=table, params={k: str(v) for k, v in vars(args).items()}
        )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            Path(f"{tmp}.planted.json").unlink(missing_ok=True)
    return 0


def _warm(runs: list[dict[str, float]]) -> dict[str, float]:
    warm = runs[1:] or runs
    return {
        "seconds": float(np.median([r["seconds"] for r in warm])),
        "vmhwm_mb": max(r["vmhwm_mb"] for r in warm),
        "ru_maxrss_mb": max(r["ru_maxrss_mb"] for r in warm),
    }


def _summarise(runs: dict, data_mb: float, shards: int, planted: int) -> dict:
    floor, scan, units = _warm(runs["floor"]), _warm(runs["scan"]), _warm(runs["units"])
    return {
        "data_mb": round(data_mb, 1),
        "shards": shards,
        "planted_nan": planted,
        "cores": os.cpu_count(),
        "runs": runs,
        "floor": floor,
        "scan": scan,
        "units": units,
        "ratio": scan["seconds"] / floor["seconds"],
        "units_ratio": units["seconds"] / floor["seconds"],
    }


def _table(r: dict) -> str:
    f, s, u = r["floor"], r["scan"], r["units"]
    rows = [
        f"{r['data_mb']:.0f} MiB float32 .npy, {r['shards']} shards [N, 3, 64, 64], "
        f"{r['planted_nan']} planted NaN; median of {max(len(r['runs']['scan']) - 1, 1)} warm run(s), "
        f"{r['cores']} cores",
        "",
        "| variant | seconds | GB/s | peak RSS (VmHWM) | ru_maxrss |",
        "|---|---|---|---|---|",
    ]
    variants = (
        ("floor: np.load(mmap) + isfinite().all()", f),
        ("datacheck scan (in-process, 1 worker)", s),
        ("readers + checks only (scan_unit, no report/manifest I/O)", u),
    )
    for name, v in variants:
        gbs = r["data_mb"] / 1024 / v["seconds"]
        rows.append(
            f"| {name} | {v['seconds']:.3f} | {gbs:.2f} | {v['vmhwm_mb']:.0f} MiB | {v['ru_maxrss_mb']:.0f} MiB |"
        )
    rows.append(
        f"\nscan / floor = {r['ratio']:.2f}x; readers + checks / floor = {r['units_ratio']:.2f}x"
    )
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
