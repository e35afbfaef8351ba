"""A seeded dataset with its truth: 6 Parquet and 2 CSV shards (pandas writes them), faults
planted at known rows, ``datacheck infer`` on the two clean shards, ``datacheck scan`` with
default options.  Every planted fault is found at its file, row and column; nothing else is
(no false drift: outliers stay rows, and only the shard drifted whole drifts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import datacheck as dc

ROWS = 5000
FLOATS = [f"f{i}" for i in range(10)]


def _shard(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(rng.standard_normal((ROWS, len(FLOATS))), columns=FLOATS)
    frame = frame.astype("float32")
    frame.insert(0, "id", np.arange(ROWS) + seed * ROWS)
    frame["label"] = rng.integers(0, 10, ROWS)
    return frame


def _plant(root: Path) -> tuple[set[tuple[str, int, str]], set[tuple[str, str]]]:
    """Write the shards; return the planted (file, row, column) sites and drifted (file, column)."""
    rng = np.random.default_rng(123)
    sites: set[tuple[str, int, str]] = set()
    frames = {f"part-{i}.parquet": _shard(i) for i in range(6)}
    frames.update({f"part-{i}.csv": _shard(i) for i in (6, 7)})

    def put(name: str, column: str, value: float, k: int) -> None:
        rows = rng.choice(ROWS, k, replace=False)
        frames[name].loc[rows, column] = value
        sites.update((name, int(r), column) for r in rows)

    put("part-2.parquet", "f1", np.nan, 4)
    put("part-2.parquet", "f2", np.inf, 2)
    put("part-3.parquet", "f3", -np.inf, 2)
    put("part-3.parquet", "f4", 70000.0, 3)  # overflows float16
    put("part-4.parquet", "f5", 1e6, 3)  # outliers only: rows, no drift
    put("part-6.csv", "f6", np.inf, 2)
    put("part-7.csv", "f7", -2e6, 3)  # outliers only, in a CSV
    labels = rng.choice(ROWS, 3, replace=False)
    frames["part-3.parquet"].loc[labels, "label"] = [10, 12, -1]  # observed [0, 9]
    sites.update(("part-3.parquet", int(r), "label") for r in labels)
    nulls = rng.choice(ROWS, 5, replace=False)
    frames["part-4.parquet"].loc[nulls, "f8"] = np.nan  # pandas writes these as null
    sites.update(("part-4.parquet", int(r), "f8") for r in nulls)
    frames["part-5.parquet"]["f9"] *= 1000.0  # a unit bug: the whole shard drifts
    for name, frame in frames.items():
        path = root / name
        frame.to_parquet(path, index=False) if name.endswith(".parquet") else frame.to_csv(
            path, index=False
        )
    # A garbage line in a CSV (a truncated write), with an fp16 overflow after it.
    path = root / "part-7.csv"
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(3001, "!!garbage!! @@ truncated write @@,##,\n")  # becomes data row 3000
    path.write_text("".join(lines))
    shifted = {(n, r + (r >= 3000), c) for n, r, c in sites if n == "part-7.csv"}
    sites = {s for s in sites if s[0] != "part-7.csv"} | shifted | {("part-7.csv", 3000, "")}
    return sites, {("part-5.parquet", "f9")}


def test_every_planted_fault_is_found_at_its_row_and_nothing_else(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    planted, drifted = _plant(data)
    schema = tmp_path / "s.yaml"
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "datacheck", *map(str, a)], capture_output=True, text=True
    )
    r = run("infer", data / "part-0.parquet", data / "part-1.parquet", "--out", schema)
    assert r.returncode == 0, r.stderr
    r = run("scan", data, "--schema", schema, "--out", tmp_path / "r")
    assert r.returncode == 1, r.stdout + r.stderr
    f = dc.load_report(tmp_path / "r").findings
    name = f["path"].map(lambda p: Path(p).name)
    rows = f[f.row.notna()]
    found = {
        (n, int(row), c if isinstance(c, str) else "")
        for n, row, c in zip(name[rows.index], rows.row, rows.column, strict=True)
    }
    assert found == planted  # every planted site, and no other row
    columnwise = f[f.row.isna()]
    got = {
        (Path(p).name, c, k)
        for p, c, k in zip(columnwise.path, columnwise.column, columnwise.check, strict=True)
    }
    assert {(n, c) for n, c, _ in got} == drifted, got  # only the drifted shard, no false drift
    assert {k for _, _, k in got} <= {"drift", "unnormalized"}
    bad_line = f[(name == "part-7.csv") & (f.check == "corrupt")]
    assert bad_line.value.iloc[0].startswith("line 3002: 3 fields, expected 12")
