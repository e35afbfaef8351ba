"""Shared factories: tiny files with planted faults, written by the tests themselves."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

# MosaicML streaming imports torchvision for its vision datasets; PyPI has none for the CPU
# torch the tests pin, so streaming's vision subpackage is made empty in this process and its
# children where torchvision is missing (tests/_shims/README.md).
_SHIMS = str(Path(__file__).parent / "_shims")
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), _SHIMS) if p)
sys.path.append(_SHIMS)
importlib.import_module("sitecustomize").install()

TABULAR_FORMATS = ("parquet", "csv", "arrow", "jsonl")
EXT = {"parquet": ".parquet", "csv": ".csv", "arrow": ".arrow", "jsonl": ".jsonl"}


def write_table(table: pa.Table, path: Path, fmt: str, **kwargs) -> Path:
    """Write ``table`` in one of the tabular formats."""
    if fmt == "parquet":
        pq.write_table(table, path, **kwargs)
    elif fmt == "csv":
        pacsv.write_csv(table, path)
    elif fmt == "arrow":
        feather.write_feather(table, path, compression="uncompressed")
    elif fmt == "jsonl":
        with open(path, "w") as fh:
            for row in table.to_pylist():
                fh.write(json.dumps(row) + "\n")  # NaN/Infinity as Python's json writes them
    else:  # pragma: no cover
        raise ValueError(fmt)
    return path


def planted_table(rows: int = 200, seed: int = 0) -> tuple[pa.Table, set[tuple[int, str, str]]]:
    """A float/int table with NaN, +/-Inf, an fp16-overflowing value and a null planted."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(rows)
    b = rng.standard_normal(rows).astype(np.float32)
    a[[3, 150]] = np.nan
    a[10] = np.inf
    b[20] = -np.inf
    b[77] = 1e5  # beyond the float16 maximum 65504
    b_mask = np.zeros(rows, dtype=bool)
    b_mask[120] = True  # a null
    table = pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "a": pa.array(a),
            "b": pa.array(b, mask=b_mask),
            "name": pa.array([f"r{i}" for i in range(rows)]),
        }
    )
    expected = {
        (3, "a", "nan"),
        (150, "a", "nan"),
        (10, "a", "inf"),
        (20, "b", "inf"),
        (77, "b", "extreme"),
        (120, "b", "null"),
    }
    return table, expected


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from datacheck._demo import write_demo

    return write_demo(tmp_path_factory.mktemp("demo"))


def site_set(findings) -> set[tuple]:
    """(row, column, check) of value-level findings, from a findings DataFrame."""
    import pandas as pd

    return {(int(r.row), r.column, r.check) for r in findings.itertuples() if not pd.isna(r.row)}
