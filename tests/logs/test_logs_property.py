"""A property: whatever way a hand-written loop prints its counter and its loss (the word before
or after the number, brackets, a total, any separator, units and other fields around, either
order), the step and the loss come back, and a NaN is found at its step."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datacheck import _logs

COUNTERS = ["step", "Step", "iter", "Iter", "iteration", "global_step", "num_updates", "Up."]
BEFORE_WORDS = ["step", "steps", "iter", "iteration", "update"]
"""Counter words a loop may print after the number (``100 iter``)."""
COUNTER_FORMS = [
    "{name} {n}",
    "{name}: {n}",
    "{name}={n}",
    "{name} {n}/{total}",
    "{name} [{n}/{total}]",
    "[{name}={n}/{total}]",
    "{name}:[{n}/{total}]",
    "({name} {n})",
]
LOSSES = [
    "loss",
    "Loss",
    "train_loss",
    "train loss",
    "lm loss",
    "Cost",
    "nll_loss",
    "xent",
    "loss_net",
]
LOSS_FORMS = ["{name} {v}", "{name}: {v}", "{name}={v}", "{name} is {v}"]
NUMBER_FORMS = ["{:.4f}", "{:.6E}", "{:g}", "{!r}", "{:.3f}"]
SEPARATORS = [" | ", ", ", " ", "  ", "\t", " - ", "; ", " : "]
EXTRAS = [
    "time {t:.2f}ms",
    "mfu {m:.2f}%",
    "lr {lr:.2e}",
    "tok/s {k}",
    "grad_norm: {g:.3f}",
    "eta 1:02:03",
    "mem 12.5GB",
]
PREFIXES = ["", "[2025-06-01 10:00:00,123] [INFO] ", "[default0]:", "I0601 10:00:00.1 12 t.py:9] "]


@st.composite
def logs(draw: st.DrawFn) -> tuple[str, list[float], list[float], int | None]:
    """(text, steps, losses, index of the NaN reading or None)."""
    n = draw(st.integers(12, 40))
    gaps = draw(st.lists(st.integers(1, 50), min_size=n, max_size=n))
    start = draw(st.integers(0, 1000))
    steps = [start + sum(gaps[:i]) for i in range(n)]
    total = steps[-1] + draw(st.integers(1, 1000))
    losses = [draw(st.floats(0.5, 9.5)) for _ in range(n)]
    nan_at = draw(st.one_of(st.none(), st.integers(n // 2, n - 1)))
    before = draw(st.booleans())
    name = draw(st.sampled_from(BEFORE_WORDS if before else COUNTERS))
    counter_form = "{n} {name}" if before else draw(st.sampled_from(COUNTER_FORMS))
    loss_name = draw(st.sampled_from(LOSSES))
    loss_form = draw(st.sampled_from(LOSS_FORMS))
    number = draw(st.sampled_from(NUMBER_FORMS))
    sep = draw(st.sampled_from(SEPARATORS))
    extras = draw(st.lists(st.sampled_from(EXTRAS), max_size=3, unique=True))
    prefix = draw(st.sampled_from(PREFIXES))
    order = draw(st.permutations(range(2 + len(extras))))
    lines = []
    for i, (s, v) in enumerate(zip(steps, losses, strict=True)):
        value = math.nan if nan_at is not None and i >= nan_at else v
        fields = [
            counter_form.format(name=name, n=s, total=total),
            loss_form.format(name=loss_name, v=number.format(value)),
            *(e.format(t=97.3 + i, m=41.2, lr=3e-4, k=1234 + i, g=0.3 + i / 100) for e in extras),
        ]
        lines.append(prefix + sep.join(fields[k] for k in order))
    return "\n".join(lines) + "\n", [float(s) for s in steps], losses, nan_at


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(logs())
def test_step_and_loss_come_back_whatever_the_shape(case):
    text, steps, losses, nan_at = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.log"
        path.write_text(text)
        hist = _logs.read_history(path)
        tl = _logs.analyze(hist)
    assert list(hist.steps) == steps, (text.splitlines()[0], hist.keys, hist.reasons)
    for got, want, i in zip(hist.loss, losses, range(len(losses)), strict=True):
        if nan_at is not None and i >= nan_at:
            assert got is not None and math.isnan(got)
        else:
            assert got == want or abs(got - want) <= 1e-3 * want + 1e-4, text.splitlines()[i]  # type: ignore[operator]
    if nan_at is not None:
        assert (tl.status, tl.nan_step) == ("nan", steps[nan_at]), text.splitlines()[nan_at]
