"""A unit's findings go to its part file in bounded chunks as they come, and the report and the
manifest stay exact: every count, every bad row."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import datacheck
from datacheck import findings as fnd
from datacheck.engine import _result, _unit
from datacheck.formats import WorkUnit

NAN = float("nan")


def _nan_file(path: Path, n: int) -> Path:
    x = np.zeros(n)
    x[::2] = NAN
    y = np.ones(n)
    y[1::5] = np.inf
    pq.write_table(pa.table({"x": x, "y": y}), path, row_group_size=n)
    return path


def test_findings_past_the_spill_size_stream_to_the_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_result, "SPILL_ROWS", 1000)
    monkeypatch.setattr(_unit, "CHECK_ROWS", 4096)
    n = 20_000
    path = _nan_file(tmp_path / "bad.parquet", n)
    parts = tmp_path / "parts"
    parts.mkdir()
    st = os.stat(path)
    res = _unit.scan_unit(WorkUnit(str(path), "parquet", st.st_size, st.st_mtime), None, str(parts))
    assert res.counts == {"nan": n // 2, "inf": n // 5}
    assert res.findings_rows == n // 2 + n // 5 and res.table is None
    assert res.part_file is not None and fnd.part_is_readable(res.part_file)
    tables = list(fnd.iter_part(res.part_file))
    assert len(tables) > 5  # written as it went, not at the end
    assert max(t.num_rows for t in tables) < 1000 + 4096
    found = pa.concat_tables(tables)
    assert found.num_rows == res.findings_rows
    nan_rows = found.filter(pc.equal(found["check"].cast(pa.string()), "nan"))["row"].to_numpy()
    assert np.array_equal(np.sort(nan_rows), np.arange(0, n, 2))
    assert fnd.read_part(res.part_file).num_rows == res.findings_rows


def test_the_manifest_names_every_bad_row_of_a_spilled_unit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_result, "SPILL_ROWS", 1000)
    monkeypatch.setattr(_unit, "CHECK_ROWS", 4096)
    n = 20_000
    path = _nan_file(tmp_path / "bad.parquet", n)
    report = datacheck.scan(str(path), out=tmp_path / "out", isolate=False)
    (entry,) = report.data["files"]
    assert entry["counts"] == {"inf": n // 5, "nan": n // 2}
    manifest = fnd.read_manifest(report.manifest_path)
    assert manifest.num_rows == n // 2 + n // 5
    inf_rows = manifest.filter(pc.equal(manifest["check"], "inf"))["row"].to_numpy()
    assert np.array_equal(np.sort(inf_rows), np.arange(1, n, 5))


def test_a_part_cut_short_is_not_readable(tmp_path: Path) -> None:
    """Resume checks parts by their message headers (not decompressing them): a part cut
    inside a message or empty is scanned again; a part of an older version (IPC file) reads."""
    from datacheck.checks._registry import Severity

    table = fnd.findings_table([fnd.Finding("p", "nan", Severity.ERROR, row=i) for i in range(9)])
    part = Path(fnd.write_part(table, tmp_path, "unit"))
    assert fnd.part_is_readable(part)
    data = part.read_bytes()
    for cut in (0, 10, len(data) // 2, len(data) - 1):
        part.write_bytes(data[:cut])
        assert not fnd.part_is_readable(part), cut
    old = tmp_path / "old.arrow"
    with pa.ipc.new_file(old, table.schema) as writer:
        writer.write_table(table.unify_dictionaries())
    assert fnd.part_is_readable(old) and fnd.read_part(old).num_rows == 9
    assert [t.num_rows for t in fnd.iter_part(old)] == [9]
