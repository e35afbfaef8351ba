"""The scenario benchmark's small version, with its targets as assertions (issue 14).

MLP task, 300 steps, scenarios clean / poison / lr_base / shuffled, and ddp2 (2 gloo processes,
bad data on rank 1), three ways each.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import guard_scenarios  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    torch.set_num_threads(1)
    found = guard_scenarios.measure(small=True)
    return {(r["scenario"], r["way"]): r for r in found}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_never_worse_than_skip_and_clip_and_better_where_it_acts(rows):
    better = 0
    for scenario in ("clean", "poison", "lr_base", "shuffled", "ddp2"):
        guard, clip = rows[scenario, "guard"], rows[scenario, "clip"]
        assert guard["stopped"] is None and guard["crashed"] is None, scenario
        if clip["crashed"] is not None:
            better += 1  # skip-and-clip did not finish; the guarded run did
            continue
        assert guard["loss"] <= clip["loss"] * 1.1 + 0.01, scenario
        assert guard["acc"] >= clip["acc"] - 0.01, scenario
        better += guard["loss"] < 0.8 * clip["loss"]
    assert better >= 3  # poison (finishes), lr_base and shuffled (lower held-out loss)
    assert math.isnan(rows["ddp2", "none"]["loss"])  # one rank's NaN reaches every rank


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_silent_on_a_clean_run_and_no_clean_sample_quarantined(rows):
    clean = rows["clean", "guard"]
    assert clean["skips"] == clean["rollbacks"] == clean["lr_cuts"] == clean["lost"] == 0
    for scenario in ("clean", "poison", "lr_base", "shuffled", "ddp2"):
        assert rows[scenario, "guard"]["clean_quarantined"] == 0, scenario
    assert rows["shuffled", "guard"]["lr_cuts"] == 0  # bad data is skipped, never an LR cut
    assert rows["lr_base", "guard"]["lr_cuts"] >= 1  # divergence is
