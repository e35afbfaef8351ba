"""``datacheck logs`` on the guard's own log agrees with what the guard judged, both ways: a
spike the guard called is reported at the guard's step, and a run the guard judged healthy is
healthy, even where the readings its log keeps (every ``log_every``-th healthy step) would
look like a spike when judged again on their own."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from datacheck import _logs  # noqa: E402
from datacheck.torch import TrainingGuard  # noqa: E402

F = torch.nn.functional


def _train(log: Path, factors: list[float]) -> None:
    """A small regression trained with the guard; ``factors`` weigh each step's loss (how
    hard its batch is), so the losses the guard sees are known."""
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = x @ torch.randn(8, 1)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    guard = TrainingGuard(model, opt, log=str(log))  # log_every=10: healthy steps thinned
    for factor in factors:
        loss = F.mse_loss(model(x[:32]), y[:32]) * factor
        loss.backward()
        guard.step(loss)
        opt.zero_grad(set_to_none=True)
    guard.close()


def test_a_spike_the_guard_called_is_reported_at_its_step(tmp_path):
    factors = [1.0 + 0.02 * (i % 3) for i in range(120)]
    for i in range(60, 66):  # six hard batches in a row: the guard skips, then rolls back
        factors[i] = 40.0
    log = tmp_path / "guard.jsonl"
    _train(log, factors)
    hist = _logs.read_history(log)
    tl = _logs.analyze(hist)
    assert hist.format == "guard log"
    assert tl.status in ("spike", "diverging") and tl.warning_step == 60, tl
    assert tl.guard_events.get("loss_spike", 0) >= 1


def test_a_run_the_guard_judged_healthy_is_healthy(tmp_path):
    rng = random.Random(4)
    factors = [rng.uniform(0.85, 1.2) for _ in range(120)]  # batches of varying difficulty
    for i in (0, 10):
        factors[i] = 0.7  # the first two logged readings happen to be easy batches
    for i in (20, 30):
        factors[i] = 1.15  # and the next two hard ones: inside the batches' spread
    log = tmp_path / "guard.jsonl"
    _train(log, factors)
    hist = _logs.read_history(log)
    assert not hist.events or all(e["kind"] not in ("loss_spike", "rollback") for e in hist.events)
    tl = _logs.analyze(hist)
    assert tl.status == "healthy", tl
    # the same readings judged again on their own (as any JSON Lines log) would call a spike:
    again = _logs.analyze(replace(hist, format="jsonl"))
    assert again.status in ("spike", "diverging") and again.warning_step == 20, again
