"""A batch that passes Arrow's validation can still hold nested columns that do not add up:
its file is corrupt with the reason, never an internal error (found by the fuzzer)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import datacheck


def test_a_nested_field_name_that_is_not_utf8_makes_the_file_corrupt(tmp_path: Path) -> None:
    table = pa.table({"s": pa.array([{"qqqqq": 1.0}, {"qqqqq": float("nan")}])})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data = sink.getvalue().to_pybytes()
    assert data.count(b"qqqqq") == 1  # the name, once, in the schema message
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.arrows").write_bytes(data.replace(b"qqqqq", b"qq\xffqq"))
    (tmp_path / "d" / "b.arrows").write_bytes(data)
    report = datacheck.scan(tmp_path / "d", out=tmp_path / "out")
    files = report.files.set_index("path")
    bad = str(tmp_path / "d" / "a.arrows")
    assert files.loc[bad, "status"] == "corrupt"
    assert "nested fields do not add up" in files.loc[bad, "error"]
    assert files.loc[str(tmp_path / "d" / "b.arrows"), "status"] == "flagged"  # its NaN
