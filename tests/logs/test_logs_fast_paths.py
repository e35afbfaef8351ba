"""The fast paths of ``datacheck logs`` give what the full paths give, on every trainer shape.

* the text reader's line shapes (numbers with a unit glued on are numbers of the shape), their
  whole-line patterns and the rows appended straight to the columns, against parsing every
  line in full;
* the timeline's pass with :meth:`SpikeDetector.feed`, against one ``update`` per reading.
"""

from __future__ import annotations

from pathlib import Path

import _trainers as tr
import pytest
from test_logs_shapes import SHAPES

from datacheck import _logs
from datacheck.checks._spike import GRAD_NORM, LOSS
from datacheck.history import sniff
from datacheck.history._table import Table
from datacheck.history._text import _read, _Reader, read_text
from datacheck.history._timeline import _analyze, _walk_each

TEXT_SHAPES = ["megatron", "nanogpt", "hf_console", "keras", "fairseq", "mmengine", "lightning"]


class _EveryLine(_Reader):
    """The full path: every line parsed in full, no plans, no patterns."""

    def line(self, line: str) -> None:
        tag, row = self._parse(line, None)
        if tag:
            self._add(tag, row)


def _runs() -> list[tr.Run]:
    long = tr.make_run(600, spike_at=4000, nan_at=5500, grad_from=3800, seed=1)
    long.evals, long.checkpoints = long.steps[50::50], long.steps[100::100]
    blips = tr.make_run(400, seed=2)
    for i in (150, 151, 300):
        blips.loss[i] *= 4
    return [
        tr.make_run(grad_from=300, spike_at=330, nan_at=400),
        tr.make_run(seed=3),
        tr.make_run(5, seed=4),
        long,
        blips,
    ]


def _dump(table: Table) -> tuple[object, ...]:
    def cols(c: object) -> object:
        return (c.n, {k: v.tobytes() for k, v in c.cols.items()})  # type: ignore[attr-defined]

    return cols(table.train), cols(table.eval), repr(table.events), table.notes


@pytest.mark.parametrize("shape", TEXT_SHAPES)
def test_text_reader_reads_as_every_line_parsed_in_full(tmp_path, shape):
    name, writer, *_ = SHAPES[shape]
    for k, run in enumerate(_runs()):
        path = tr.write(tmp_path / f"{k}-{name}", writer(run))
        assert sniff(path) == "text"
        fast, full = read_text(path, set()), _read(path, _EveryLine(set()))
        assert _dump(fast) == _dump(full), (shape, k)


def test_numbers_with_units_make_one_shape(tmp_path):
    lines = [
        f"iter {i}: loss 2.{i % 97:02d}, time {90 + i * 1.37:.2f}ms, mfu {i % 50}.1%"
        for i in range(300)
    ]
    path = tr.write(tmp_path / "train.log", "\n".join(lines) + "\n")
    reader = _Reader(set())
    table = _read(path, reader)
    assert len(reader.shapes.ctx.plans) == 1 and table.train.n == 300
    assert _dump(table) == _dump(_read(path, _EveryLine(set())))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_timeline_pass_in_batches_equals_one_update_per_reading(tmp_path, shape):
    name, writer, *_ = SHAPES[shape]
    for k, run in enumerate(_runs()):
        hist = _logs.read_history(tr.write(tmp_path / f"{k}-{name}", writer(run)))
        each = _analyze(hist, _walk_each, LOSS, GRAD_NORM, 200)
        assert repr(_logs.analyze(hist)) == repr(each), (shape, k)


def test_timeline_batches_cross_chunk_boundaries(tmp_path):
    run = tr.make_run(9000, every=1, spike_at=8800, nan_at=8950, seed=5)
    for i in range(0, 9000, 1000):  # blips and short spikes around the 4096-row chunks
        run.loss[i] *= 3
        run.loss[i + 4095 - i % 4096 if i + 4095 < 9000 else i] *= 5
    hist = _logs.read_history(tr.write(tmp_path / "train.log", tr.nanogpt(run)))
    each = _analyze(hist, _walk_each, LOSS, GRAD_NORM, 200)
    assert repr(_logs.analyze(hist)) == repr(each)
    assert each.blips


def test_equal_histories_are_compared(tmp_path: Path) -> None:
    """The comparisons above would catch a difference: a changed reading changes the dump."""
    path = tr.write(tmp_path / "train.log", tr.nanogpt(tr.make_run(100)))
    other = tr.write(tmp_path / "other.log", tr.nanogpt(tr.make_run(100, seed=9)))
    assert _dump(read_text(path, set())) != _dump(read_text(other, set()))
