"""The one JSON Lines module: reader, writer and torn-tail repair (guard log, quarantine, journal)."""

from __future__ import annotations

import json
import math
import sys

import pytest

from datacheck._jsonl import JsonlWriter, read_records, repair_tail
from datacheck.errors import InputError


def _write(path, text: str):
    path.write_bytes(text.encode())
    return path


def test_writer_appends_whole_lines_and_reads_back(tmp_path):
    w = JsonlWriter(tmp_path / "sub" / "a.jsonl")
    w.write([{"a": 1}, {"b": math.nan, "c": [math.inf]}])
    w.write([])
    w.close()
    w.write([{"a": 2}])  # reopens for append
    w.close()
    assert read_records(tmp_path / "sub" / "a.jsonl") == [
        {"a": 1},
        {"b": "nan", "c": ["inf"]},
        {"a": 2},
    ]


def test_nan_literals_when_asked_read_back_as_floats(tmp_path):
    w = JsonlWriter(tmp_path / "j.jsonl", nan_as_text=False, fsync=1.0)
    w.write([{"x": math.nan}])
    w.close()
    assert math.isnan(read_records(tmp_path / "j.jsonl")[0]["x"])


def test_held_lines_are_written_whole_on_flush_or_close(tmp_path):
    path = tmp_path / "h.jsonl"
    w = JsonlWriter(path)
    w.write([{"a": 1}])
    w.write([{"a": 2}], flush=False)
    w.write([{"a": 3}], flush=False)
    assert read_records(path) == [{"a": 1}]  # a process killed now loses 2 and 3, whole
    w.flush()
    assert read_records(path) == [{"a": 1}, {"a": 2}, {"a": 3}]
    w.write([{"a": 4}], flush=False)
    w.close()
    assert read_records(path)[-1] == {"a": 4}


def test_fresh_truncates(tmp_path):
    path = _write(tmp_path / "f.jsonl", '{"old": 1}\n')
    w = JsonlWriter(path, fresh=True)
    w.write([{"new": 1}])
    w.close()
    assert read_records(path) == [{"new": 1}]


@pytest.mark.parametrize("blank_tail", ["", "\n", "\n\n  \n"])
def test_a_torn_last_line_is_dropped_on_read(tmp_path, blank_tail):
    path = _write(tmp_path / "t.jsonl", '{"a": 1}\n{"a": 2}\n{"a": 3, "b' + blank_tail)
    assert read_records(path) == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize("bad", ['{"a": 3, "b', "[1, 2]", "text"])
def test_a_bad_line_in_the_middle_is_damage(tmp_path, bad):
    path = _write(tmp_path / "m.jsonl", f'{{"a": 1}}\n{bad}\n{{"a": 2}}\n')
    with pytest.raises(InputError, match="line 2: not JSON"):
        read_records(path)
    assert read_records(path, skip_bad=True) == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize(
    ("text", "after"),
    [
        ('{"a": 1}\n{"a": 2', '{"a": 1}\n'),  # torn record: cut
        ('{"a": 1}\n{"a": 2}', '{"a": 1}\n{"a": 2}\n'),  # whole record, newline missing: ended
        ('{"a": 1}\nnot json', '{"a": 1}\n'),  # a fragment of anything: cut
        ('{"a": 1}\n', '{"a": 1}\n'),  # intact
        ('{"a"', ""),  # the only line torn
        ("", ""),
    ],
)
def test_repair_before_append(tmp_path, text, after):
    path = _write(tmp_path / "r.jsonl", text)
    repair_tail(path)
    assert path.read_text() == after
    w = JsonlWriter(path)
    w.write([{"z": 0}])
    w.close()
    assert read_records(path)[-1] == {"z": 0}


def test_repair_finds_the_line_start_beyond_one_chunk(tmp_path):
    long = json.dumps({"pad": "x" * 200_000})
    path = _write(tmp_path / "l.jsonl", '{"a": 1}\n' + long[:150_000])
    repair_tail(path)
    assert path.read_text() == '{"a": 1}\n'
    repair_tail(tmp_path / "missing.jsonl")  # nothing to do


def test_no_torch_import():
    assert "datacheck._jsonl" in sys.modules
    code = "import datacheck._jsonl, sys; assert 'torch' not in sys.modules"
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True)
