"""Extension-typed columns are checked through their storage: Arrow's canonical
``fixed_shape_tensor`` (what pyarrow and Ray write for tensor columns) and ``datasets``'
``Array2D`` once ``datasets`` is imported in the scanning process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datacheck


def _sites(path: Path) -> set[tuple[int, str, str]]:
    report = datacheck.scan(str(path), executor="inprocess", workers=1)
    return {(int(r.row), r.column, r.check) for r in report.findings.itertuples()}


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_fixed_shape_tensor_values_are_checked(fmt: str, tmp_path: Path) -> None:
    values = np.ones((5, 2, 3), np.float32)
    values[3, 1, 2] = np.nan
    values[1, 0, 0] = np.inf
    table = pa.table({"t": pa.FixedShapeTensorArray.from_numpy_ndarray(values)})
    path = tmp_path / f"x.{fmt}"
    if fmt == "parquet":
        pq.write_table(table, path)
    else:
        with pa.ipc.new_file(path, table.schema) as w:
            w.write_table(table)
    assert _sites(path) == {(3, "t", "nan"), (1, "t", "inf")}


def test_datasets_array2d_read_as_its_extension_type(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")  # imported: pyarrow now knows its extension
    arr = [np.full((2, 2), np.nan if i == 2 else 1.0, np.float32) for i in range(4)]
    features = datasets.Features({"a": datasets.Array2D((2, 2), "float32")})
    datasets.Dataset.from_dict({"a": arr}, features=features).to_parquet(
        str(tmp_path / "a.parquet")
    )
    column = pq.read_table(tmp_path / "a.parquet").column("a")
    assert isinstance(column.type, pa.BaseExtensionType)
    assert _sites(tmp_path / "a.parquet") == {(2, "a", "nan")}
