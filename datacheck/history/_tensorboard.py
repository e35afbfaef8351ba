"""TensorBoard event files and run folders, read here: streamed, record by record, no tensorboard.

A folder is searched for ``events.out.tfevents.*`` files (a resumed run writes a new file; one
run may also log into sub-folders such as ``train/`` and ``val/``, whose names prefix the
tags).  Scalars are merged by step; for a step logged by several files the newest file (by its
name's timestamp, then its path) wins, because a resumed run rewrites the steps after its
checkpoint; within one file the last reading of a step wins.

An event file is TFRecord-framed ``Event`` protos (tensorflow/core/util/event.proto), read
through :mod:`datacheck._tfrecord` with both checksums checked.  A scalar is a
``Summary.Value`` with ``simple_value`` (PyTorch's ``SummaryWriter``, TF1) or a one-element
tensor of a tag whose metadata names the ``scalars`` plugin (TF2's ``tf.summary.scalar``,
Keras); other values (images, histograms, text) are skipped undecoded.  Readings are kept as
``int64`` steps and ``float64`` values in arrays: 16 bytes a reading while reading.

Damage is never skipped silently: it becomes a note of the history (``note:`` in the output),
naming the file and the record's byte offset.  A last record cut short (a run still writing)
keeps the readings before it; a record whose data checksum is wrong, or that does not decode,
is skipped and the next one read; a wrong length checksum loses the framing, and the rest of
that file is not read.
"""

from __future__ import annotations

import os
import re
import struct
from array import array
from pathlib import Path

import numpy as np

from datacheck._tfrecord import FramingError, fields, read_body, read_header, varint
from datacheck.errors import InputError
from datacheck.history._table import MISSING, Columns, Table, is_eval_key, norm_key

__all__ = ["event_files", "read_tensorboard"]

_STAMP = re.compile(r"tfevents\.(\d+)")
_DIGITS = re.compile(r"(\d+)")
_F32 = struct.Struct("<f")
_SHOWN = 3
"""Byte offsets listed in a damage note (the count says how many more)."""

_DTYPES: dict[int, tuple[str, int]] = {
    1: ("<f", 5),  # DT_FLOAT: float_val
    2: ("<d", 6),  # DT_DOUBLE: double_val
    3: ("<i", 7),  # DT_INT32: int_val
    4: ("<B", 7),  # DT_UINT8
    5: ("<h", 7),  # DT_INT16
    6: ("<b", 7),  # DT_INT8
    9: ("<q", 10),  # DT_INT64: int64_val
    10: ("<?", 11),  # DT_BOOL: bool_val
    14: ("bf16", 13),  # DT_BFLOAT16: half_val (the 16 bits)
    17: ("<H", 7),  # DT_UINT16
    19: ("<e", 13),  # DT_HALF: half_val (the 16 bits)
    22: ("<I", 16),  # DT_UINT32: uint32_val
    23: ("<Q", 17),  # DT_UINT64: uint64_val
}
"""TensorProto dtype -> (layout in tensor_content, the repeated ``*_val`` field)."""


def event_files(path: Path) -> list[Path]:
    """The event files of a file or a run folder, oldest first (by the time in the name)."""
    if path.is_file():
        return [path]
    files = [p for p in path.rglob("*") if "tfevents" in p.name and p.is_file()]

    def order(p: Path) -> tuple[int, str, list[int | str]]:
        # within a second, the writer's counter: numbers compared as numbers (9 before 10)
        m = _STAMP.search(p.name)
        name = [int(t) if i % 2 else t for i, t in enumerate(_DIGITS.split(p.name))]
        return (int(m.group(1)) if m else 0, str(p.parent), name)

    return sorted(files, key=order)


def _simple(record: bytes | memoryview) -> tuple[int, bytes, bytes] | None:
    """(step, tag, 4 bytes of float) of an Event holding one ``simple_value`` and nothing else,
    laid out as protobuf writes it (wall_time 1, step 2, summary 5 > value 1 > tag 1,
    simple_value 2; one-byte lengths); None for any other event (read field by field)."""
    n = len(record)
    if n < 22 or record[0] != 0x09 or record[9] != 0x10 or record[n - 5] != 0x15:
        return None
    step, pos = varint(record, 10)
    if pos + 6 > n or record[pos] != 0x2A or record[pos + 2] != 0x0A or record[pos + 4] != 0x0A:
        return None
    size, inner, value, tag = record[pos + 1], record[pos + 3], record[pos + 5], pos + 6
    if (size, inner, value) != (n - pos - 2, n - pos - 4, n - pos - 11) or size > 0x7F:
        return None
    step = step - (1 << 64) if step >= 1 << 63 else step
    return step, bytes(record[tag : n - 5]), bytes(record[n - 4 :])


def _bits16(fmt: str, bits: int) -> float:
    if fmt == "bf16":
        return float(struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0])
    return float(struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0])


def _first(num: int, wire: int, body: bytes) -> float:
    """The first element of a repeated ``*_val`` field (packed or not)."""
    if num in (5, 6):  # float_val, double_val
        fmt = "<f" if num == 5 else "<d"
        return float(struct.unpack_from(fmt, body)[0])
    value = body if wire == 0 else varint(body, 0)[0]
    assert isinstance(value, int)
    if num in (7, 10) and value >= 1 << 63:  # int32/int64 as a two's complement varint
        value -= 1 << 64
    return float(value)


def _tensor_scalar(buf: bytes) -> float:
    """The value of a one-element TensorProto; ValueError for any other tensor."""
    dtype, elements, content, vals = 0, 1, None, {}
    for num, wire, value in fields(buf):
        if num == 1 and wire == 0:
            dtype = value
        elif num == 2 and wire == 2:  # TensorShapeProto: dim = 2 {size = 1}
            for dnum, dwire, dim in fields(value):
                if dnum == 2 and dwire == 2:
                    elements *= next((s for n, w, s in fields(dim) if n == 1 and w == 0), 0)
        elif num == 4 and wire == 2:
            content = value
        elif num in (5, 6, 7, 10, 11, 13, 16, 17) and num not in vals:
            vals[num] = (wire, value)
    if dtype not in _DTYPES or elements != 1:
        raise ValueError(f"a 'scalars' tensor of dtype {dtype} with {elements} elements")
    fmt, num = _DTYPES[dtype]
    if content:
        if fmt in ("bf16", "<e"):
            return _bits16(fmt, struct.unpack("<H", content)[0])
        return float(struct.unpack(fmt, content)[0])
    if num not in vals:
        raise ValueError(f"a 'scalars' tensor of dtype {dtype} without a value")
    wire, value = vals[num]
    if fmt in ("bf16", "<e"):
        return _bits16(fmt, value if wire == 0 else varint(value, 0)[0])
    return _first(num, wire, value)


def _plugin(metadata: bytes) -> bytes:
    """SummaryMetadata.plugin_data (1).plugin_name (1)."""
    for num, wire, data in fields(metadata):
        if num == 1 and wire == 2:
            for n, w, name in fields(data):
                if n == 1 and w == 2:
                    return bytes(name)
    return b""


class _FileReader:
    """The scalars of one event file, key by key: (steps ``int64``, values ``float64``)."""

    def __init__(self, path: Path, prefix: str, wanted: Columns) -> None:
        self.path, self.prefix, self.wanted = path, prefix, wanted
        self.series: dict[str, tuple[array[int], array[float]]] = {}
        self.keys: dict[bytes, str | None] = {}  # tag -> the key kept, or None (not wanted)
        self.plugins: dict[bytes, bytes] = {}  # tag -> plugin, from the first metadata seen
        self.damaged: dict[str, list[int]] = {}  # reason -> byte offsets
        self.notes: list[str] = []

    def _key(self, tag: bytes) -> str | None:
        if tag not in self.keys:
            key = norm_key(self.prefix + tag.decode("utf-8", "replace"))
            self.keys[tag] = key if key != "step" and self.wanted.wanted(key) else None
        return self.keys[tag]

    def _value(self, value: memoryview) -> tuple[str, float] | None:
        """(key, reading) of a wanted scalar ``Summary.Value``, else None."""
        tag = simple = tensor = metadata = None
        for num, wire, data in fields(value):
            if num == 1 and wire == 2:
                tag = bytes(data)
            elif num == 2 and wire == 5:
                simple = data
            elif num == 8 and wire == 2:
                tensor = data
            elif num == 9 and wire == 2:
                metadata = data
        if tag is None:
            return None
        if metadata is not None and tag not in self.plugins:
            self.plugins[tag] = _plugin(metadata)
        if (key := self._key(tag)) is None:
            return None
        if simple is not None:
            return key, float(_F32.unpack(simple)[0])
        if tensor is not None and self.plugins.get(tag) == b"scalars":
            return key, _tensor_scalar(tensor)
        return None

    def _keep(self, key: str, step: int, reading: float) -> None:
        steps, values = self.series.get(key) or self.series.setdefault(
            key, (array("q"), array("d"))
        )
        steps.append(step)
        values.append(reading)

    def event(self, record: bytes | memoryview) -> None:
        """Keep the wanted scalars of one ``Event``; ValueError if it does not decode."""
        if (fast := _simple(record)) is not None:  # SummaryWriter's shape: one simple_value
            step, tag, simple = fast
            if (key := self._key(tag)) is not None:
                self._keep(key, step, float(_F32.unpack(simple)[0]))
            return
        step, summary = 0, None
        for num, wire, value in fields(record):
            if num == 2 and wire == 0:
                step = value - (1 << 64) if value >= 1 << 63 else value
            elif num == 5 and wire == 2:
                summary = value
        if summary is not None:  # all of the event's values or none of them
            found = [self._value(v) for num, wire, v in fields(summary) if num == 1 and wire == 2]
            for key, reading in filter(None, found):
                self._keep(key, step, reading)

    def read(self) -> None:
        """Read the file record by record; damage goes to ``notes``."""
        with self.path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            row = pos = 0
            while True:
                try:
                    length = read_header(fh, row, pos, size)
                    if length is None:
                        break
                    data, intact = read_body(fh, length, row, pos)
                except FramingError as exc:
                    self._lost(exc, size)
                    break
                if not intact:
                    self.damaged.setdefault("data checksum mismatch", []).append(pos)
                else:
                    try:
                        self.event(memoryview(data))  # images, histograms: not copied
                    except (ValueError, struct.error, UnicodeDecodeError) as exc:
                        self.damaged.setdefault(f"does not decode: {exc}", []).append(pos)
                row, pos = row + 1, pos + 16 + length
        for reason, offsets in self.damaged.items():
            shown = ", ".join(map(str, offsets[:_SHOWN]))
            more = f" and {len(offsets) - _SHOWN} more" if len(offsets) > _SHOWN else ""
            self.notes.append(
                f"'{self.path}': {len(offsets)} damaged record(s) skipped ({reason}) "
                f"at byte {shown}{more}"
            )

    def _lost(self, exc: FramingError, size: int) -> None:
        if exc.truncated:
            self.notes.append(
                f"'{self.path}': the last record, at byte {exc.offset}, is cut short "
                "(a run still writing it?): the readings before it are kept"
            )
        else:
            self.notes.append(
                f"'{self.path}': {exc}: the last {size - exc.offset} bytes are not read"
            )


def _merged(parts: list[tuple[array[int], array[float]]]) -> tuple[np.ndarray, np.ndarray]:
    """One key's readings from every file (oldest first), by step, the newest reading of a
    step kept (a stable sort keeps file order within a step)."""
    if len(parts) == 1:  # no copy when the steps only go up (one file, as written)
        steps, values = np.frombuffer(parts[0][0], np.int64), np.frombuffer(parts[0][1])
        if bool((steps[1:] > steps[:-1]).all()):
            return steps, values
    steps = np.concatenate([np.frombuffer(s, np.int64) for s, _ in parts])
    values = np.concatenate([np.frombuffer(v, np.float64) for _, v in parts])
    order = np.argsort(steps, kind="stable")
    steps, values = steps[order], values[order]
    last = np.ones(len(steps), bool)
    last[:-1] = steps[1:] != steps[:-1]
    return steps[last], values[last]


def _array(values: np.ndarray) -> array[float]:
    out = array("d")
    out.frombytes(np.ascontiguousarray(values, np.float64).data.cast("B"))
    return out


def _columns(cols: Columns, series: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Fill ``cols`` with one row per step any key has, ``MISSING`` where a key has none; keys
    in the order a row-by-row reader meets them (by first step, then as first read)."""
    if not series:
        return
    first = next(iter(series.values()))[0]
    if all(np.array_equal(at, first) for at, _ in series.values()):  # logged together
        steps = first
    else:
        steps = np.unique(np.concatenate([s for s, _ in series.values()]))
    seen = list(series)
    keys = sorted(seen, key=lambda k: (int(series[k][0][0]), seen.index(k)))
    cols.cols["step"] = _array(steps.astype(np.float64))
    for key in keys:
        at, values = series[key]
        if len(at) == len(steps):  # a reading at every step
            cols.cols[key] = _array(values)
            continue
        col = np.full(len(steps), MISSING)
        col[np.searchsorted(steps, at)] = values
        cols.cols[key] = _array(col)
    cols.n = len(steps)


def read_tensorboard(path: Path, keep: set[str]) -> Table:
    """Merge the scalars of every event file under ``path`` by step."""
    files = event_files(path)
    if not files:
        raise InputError(f"'{path}': no TensorBoard event files (events.out.tfevents.*) in it")
    table = Table("tensorboard", Columns(keep), Columns(keep), counter="step")
    parts: dict[str, list[tuple[array[int], array[float]]]] = {}
    for file in files:
        prefix = "" if file.parent == path or path.is_file() else file.parent.name + "_"
        reader = _FileReader(file, prefix, table.train)
        reader.read()
        table.notes += reader.notes
        for key, points in reader.series.items():
            parts.setdefault(key, []).append(points)
    if len(files) > 1:
        table.notes.append(f"{len(files)} event files merged by step")
    train = {k: _merged(p) for k, p in parts.items() if not (is_eval_key(k) and "loss" in k)}
    evals = {k: _merged(p) for k, p in parts.items() if is_eval_key(k) and "loss" in k}
    _columns(table.train, train)
    _columns(table.eval, evals)
    return table
