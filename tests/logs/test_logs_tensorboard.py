"""TensorBoard event files read by datacheck itself: the same scalars as tensorboard's own
reader, TF2 tensor scalars, and every kind of damage reported as a note, never skipped."""

from __future__ import annotations

import io
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from _mediakit import length_delimited as ld
from _mediakit import varint

from datacheck import _logs
from datacheck.history._table import MISSING
from datacheck.history._tensorboard import event_files, read_tensorboard

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing import event_accumulator  # noqa: E402
from tensorboard.compat.proto import event_pb2  # noqa: E402
from tensorboard.summary.writer.record_writer import RecordWriter  # noqa: E402


def _summary_writer(folder: Path, steps: range, suffix: str = "", **tags: float) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder), filename_suffix=suffix)
    for s in steps:
        for tag, scale in tags.items():
            writer.add_scalar(tag.replace("__", "/"), scale / (s + 1), s)
    writer.close()
    return max(folder.glob(f"events.out.tfevents.*{suffix}"))


def _series(table, key: str) -> dict[int, float]:
    cols = table.train.cols if key in table.train.cols else table.eval.cols
    steps = cols["step"]
    return {int(s): v for s, v in zip(steps, cols[key], strict=True) if v != MISSING}


def _accumulated(file: Path, tag: str) -> dict[int, float]:
    """tensorboard's own reader: the oracle."""
    acc = event_accumulator.EventAccumulator(str(file), {event_accumulator.SCALARS: 0})
    acc.Reload()
    return {ev.step: ev.value for ev in acc.Scalars(tag)}


def _offsets(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        pos += 16 + struct.unpack_from("<Q", data, pos)[0]
    return out


def test_summary_writer_files_read_as_tensorboard_reads_them(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "run"
    writer = SummaryWriter(str(run))
    for s in range(0, 300, 3):
        writer.add_scalar("train/loss", 3.0 / (s + 1), s)
        if s % 30 == 0:  # images and histograms in between: skipped, not decoded
            writer.add_image("sample", np.zeros((3, 8, 8), np.uint8), s)
            writer.add_histogram("weights", np.arange(10.0), s)
    writer.close()
    val = _summary_writer(run / "val", range(0, 300, 50), loss=5.0)
    table = read_tensorboard(run, set())
    (train_file,) = run.glob("events.out.tfevents.*")
    assert _series(table, "train_loss") == _accumulated(train_file, "train/loss")
    assert _series(table, "val_loss") == _accumulated(val, "loss")
    assert table.train.n == 100 and table.eval.n == 6
    assert table.notes == ["2 event files read in the order written, every reading kept"]


def _readings(table, key: str) -> list[tuple[int, float]]:
    """Our readings of ``key`` in row order (every one, repeated steps included)."""
    cols = table.train.cols if key in table.train.cols else table.eval.cols
    return [(int(s), v) for s, v in zip(cols["step"], cols[key], strict=True) if v != MISSING]


def _accumulated_all(folder: Path, tag: str) -> list[tuple[int, float]]:
    """tensorboard's own reader over a run folder: every reading, in the order it loads them."""
    acc = event_accumulator.EventAccumulator(str(folder), {event_accumulator.SCALARS: 0})
    acc.Reload()
    return [(ev.step, ev.value) for ev in acc.Scalars(tag)]


def test_a_resumed_run_keeps_both_attempts_as_tensorboard_does(tmp_path):
    """No restart marked: EventAccumulator keeps both attempts' readings, in the order
    written; so do we (the policy of every reader: no reading is dropped)."""
    run = tmp_path / "run"
    _summary_writer(run, range(10), ".a", loss=1.0)
    _summary_writer(run, range(5, 8), ".b", loss=100.0)
    got = _readings(read_tensorboard(run, set()), "loss")
    assert got == _accumulated_all(run, "loss")
    assert [s for s, _ in got] == [*range(10), 5, 6, 7]


def test_purge_step_drops_what_tensorboard_drops(tmp_path):
    """SummaryWriter(purge_step=S) marks a restart: the readings of steps >= S written before
    it are replaced, in tensorboard's reader and ours."""
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "run"
    _summary_writer(run, range(10), ".a", loss=1.0, grad_norm=0.5)
    writer = SummaryWriter(str(run), filename_suffix=".b", purge_step=5)
    for s in range(5, 12):
        writer.add_scalar("loss", 100.0 / (s + 1), s)
        writer.add_scalar("grad_norm", 50.0 / (s + 1), s)
    writer.close()
    table = read_tensorboard(run, set())
    for tag in ("loss", "grad_norm"):
        assert _readings(table, tag) == _accumulated_all(run, tag)
    assert [s for s, _ in _readings(table, "loss")] == list(range(12))
    assert any("10 reading(s) replaced by a restart" in n for n in table.notes)


def test_a_step_logged_twice_keeps_both_readings(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "run"
    writer = SummaryWriter(str(run))
    for s in range(6):
        for micro in range(2):  # a loss per micro-batch, the grad norm once a step
            writer.add_scalar("loss", 2.0 + micro + s / 10, s)
        writer.add_scalar("grad_norm", 0.5, s)
    writer.add_scalar("loss", float("nan"), 3)  # a NaN logged late for step 3
    writer.close()
    table = read_tensorboard(run, set())
    assert repr(_readings(table, "loss")) == repr(_accumulated_all(run, "loss"))
    hist = _logs.read_history(run)
    assert len(hist.steps) == 13 and _logs.analyze(hist).nan_step == 3


def test_files_of_one_second_in_the_order_they_were_written(tmp_path):
    names = ["events.out.tfevents.17.h.5.10.b", "events.out.tfevents.17.h.5.9.a"]
    names += ["events.out.tfevents.16.h.5.11"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in event_files(tmp_path)] == [names[2], names[1], names[0]]


def test_negative_steps(tmp_path):
    value = ld(1, b"loss") + b"\x15" + struct.pack("<f", 0.5)
    path = _records(tmp_path / "events.out.tfevents.1.h", [_event(-3 + (1 << 64), value)])
    assert _series(read_tensorboard(path, set()), "loss") == {-3: 0.5}


# --- TF2: tf.summary.scalar writes a rank-0 tensor under the "scalars" plugin ----------------


def _event(step: int, value: bytes, wall_time: float = 1.7e9) -> bytes:
    return b"\x09" + struct.pack("<d", wall_time) + b"\x10" + varint(step) + ld(5, ld(1, value))


def _tensor_value(tag: str, tensor: bytes, plugin: str | None) -> bytes:
    """Summary.Value as TF2's summary writer fills it: tag, metadata (plugin_data.plugin_name,
    data_class = DATA_CLASS_SCALAR), tensor."""
    meta = b"" if plugin is None else ld(9, ld(1, ld(1, plugin.encode())) + b"\x20\x01")
    return ld(1, tag.encode()) + meta + ld(8, tensor)


def _tensor(dtype: int, content: bytes = b"", vals: bytes = b"", dims: tuple[int, ...] = ()):
    shape = b"".join(ld(2, b"\x08" + varint(d)) for d in dims)
    return b"\x08" + varint(dtype) + ld(2, shape) + (ld(4, content) if content else b"") + vals


def _records(path: Path, events: list[bytes]) -> Path:
    buf = io.BytesIO()
    writer = RecordWriter(buf)  # tensorboard's framing: an independent oracle of the CRCs
    writer.write(b"\x09" + struct.pack("<d", 1.7e9) + ld(3, b"brain.Event:2"))
    for e in events:
        writer.write(e)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())
    return path


def test_tf2_tensor_scalars(tmp_path):
    half = struct.unpack("<H", struct.pack("<e", 0.5))[0]
    bf16 = struct.unpack("<I", struct.pack("<f", 0.25))[0] >> 16
    events = [  # tensor_content, as TF2's C++ writer stores it; metadata on a tag's first only
        _event(s, _tensor_value("epoch_loss", _tensor(1, struct.pack("<f", 2.0 - s / 8)), p))
        for s, p in ((0, "scalars"), (1, None), (2, None))
    ]
    events += [
        _event(
            3, _tensor_value("epoch_loss", _tensor(1, vals=ld(5, struct.pack("<f", 1.5))), None)
        ),
        _event(
            0, _tensor_value("grad_norm", _tensor(2, vals=ld(6, struct.pack("<d", 0.7))), "scalars")
        ),
        _event(1, _tensor_value("grad_norm", _tensor(19, vals=ld(13, varint(half))), None)),
        _event(2, _tensor_value("grad_norm", _tensor(14, struct.pack("<H", bf16)), None)),
        _event(3, _tensor_value("grad_norm", _tensor(9, vals=ld(10, varint(3))), None)),
        _event(
            0, _tensor_value("lr", _tensor(1, np.ones(4, "<f4").tobytes(), dims=(4,)), "images")
        ),
    ]
    path = _records(tmp_path / "train" / "events.out.tfevents.1.host", events)
    parsed = event_pb2.Event.FromString(events[0])  # the fixture is a real Event, TF2-shaped
    value = parsed.summary.value[0]
    assert value.metadata.plugin_data.plugin_name == "scalars" and value.tensor.dtype == 1
    assert len(value.tensor.tensor_shape.dim) == 0 and parsed.step == 0
    table = read_tensorboard(path, set())
    assert _series(table, "epoch_loss") == {0: 2.0, 1: 1.875, 2: 1.75, 3: 1.5}
    assert _series(table, "grad_norm") == {0: 0.7, 1: 0.5, 2: 0.25, 3: 3.0}
    assert "lr" not in table.train.cols and table.notes == []


def test_a_scalars_tensor_that_is_no_scalar_is_a_note_and_its_event_is_skipped(tmp_path):
    good = _tensor_value("loss", _tensor(1, struct.pack("<f", 0.5)), "scalars")
    bad = _tensor_value("grad_norm", _tensor(1, bytes(8), dims=(2,)), "scalars")
    path = tmp_path / "events.out.tfevents.1.h"
    both = b"\x10\x01" + ld(5, ld(1, good) + ld(1, bad))  # step 1: two values in one event
    _records(path, [_event(0, good), both, _event(2, good)])
    table = read_tensorboard(path, set())
    assert _series(table, "loss") == {0: 0.5, 2: 0.5} and "grad_norm" not in table.train.cols
    (note,) = table.notes
    assert "(does not decode: a 'scalars' tensor of dtype 1 with 2 elements) at byte" in note


# --- damage: a note naming the file and the byte, the readings around it kept ---------------


def _damaged(tmp_path: Path, damage) -> tuple[Path, list[int], bytes]:
    clean = _summary_writer(tmp_path / "clean", range(100), loss=1.0)
    data = bytearray(clean.read_bytes())
    offsets = _offsets(bytes(data))
    assert len(offsets) == 101  # the file_version event, then one a step
    path = tmp_path / "run" / "events.out.tfevents.1.host"
    path.parent.mkdir()
    path.write_bytes(damage(data, offsets))
    return path, offsets, bytes(data)


def test_a_last_record_cut_short_keeps_the_readings_before_it(tmp_path):
    path, offsets, _ = _damaged(tmp_path, lambda d, o: bytes(d[:-7]))
    table = read_tensorboard(path.parent, set())
    assert sorted(_series(table, "loss")) == list(range(99))
    assert table.notes == [
        f"'{path}': the last record, at byte {offsets[-1]}, is cut short "
        "(a run still writing it?): the readings before it are kept"
    ]


def test_a_record_with_a_bad_data_checksum_is_skipped_and_named(tmp_path):
    def flip(d: bytearray, o: list[int]) -> bytes:
        d[o[51] + 12 + 3] ^= 0xFF  # a byte of step 50's event
        return bytes(d)

    path, offsets, _ = _damaged(tmp_path, flip)
    table = read_tensorboard(path, set())
    assert sorted(_series(table, "loss")) == [s for s in range(100) if s != 50]
    assert table.notes == [
        f"'{path}': 1 damaged record(s) skipped (data checksum mismatch) at byte {offsets[51]}"
    ]


def test_a_record_that_does_not_decode_is_skipped_and_named(tmp_path):
    def garbage(d: bytearray, o: list[int]) -> bytes:
        buf = io.BytesIO()
        RecordWriter(buf).write(b"\x0f\xff\xff")  # framed right, no Event inside
        return bytes(d[: o[11]]) + buf.getvalue() + bytes(d[o[11] :])

    path, offsets, _ = _damaged(tmp_path, garbage)
    table = read_tensorboard(path, set())
    assert sorted(_series(table, "loss")) == list(range(100))
    (note,) = table.notes
    assert note.startswith(f"'{path}': 1 damaged record(s) skipped (does not decode: ")
    assert note.endswith(f") at byte {offsets[11]}")


def test_a_bad_length_checksum_stops_the_file_with_a_note(tmp_path):
    def flip(d: bytearray, o: list[int]) -> bytes:
        d[o[61]] ^= 0x01  # step 60's length
        return bytes(d)

    path, offsets, data = _damaged(tmp_path, flip)
    table = read_tensorboard(path, set())
    assert sorted(_series(table, "loss")) == list(range(60))
    assert table.notes == [
        f"'{path}': record 61 at byte {offsets[61]}: length checksum mismatch (framing lost "
        f"from here): the last {len(data) - offsets[61]} bytes are not read"
    ]


def test_damage_is_in_the_logs_output(tmp_path):
    path, offsets, _ = _damaged(tmp_path, lambda d, o: bytes(d[:-7]))
    hist = _logs.read_history(path.parent)
    text = _logs.render_text(hist, _logs.analyze(hist))
    assert f"note: '{path}': the last record, at byte {offsets[-1]}, is cut short" in text


# --- memory: 16 bytes a reading while reading, the history's 8-byte columns after ------------


def _many(path: Path, n: int) -> Path:
    from datacheck._tfrecord import masked_crc

    out = bytearray()
    for s in range(n):
        for tag in (b"train/loss", b"train/grad_norm"):
            e = _event(s, ld(1, tag) + b"\x15" + struct.pack("<f", 1.0 + s % 7))
            head = struct.pack("<Q", len(e))
            out += head + struct.pack("<I", masked_crc(head)) + e
            out += struct.pack("<I", masked_crc(e))
    path.write_bytes(out)
    return path


def _peak(path: Path) -> int:
    tracemalloc.start()
    try:
        table = read_tensorboard(path, set())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert table.notes == []
    return peak


def test_memory_per_reading(tmp_path):
    small, large = 5_000, 45_000
    grown = _peak(_many(tmp_path / "events.out.tfevents.2.h", large))
    grown -= _peak(_many(tmp_path / "events.out.tfevents.1.h", small))
    per_reading = grown / (2 * (large - small))
    assert per_reading < 40, per_reading  # ~29 measured; EventAccumulator took ~250


def test_every_flipped_byte_and_every_cut_is_reported(tmp_path):
    clean = _summary_writer(tmp_path / "clean", range(8), loss=1.0)
    data = clean.read_bytes()
    bounds = set(_offsets(data)) | {len(data)}
    path = tmp_path / "run" / "events.out.tfevents.1.host"
    path.parent.mkdir()
    for at in range(len(data)):
        damaged = bytearray(data)
        damaged[at] ^= 0x20
        path.write_bytes(bytes(damaged))
        table = read_tensorboard(path, set())
        assert len(table.notes) == 1 and "byte" in table.notes[0], at
        assert table.train.n >= 7 or "not read" in table.notes[0], at  # one record lost at most
    for cut in range(1, len(data)):
        path.write_bytes(data[:cut])
        table = read_tensorboard(path, set())
        assert (table.notes == []) == (cut in bounds), cut  # a cut between records is an end
