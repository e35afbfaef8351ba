"""``datacheck demo DIR``: a small sharded dataset with planted faults and a schema.

The faults are listed in :data:`PLANTED` (file, row, column, check) so tests and the README
can check that a scan finds every one of them, and nothing else.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

ROWS = 1000
EMBED = 8
FEATURES = ("x0", "x1", "x2", "x3")

PLANTED: tuple[tuple[str, int | None, str | None, str], ...] = (
    ("train/shard-001.parquet", 17, "x1", "nan"),
    ("train/shard-001.parquet", 503, "x1", "nan"),
    ("train/shard-001.parquet", 250, "embedding", "nan"),
    ("train/shard-002.parquet", 42, "x2", "inf"),
    ("train/shard-002.parquet", 99, "x2", "inf"),
    ("train/shard-002.parquet", 7, "x0", "extreme"),
    ("train/shard-002.parquet", 600, "embedding", "extreme"),
    ("train/shard-003.csv", 5, "x3", "null"),
    ("train/shard-003.csv", 8, "x0", "inf"),
    ("train/shard-003.csv", 11, "x1", "nan"),
    ("train/shard-003.csv", 20, "label", "out_of_range"),
    ("train/shard-004.parquet", None, None, "corrupt"),
)
"""Every fault the demo plants: (path relative to DIR, row, column, check)."""


def _frame(seed: int, rows: int = ROWS) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    cols: dict[str, np.ndarray] = {"id": np.arange(seed * rows, (seed + 1) * rows, dtype=np.int64)}
    for name in FEATURES:
        cols[name] = rng.standard_normal(rows).astype(np.float32)
    cols["label"] = rng.integers(0, 10, rows).astype(np.int64)
    cols["embedding"] = rng.standard_normal((rows, EMBED)).astype(np.float32)
    return cols


def _table(cols: dict[str, np.ndarray], embedding: bool = True) -> pa.Table:
    arrays = {k: pa.array(v) for k, v in cols.items() if k != "embedding"}
    if embedding:
        flat = pa.array(cols["embedding"].reshape(-1))
        arrays["embedding"] = pa.FixedSizeListArray.from_arrays(flat, EMBED)
    return pa.table(arrays)


def _write_parquet(table: pa.Table, path: Path) -> None:
    pq.write_table(table, path, row_group_size=256, write_page_checksum=True)


def _schema_yaml() -> str:
    import pandera.pandas as pa_

    from datacheck.checks._pandas import register_pandera_checks

    register_pandera_checks()
    cols = {"id": pa_.Column("int64", nullable=False)}
    for name in FEATURES:
        cols[name] = pa_.Column(
            "float32",
            checks=[pa_.Check.finite(), pa_.Check.max_abs(max_abs=100.0)],  # type: ignore[attr-defined]
            nullable=False,
        )
    cols["label"] = pa_.Column("int64", checks=[pa_.Check.in_range(0, 9)], nullable=False)
    # Text shards (CSV) cannot hold vectors, so the embedding column is optional.
    cols["embedding"] = pa_.Column(
        None,
        checks=[pa_.Check.max_abs(max_abs=100.0)],  # type: ignore[attr-defined]
        nullable=False,
        required=False,
    )
    schema = pa_.DataFrameSchema(cols, strict=True, name="demo")
    header = (
        "# datacheck demo schema: pandera's own YAML (DataFrameSchema.to_yaml()).\n"
        "# finite / max_abs are datacheck checks registered through pandera's extension API.\n"
    )
    return header + schema.to_yaml()


def write_demo(dest: str | Path) -> Path:
    """Write the demo dataset into ``dest`` and return the folder."""
    root = Path(dest)
    train = root / "train"
    train.mkdir(parents=True, exist_ok=True)
    _write_parquet(_table(_frame(0)), train / "shard-000.parquet")

    c = _frame(1)
    c["x1"][[17, 503]] = np.nan
    c["embedding"][250, 3] = np.nan
    _write_parquet(_table(c), train / "shard-001.parquet")

    c = _frame(2)
    c["x2"][42], c["x2"][99] = np.inf, -np.inf
    c["x0"][7] = 1.5e6
    c["embedding"][600, 0] = 3e5
    _write_parquet(_table(c), train / "shard-002.parquet")

    _write_csv(train / "shard-003.csv")

    whole = train / "shard-004.parquet"
    _write_parquet(_table(_frame(4)), whole)
    data = whole.read_bytes()
    whole.write_bytes(data[: len(data) // 2])  # truncated: the footer is gone

    (root / "schema.yaml").write_text(_schema_yaml())
    return root


def _write_csv(path: Path) -> None:
    cols = _frame(3)
    table = _table(cols, embedding=False)
    buf = pa.BufferOutputStream()
    pacsv.write_csv(table, buf)
    lines = buf.getvalue().to_pybytes().decode().splitlines()
    header = lines[0].replace('"', "").split(",")
    rows = [line.split(",") for line in lines[1:]]

    def put(row: int, col: str, text: str) -> None:
        rows[row][header.index(col)] = text

    put(5, "x3", "")
    put(8, "x0", "inf")
    put(11, "x1", "nan")
    put(20, "label", "12")
    path.write_text("\n".join([",".join(header), *(",".join(r) for r in rows)]) + "\n")
