"""TensorBoard event files and run folders, read here: streamed, record by record, no tensorboard.

A folder is searched for ``events.out.tfevents.*`` files (a resumed run writes a new file; one
run may also log into sub-folders such as ``train/`` and ``val/``, whose names prefix the
tags).  **Every reading is kept, in the order written** (files oldest first, by the timestamp
in their names, then their paths; records in file order), as TensorBoard's own
``EventAccumulator`` keeps them: a step logged twice keeps both readings, a resumed run that
logs its steps again keeps both attempts.  Where the writer marked a restart
(``SummaryWriter(purge_step=S)`` writes a ``SessionLog.START`` at step S), the readings of
steps >= S written before it are dropped, as TensorBoard drops them.  Readings of one step are
aligned into rows by their order within the step (the k-th loss of a step with the k-th grad
norm of it).

An event file is TFRecord-framed ``Event`` protos (tensorflow/core/util/event.proto), read
through :mod:`datacheck._tfrecord` with both checksums checked.  A scalar is a
``Summary.Value`` with ``simple_value`` (PyTorch's ``SummaryWriter``, TF1) or a one-element
tensor of a tag whose metadata names the ``scalars`` plugin (TF2's ``tf.summary.scalar``,
Keras); other values (images, histograms, text) are skipped undecoded.  Readings are kept as
``int64`` steps, ``float64`` values and their ``int64`` order in arrays: 24 bytes a reading
while reading.

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
        self.series: dict[str, tuple[array[int], array[float], array[int]]] = {}
        self.seq = 0
        """Readings kept so far by every file (their order in the run, across keys)."""
        self.starts: list[tuple[int, int]] = []
        """``SessionLog.START`` events: (readings kept before it, its step)."""
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
        steps, values, seq = self.series.get(key) or self.series.setdefault(
            key, (array("q"), array("d"), array("l"))
        )
        steps.append(step)
        values.append(reading)
        seq.append(self.seq)
        self.seq += 1

    def event(self, record: bytes | memoryview) -> None:
        """Keep the wanted scalars of one ``Event``; ValueError if it does not decode."""
        if (fast := _simple(record)) is not None:  # SummaryWriter's shape: one simple_value
            step, tag, simple = fast
            if (key := self._key(tag)) is not None:
                self._keep(key, step, float(_F32.unpack(simple)[0]))
            return
        step, summary, start = 0, None, False
        for num, wire, value in fields(record):
            if num == 2 and wire == 0:
                step = value - (1 << 64) if value >= 1 << 63 else value
            elif num == 5 and wire == 2:
                summary = value
            elif num == 7 and wire == 2:  # session_log: status 1 is START
                start = any(n == 1 and w == 0 and v == 1 for n, w, v in fields(value))
        if start:
            self.starts.append((self.seq, step))
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


Series = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
"""Readings by key: (steps ``int64``, values ``float64``, order in the run ``int64``)."""


def _joined(
    parts: list[tuple[array[int], array[float], array[int]]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One key's readings from every file, oldest file first (no copy for one file)."""
    if len(parts) == 1:
        steps, values, seq = parts[0]
        return np.frombuffer(steps, np.int64), np.frombuffer(values), np.frombuffer(seq, np.int64)
    return (
        np.concatenate([np.frombuffer(p[0], np.int64) for p in parts]),
        np.concatenate([np.frombuffer(p[1], np.float64) for p in parts]),
        np.concatenate([np.frombuffer(p[2], np.int64) for p in parts]),
    )


def _purged(series: Series, starts: list[tuple[int, int]]) -> tuple[Series, int]:
    """Drop the readings a later ``SessionLog.START`` at step S replaces (written before it,
    of steps >= S), as TensorBoard does; returns the readings left and how many went."""
    if not starts:
        return series, 0
    out, dropped = {}, 0
    for key, (steps, values, seq) in series.items():
        keep = np.ones(len(steps), bool)
        for before, step in starts:
            keep &= ~((seq < before) & (steps >= step))
        dropped += int((~keep).sum())
        out[key] = (steps[keep], values[keep], seq[keep])
    return out, dropped


def _array(values: np.ndarray) -> array[float]:
    out = array("d")
    out.frombytes(np.ascontiguousarray(values, np.float64).data.cast("B"))
    return out


def _aligned(series: Series) -> bool:
    """Every key logged at the same steps, each step once, rising: one row per step as is."""
    first = next(iter(series.values()))[0]
    return bool((first[1:] > first[:-1]).all()) and all(
        np.array_equal(at, first) for at, _, _ in series.values()
    )


def _columns(cols: Columns, series: Series) -> None:
    """Fill ``cols`` with one row per step reading: readings of one step are aligned by their
    order within the step, rows come in the order they were written; ``MISSING`` where a key
    has no reading in a row; keys in the order a row-by-row reader meets them."""
    if not series:
        return
    seen = list(series)
    keys = sorted(seen, key=lambda k: (int(series[k][2][0]), seen.index(k)))
    if _aligned(series):
        steps = next(iter(series.values()))[0]
        cols.cols["step"] = _array(steps.astype(np.float64))
        for key in keys:
            cols.cols[key] = _array(series[key][1])
        cols.n = len(steps)
        return
    st = np.concatenate([series[k][0] for k in keys])
    seq = np.concatenate([series[k][2] for k in keys])
    kid = np.concatenate([np.full(len(series[k][0]), i) for i, k in enumerate(keys)])
    order = np.lexsort((seq, st, kid))  # by key, step, then as written
    new = np.ones(len(st), bool)
    new[1:] = (st[order][1:] != st[order][:-1]) | (kid[order][1:] != kid[order][:-1])
    starts = np.maximum.accumulate(np.where(new, np.arange(len(st)), 0))
    occ = np.empty(len(st), np.int64)
    occ[order] = np.arange(len(st)) - starts  # the k-th reading of its key at its step
    pairs, row = np.unique(np.stack([st, occ], axis=1), axis=0, return_inverse=True)
    row = row.reshape(-1)
    first = np.full(len(pairs), np.iinfo(np.int64).max)
    np.minimum.at(first, row, seq)
    rank = np.empty(len(pairs), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(pairs))
    at = rank[row]
    step_col = np.empty(len(pairs))
    step_col[at] = st
    cols.cols["step"] = _array(step_col)
    offset = 0
    for key in keys:
        n = len(series[key][0])
        col = np.full(len(pairs), MISSING)
        col[at[offset : offset + n]] = series[key][1]
        cols.cols[key] = _array(col)
        offset += n
    cols.n = len(pairs)


def read_tensorboard(path: Path, keep: set[str]) -> Table:
    """Merge the scalars of every event file under ``path`` by step."""
    files = event_files(path)
    if not files:
        raise InputError(f"'{path}': no TensorBoard event files (events.out.tfevents.*) in it")
    table = Table("tensorboard", Columns(keep), Columns(keep), counter="step")
    parts: dict[str, list[tuple[array[int], array[float], array[int]]]] = {}
    seq, starts = 0, []
    for file in files:
        prefix = "" if file.parent == path or path.is_file() else file.parent.name + "_"
        reader = _FileReader(file, prefix, table.train)
        reader.seq = seq
        reader.read()
        seq = reader.seq
        starts += reader.starts
        table.notes += reader.notes
        for key, points in reader.series.items():
            parts.setdefault(key, []).append(points)
    series, dropped = _purged({k: _joined(p) for k, p in parts.items()}, starts)
    if len(files) > 1:
        table.notes.append(
            f"{len(files)} event files read in the order written, every reading kept"
        )
    if dropped:
        table.notes.append(
            f"{dropped} reading(s) replaced by a restart the writer marked (purge_step), "
            "as TensorBoard drops them"
        )
    train = {k: v for k, v in series.items() if len(v[0]) and not (is_eval_key(k) and "loss" in k)}
    evals = {k: v for k, v in series.items() if len(v[0]) and is_eval_key(k) and "loss" in k}
    _columns(table.train, train)
    _columns(table.eval, evals)
    return table
