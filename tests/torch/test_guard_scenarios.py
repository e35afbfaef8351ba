"""A fast slice of the guard scenario suite (issue 28), with its targets as assertions: never
worse than skip-and-clip beyond 5 % + 0.01 nats, no stop where skip-and-clip finishes, no clean
sample quarantined, and better where the guard exists for (non-finite samples, a NaN
micro-batch, real divergence).  The whole suite: ``python benchmarks/guard_scenarios.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import guard_scenarios  # noqa: E402

SLICE = ("clean", "class_incremental", "stale_batch", "nan_samples", "nan_microbatch", "lr_x100")
MUST_WIN = ("nan_samples", "nan_microbatch", "lr_x100")


@pytest.fixture(scope="module")
def rows():
    torch.set_num_threads(1)
    found = guard_scenarios.measure(SLICE, ("mlp",), seeds=(0,), scale=0.5)
    return {(r["scenario"], r["way"]): r for r in found}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_never_worse_than_skip_and_clip_and_better_where_it_exists_for(rows):
    for scenario in SLICE:
        guard, clip = rows[scenario, "guard"], rows[scenario, "clip"]
        assert not guard_scenarios.worse(guard, clip), (scenario, guard, clip)
        assert guard["stopped"] is None and guard["clean_quarantined"] == 0, scenario
        if scenario in MUST_WIN:
            assert guard_scenarios.better(guard, clip), (scenario, guard, clip)
    clean = rows["clean", "guard"]
    assert clean["lost"] == clean["rollbacks"] == clean["lr_cuts"] == clean["probes"] == 0
    assert rows["class_incremental", "guard"]["lr_cuts"] == 0


def test_the_comparison_rule():
    clip = {"loss": 1.0, "crashed": None, "stopped": None}
    ok = {"loss": 1.059, "crashed": None, "stopped": None}
    bad = {"loss": 1.061, "crashed": None, "stopped": None}
    assert not guard_scenarios.worse(ok, clip) and guard_scenarios.worse(bad, clip)
    assert guard_scenarios.worse({**ok, "stopped": 10}, clip)
    crashed = {"loss": float("nan"), "crashed": "step 4: IndexError", "stopped": None}
    assert guard_scenarios.better(ok, crashed) and not guard_scenarios.worse(ok, crashed)
