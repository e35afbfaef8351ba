"""The text reader's fast paths read exactly what a full parse reads."""

from __future__ import annotations

import math
import random
import tracemalloc
from pathlib import Path

import _trainers as tr
import pytest

from datacheck import _logs
from datacheck.history import _text
from datacheck.history._text import read_text

_NUMBERS = ["2.5", "7", "-3", "+4", "1e5", "2.", ".5", "nan", "NaN", "-inf", "Infinity", "12ms"]
_TEMPLATES = [
    "iter {}: loss {}, time {}ms, mfu {}%",
    "step {} | loss {} | lr {} | grad_norm {}",
    "lr 5e-{} loss {} step {} y{}",  # a piece ending in "-" before a number: "5e-7" is one
    "step {} loss+{} a-{} b {}",
    " iteration {}/ 100 | lm loss: {} | grad norm: {} | number of nan iterations: {} |",
]


def _read(path: Path, monkeypatch: pytest.MonkeyPatch, runs: int) -> tuple[object, ...]:
    monkeypatch.setattr(_text, "_RUNS", runs)
    table = read_text(path, set())
    cols = {k: [repr(v) for v in c] for k, c in sorted(table.train.cols.items())}
    evals = {k: [repr(v) for v in c] for k, c in sorted(table.eval.cols.items())}
    return cols, evals, repr(table.events)


def test_whole_line_patterns_read_what_splitting_reads(tmp_path, monkeypatch):
    rng = random.Random(7)
    lines = []
    for _ in range(60):  # runs of one shape, the shapes mixed
        template = rng.choice(_TEMPLATES)
        numbers = rng.sample(_NUMBERS, 4)
        for _ in range(rng.randint(1, 120)):
            if rng.random() < 0.3:
                numbers[rng.randrange(4)] = rng.choice(_NUMBERS)
            lines.append(template.format(*numbers))
    path = tr.write(tmp_path / "mixed.log", "\n".join(lines) + "\n")
    fast, slow = _read(path, monkeypatch, 2), _read(path, monkeypatch, 10**9)
    assert fast == slow and fast[0]


def test_a_dotless_i_is_not_infinity(tmp_path):
    """``ınf`` (a Turkish dotless i) matched ``inf`` case-insensitively, and float() crashed."""
    path = tr.write(tmp_path / "t.log", "step 1 loss 2.0\nstep 2 loss \u0131nf\nstep 3 loss 2.1\n")
    hist = _logs.read_history(path)
    assert hist.steps == [1, 2, 3] or hist.steps == [1, 3]
    assert not any(v is not None and math.isinf(v) for v in hist.loss)


@pytest.mark.parametrize(
    "shape", ["megatron", "nanogpt", "hf_console", "keras", "fairseq", "mmengine", "lightning"]
)
def test_plans_read_what_a_full_parse_of_every_line_reads(tmp_path, monkeypatch, shape):
    run = tr.make_run(300, spike_at=2500, nan_at=2800, grad_from=2300)
    path = tr.write(tmp_path / f"{shape}.log", getattr(tr, shape)(run))
    planned = _read(path, monkeypatch, 2)
    monkeypatch.setattr(_text, "_CACHE_LIMIT", 0)  # no plans: every line parsed in full
    assert planned == _read(path, monkeypatch, 2) and planned[0]


def test_a_file_without_line_breaks_is_read_in_pieces(tmp_path):
    """8 MB of one line: read 1 MB at a time (the peak stays a few pieces, not the file)."""
    text = "step 1 loss 2.0\n" + "x=y " * 2_000_000 + "\nstep 2 loss 2.1\nstep 3 loss 2.2\n"
    path = tr.write(tmp_path / "one-line.log", text)
    tracemalloc.start()
    try:
        table = read_text(path, set())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert list(table.train.cols["loss"]) == [2.0, 2.1, 2.2]
    assert peak < 12 * 2**20, f"{peak / 2**20:.0f} MB"
