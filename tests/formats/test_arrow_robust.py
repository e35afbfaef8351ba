"""Arrow IPC / Feather files that are damaged or use every encoding: validated, checked
element-wise, and columns that hold no numbers skipped by type."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import datacheck

NAN = float("nan")


def _stream(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _file(table: pa.Table, path: Path) -> Path:
    with pa.ipc.new_file(path, table.schema) as writer:
        writer.write_table(table)
    return path


def _scan(path: Path, tmp_path: Path) -> datacheck.Report:
    return datacheck.scan(str(path), out=tmp_path / "out", executor="inprocess")


def _sites(report: datacheck.Report) -> set[tuple[int, str, str]]:
    f = report.findings
    f = f[f["row"].notna()]
    return {(int(r.row), r.column, r.check) for r in f.itertuples()}


def _month_interval_stream() -> bytes:
    """A stream whose column ``i`` is a month interval (pyarrow cannot write one: the unit of a
    month_day_nano interval in the schema is patched to YEAR_MONTH)."""
    mdn = pa.array([pa.MonthDayNano([1, 2, 3])] * 3, pa.month_day_nano_interval())
    buf = _stream(pa.table({"i": mdn, "x": [1.0, NAN, 2.0]}))
    for pos in range(len(buf) - 1):
        if buf[pos : pos + 2] != b"\x02\x00":
            continue
        patched = bytearray(buf)
        patched[pos : pos + 2] = b"\x00\x00"
        try:
            schema = pa.ipc.open_stream(bytes(patched)).schema
        except pa.ArrowException:
            continue
        types = [str(f.type) for f in schema]
        if schema.names == ["i", "x"] and types == ["month_interval", "double"]:
            return bytes(patched)
    raise AssertionError("no interval unit found to patch")


def test_a_month_interval_column_is_skipped_and_the_rest_checked(tmp_path: Path) -> None:
    path = tmp_path / "m.arrows"
    path.write_bytes(_month_interval_stream())
    report = _scan(path, tmp_path)
    (entry,) = report.data["files"]
    assert entry["status"] == "flagged" and entry["rows"] == 3
    assert entry["columns"]["i"] == "month_interval"
    assert _sites(report) == {(1, "x", "nan")}


def test_list_offsets_past_the_values_make_the_file_corrupt(tmp_path: Path) -> None:
    table = pa.table({"v": pa.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], pa.list_(pa.float64()))})
    buf = bytearray(_stream(table))
    offsets = np.array([0, 2, 4, 6], dtype=np.int32).tobytes()
    at = bytes(buf).index(offsets)
    buf[at + 8 : at + 12] = np.int32(1 << 20).tobytes()  # the second list ends far past the values
    path = tmp_path / "bad.arrows"
    path.write_bytes(bytes(buf))
    (entry,) = _scan(path, tmp_path).data["files"]
    assert entry["status"] == "corrupt"
    assert entry["error"].startswith("ArrowInvalid")


def _encoded_table() -> pa.Table:
    f = pa.array([1.0, NAN, 2.0, np.inf])
    return pa.table(
        {
            "dict": f.dictionary_encode(),
            "ree": pc.run_end_encode(pa.array([1.0, 1.0, NAN, NAN])),
            "view": pa.array([[1.0], None, [2.0, NAN], []], pa.list_view(pa.float64())),
            "map": pa.array(
                [[("a", 1.0)], [("b", np.inf)], None, [("c", 2.0), ("d", NAN)]],
                pa.map_(pa.string(), pa.float64()),
            ),
            "nested": pa.array(
                [{"d": 1.0}, {"d": 2.0}, {"d": 3.0}, {"d": -np.inf}],
                pa.struct([("d", pa.float64())]),
            ),
        }
    )


def test_dictionary_run_end_list_view_and_map_floats_are_checked_element_wise(
    tmp_path: Path,
) -> None:
    table = _encoded_table()
    d = table["nested"].combine_chunks().field("d").dictionary_encode()  # a dictionary in a struct
    table = table.set_column(4, "nested", pa.StructArray.from_arrays([d], ["d"]))
    report = _scan(_file(table, tmp_path / "enc.arrow"), tmp_path)
    assert _sites(report) == {
        (1, "view", "null"),
        (2, "map.value", "null"),
        (1, "dict", "nan"),
        (3, "dict", "inf"),
        (2, "ree", "nan"),
        (3, "ree", "nan"),
        (2, "view", "nan"),
        (1, "map.value", "inf"),
        (3, "map.value", "nan"),
        (3, "nested.d", "inf"),
    }
    (entry,) = report.data["files"]
    assert entry["status"] == "flagged" and entry["rows"] == 4


@pytest.mark.parametrize("size", [12, 64])
def test_a_feather_v1_file_that_crashes_pyarrow_is_corrupt(size: int, tmp_path: Path) -> None:
    path = tmp_path / "bad.feather"
    path.write_bytes(b"FEA1" + b"\0" * (size - 8) + b"FEA1")
    (entry,) = _scan(path, tmp_path).data["files"]
    assert entry["status"] == "corrupt"


@pytest.mark.parametrize("depth", [1_000, 10_000])
def test_json_nested_thousands_deep_is_corrupt_with_the_reason(depth: int, tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text('{"s": "[[[[", "a": ' + "[" * depth + "1" + "]" * depth + "}\n")
    (entry,) = _scan(path, tmp_path).data["files"]
    assert entry["status"] == "corrupt"
    assert entry["error"] == "ValueError: JSON nested deeper than 64 levels (at byte 82): not read"


def test_brackets_inside_json_strings_are_not_nesting(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text("".join('{"s": "[[[[{{\\"x", "x": 1.5}\n' for _ in range(100)))
    (entry,) = _scan(path, tmp_path).data["files"]
    assert entry["status"] == "ok" and entry["rows"] == 100
