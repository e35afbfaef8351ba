"""A scan report with one file per tier of the gate, for the plot and HTML tests.

Written by pyarrow (the Parquet files) and scanned by datacheck: a corrupt file, a file that
``drift`` fails whole, a file with one NaN, a file with 1,396 fp16-overflowing values, and a
clean one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import datacheck as dc

GATE_ORDER = ["bad.parquet", "drift.parquet", "nan.parquet", "warn.parquet"]
"""The flagged files, as the gate ranks them (corrupt, failed whole, row errors, warnings)."""


def gate_report(root: Path) -> dc.Report:
    """One file per tier: corrupt, drift (an error that fails the file whole), one NaN (a row
    error), 1,396 fp16-overflowing values (warnings; their column also drifts from the other
    shards', a warning) and a clean one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = root / "data"
    data.mkdir(parents=True)
    rng = np.random.default_rng(3)
    for name in ("clean", "drift", "nan", "warn"):
        x = rng.normal(0, 1, 2000) * (1000 if name == "drift" else 1)
        w = rng.normal(0, 1, 2000)
        if name == "nan":
            x[17] = np.nan
        if name == "warn":
            w[:1396] = 1e5
        pq.write_table(pa.table({"x": x, "w": w}), data / f"{name}.parquet")
    (data / "bad.parquet").write_bytes((data / "clean.parquet").read_bytes()[:200])
    schema = root / "schema.yaml"
    schema.write_text(
        "columns:\n  x:\n    dtype: float64\n    checks:\n"
        "    - {mean: 0.0, std: 1.0, zscore_max: .inf, max_mean_shift: 3.0, max_std_ratio: 3.0,\n"
        "       options: {check_name: reference_stats}}\n"
        "  w:\n    dtype: float64\n"
    )
    return dc.scan(data, schema, out=root / "out", executor="inprocess", progress=False)
