"""Every trainer's log shape, written from its own format string (``_corpus.py`` says where
each comes from), read right: the log's own step and loss, NaN and the spike at the log's own
step, a healthy run exit 0, several readings of a step (a NaN in one of them counts) and a
resumed run (the counter goes back) kept in log order."""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import _corpus as corpus
import _trainers as tr
import pytest

from datacheck import _logs
from datacheck.cli import main

SHAPES = {shape.name: shape for shape in corpus.SHAPES}
SPIKE_AT, NAN_AT, GRAD_FROM = 330, 400, 300
NOT_CHUNKED = {"deepspeed_engine", "keras2", "keras3", "yolov5"}
"""Writers whose text is not one run's readings in order (their lines number the readings):
no spliced scenarios for them."""


def _diverging(**kw: object) -> tr.Run:
    return tr.make_run(grad_from=GRAD_FROM, spike_at=SPIKE_AT, nan_at=NAN_AT, **kw)  # type: ignore[arg-type]


def _part(run: tr.Run, start: int, stop: int | None = None) -> tr.Run:
    """The readings ``start:stop`` of a run (by position)."""
    cut = slice(start, stop)
    return tr.Run(run.steps[cut], run.loss[cut], run.grad_norm[cut], run.lr[cut])


def _write(tmp_path: Path, shape: corpus.Shape, *runs: tr.Run) -> Path:
    path = tmp_path / shape.file
    text = "".join(shape.write(run) for run in runs)
    if shape.file.endswith(".csv") and len(runs) > 1:  # one header for the whole file
        lines = text.splitlines()
        text = "\n".join([lines[0], *(x for x in lines[1:] if x != lines[0])]) + "\n"
    path.write_text(text)
    return path


def _cli(path: Path) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return main(["logs", str(path)])


def test_the_corpus_covers_forty_trainers():
    assert len(SHAPES) >= 40 and all(" " in s.source or "@" in s.source for s in corpus.SHAPES)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_healthy_run_is_read_with_its_own_step_and_loss(tmp_path, name):
    shape = SHAPES[name]
    run = tr.make_run(seed=3)
    path = _write(tmp_path, shape, run)
    hist = _logs.read_history(path)
    if shape.loss is not None:
        assert hist.keys["loss"] == shape.loss, hist.reasons
    if shape.step is not None:
        assert hist.keys["step"] == shape.step, hist.reasons
    assert hist.steps[0] == pytest.approx(shape.at(0)), (hist.keys, hist.reasons)
    assert len(set(hist.steps)) >= 50, hist.notes
    tl = _logs.analyze(hist)
    assert tl.status == "healthy", (tl, hist.reasons)
    assert _cli(path) == 0


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_nan_and_spike_at_the_logs_own_step(tmp_path, name):
    shape = SHAPES[name]
    hist = _logs.read_history(_write(tmp_path, shape, _diverging()))
    tl = _logs.analyze(hist)
    assert tl.status == "nan", (tl, hist.reasons)
    assert tl.nan_step == pytest.approx(shape.at(NAN_AT)), (tl, hist.reasons)
    assert tl.warning_step == pytest.approx(shape.at(SPIKE_AT)), (tl, hist.reasons)
    assert tl.restart_step is not None and tl.restart_step < shape.at(SPIKE_AT)


@pytest.mark.parametrize("name", sorted(set(SHAPES) - NOT_CHUNKED))
def test_a_nan_in_one_reading_of_a_repeated_step_counts(tmp_path, name):
    """Step 400 logged twice (two ranks, two micro-batches): the second reading is NaN."""
    shape = SHAPES[name]
    run = tr.make_run(seed=3)
    k = run.steps.index(NAN_AT)
    bad = _part(run, k, k + 1)
    bad.loss, bad.grad_norm = [math.nan], [math.nan]
    path = _write(tmp_path, shape, _part(run, 0, k + 1), bad, _part(run, k + 1))
    hist = _logs.read_history(path)
    tl = _logs.analyze(hist)
    assert (tl.status, tl.nan_step) == ("nan", pytest.approx(shape.at(NAN_AT))), (tl, hist.notes)


@pytest.mark.parametrize("name", sorted(set(SHAPES) - NOT_CHUNKED))
def test_a_resumed_run_is_read_in_log_order(tmp_path, name):
    """Healthy to step 300, then resumed from step 200: diverges and goes NaN at 400."""
    shape = SHAPES[name]
    first, again = tr.make_run(seed=3), _diverging()
    path = _write(tmp_path, shape, _part(first, 0, 31), _part(again, 20))
    hist = _logs.read_history(path)
    tl = _logs.analyze(hist)
    assert (tl.status, tl.nan_step) == ("nan", pytest.approx(shape.at(NAN_AT))), (tl, hist.notes)
    assert any("goes back" in n for n in hist.notes), hist.notes
    healthy = _write(tmp_path, shape, _part(first, 0, 31), _part(first, 20))
    assert _logs.analyze(_logs.read_history(healthy)).status == "healthy"
    assert _cli(healthy) == 0
