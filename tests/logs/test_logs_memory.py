"""Reading a log keeps its readings compact: arrays of 8-byte floats, not Python objects.

Memory is measured with ``tracemalloc`` (what Python allocates, not the process's RSS), as the
growth of the peak between a short and a long log of the same shape, so imports, compiled
patterns and the parse plans cancel out.  Not timed.
"""

from __future__ import annotations

import tracemalloc
from array import array
from pathlib import Path

import _trainers as tr
import pytest

from datacheck import _logs
from datacheck.history._text import read_text

PER_READING = {"megatron": 96, "nanogpt": 48}
"""Bytes a reading may add to the peak.  A Megatron line keeps 7 numbers, a nanoGPT line 2,
8 bytes each in the reader's columns, which the history then uses in place (~70 and ~35 bytes
measured); Python lists of floats took ~250 a Megatron reading."""


def _log(tmp_path: Path, n: int, shape: str = "megatron") -> Path:
    """A validation block every 250 readings and a checkpoint every 1000."""
    run = tr.make_run(n, spike_at=10 * (n - 20), nan_at=10 * (n - 5))
    run.evals = run.steps[250::250]
    run.checkpoints = run.steps[1000::1000]
    return tr.write(tmp_path / f"{shape}-{n}.log", getattr(tr, shape)(run))


def _peak(path: Path) -> int:
    tracemalloc.start()
    try:
        tl = _logs.analyze(_logs.read_history(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tl.status == "nan"
    return peak


def test_series_are_arrays_of_doubles(tmp_path):
    hist = _logs.read_history(_log(tmp_path, 500))
    for series in (hist.steps, hist.loss, hist.grad_norm, hist.lr):
        assert isinstance(series.data, array) and series.data.typecode == "d"
        assert len(series) == 500 and series.nbytes == 8 * 500
    table = read_text(_log(tmp_path, 500), set())
    assert all(isinstance(c, array) and c.typecode == "d" for c in table.train.cols.values())
    assert hist.loss[-1] != hist.loss[-1] and hist.steps[:2] == [0.0, 10.0]  # NaN kept


@pytest.mark.parametrize("shape", sorted(PER_READING))
def test_peak_memory_per_reading_is_bounded(tmp_path, shape):
    small, large = _log(tmp_path, 2_000, shape), _log(tmp_path, 22_000, shape)
    _logs.analyze(_logs.read_history(small))  # patterns compiled, modules imported
    per = (_peak(large) - _peak(small)) / 20_000
    assert per < PER_READING[shape], f"{per:.0f} bytes per reading"
