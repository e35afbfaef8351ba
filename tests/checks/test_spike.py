"""The one spike detector shared by ``datacheck logs`` and ``TrainingGuard``."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest

from datacheck.checks._spike import GRAD_NORM, LOSS, SpikeConfig, SpikeDetector, Verdict
from datacheck.errors import UsageError

NAN = math.nan


def _kinds(values, config=LOSS, steps=None):
    det = SpikeDetector(config)
    steps = steps or range(len(values))
    return [det.update(v, step=s) for s, v in zip(steps, values, strict=True)]


def test_founding_example_short_log():
    """2.451 .. 2.410 (6000), 25.842 (6100), 842.15, 15402.9, NaN (6400)."""
    steps = range(5700, 6500, 100)
    values = [2.451, 2.432, 2.445, 2.410, 25.842, 842.15, 15402.9, NAN]
    verdicts = _kinds(values, steps=steps)
    assert [v.kind for v in verdicts] == [
        "warmup",
        "ok",
        "ok",
        "ok",
        "spike",
        "sustained",
        "sustained",
        "nonfinite",
    ]
    assert verdicts[4].episode_start == 6100 and verdicts[4].ratio == pytest.approx(10.6, abs=0.1)


@pytest.mark.parametrize(
    "before, jump, after",
    [
        # the shapes of the spikes the BigScience chronicles document (own numbers, same ratios)
        ([6.5], 1.77, [1.1]),  # one reading before; the next printed reading 21 intervals on
        ([2.7, 2.7], 1.64, [1.64, 1.65, 1.65, 1.55]),  # fp16 overflow run: stays up
        ([2.8, 2.79, 2.78], 2.65, [3.1, 2.8, 2.6, 2.5]),  # 13B: stays up
        ([2.2, 2.22, 2.6, 2.24, 2.35], 2.3, [1.58, 1.44, 1.27]),  # BLOOM: recovers
    ],
)
def test_documented_language_model_spikes_are_found(before, jump, after):
    level = sorted(before)[len(before) // 2]
    values = [*before, jump * level, *(r * level for r in after)]
    steps = [10 * i for i in range(len(values))]
    if len(after) == 1:
        steps[-1] = steps[-2] + 210  # a gap in the printed log: not "at once"
    verdicts = _kinds(values, steps=steps)
    first = verdicts[len(before)]
    assert first.kind == "spike", [v.kind for v in verdicts]
    assert not any(v.blip_step is not None for v in verdicts)
    assert not any(v.above for v in verdicts[: len(before)])


def test_grad_norm_rise_is_flagged_before_the_loss():
    gnorm = [0.24, 0.95, 2.4, 15.9, 145.0, 960.0, 353.0, 0.27]
    kinds = [v.kind for v in _kinds(gnorm, GRAD_NORM)]
    assert kinds == ["warmup", "ok", "ok", "spike", "sustained", "sustained", "sustained", "ok"]


def _healthy(n, noise, seed=0):
    rng = random.Random(seed)
    return [(2.0 + 8.0 * math.exp(-i / 300)) * math.exp(rng.gauss(0, noise)) for i in range(n)]


@pytest.mark.parametrize("noise", [0.0, 0.01, 0.05])
def test_healthy_runs_are_never_flagged(noise):
    assert not any(v.above for v in _kinds(_healthy(20_000, noise)))


def test_heavy_tailed_batch_noise_gives_blips_never_sustained_spikes():
    verdicts = _kinds(_healthy(20_000, 0.3, seed=1))
    assert not any(v.kind == "sustained" for v in verdicts)
    spikes = [v.episode_start for v in verdicts if v.kind == "spike"]
    blips = [v.blip_step for v in verdicts if v.blip_step is not None]
    assert spikes == blips and len(spikes) < 20


def test_one_noisy_batch_in_a_converged_run_is_a_blip():
    rng = random.Random(2)
    values = [0.015 * math.exp(rng.gauss(0, 0.2)) for _ in range(300)]
    values[200] = 0.196
    verdicts = _kinds(values)
    assert verdicts[200].kind == "spike" and verdicts[201].blip_step == 200
    assert [i for i, v in enumerate(verdicts) if v.above] == [200]


def test_a_jump_within_the_series_noise_is_not_a_spike():
    rng = random.Random(3)
    values = [0.015 * math.exp(rng.gauss(0, 0.5)) for _ in range(300)]
    values[200] = 0.045  # 3x the median, but the batch losses swing that much
    assert not _kinds(values)[200].above


def test_two_readings_up_are_sustained_not_a_blip():
    values = [2.0] * 20 + [5.0, 5.0, 2.0]
    verdicts = _kinds(values)
    assert [v.kind for v in verdicts[20:]] == ["spike", "sustained", "ok"]
    assert verdicts[22].recovered and verdicts[22].blip_step is None


def test_the_baseline_is_frozen_during_an_episode():
    values = [2.0] * 10 + [4.0] * 200
    verdicts = _kinds(values)
    assert all(v.kind == "sustained" for v in verdicts[11:])
    assert verdicts[-1].level == 2.0


def test_negative_series_use_the_spread_test_only():
    rng = random.Random(4)
    values = [-3.0 + rng.gauss(0, 0.01) for _ in range(100)] + [-2.0]
    verdicts = _kinds(values)
    assert verdicts[-1].kind == "spike" and verdicts[-1].ratio is None
    assert not any(v.above for v in verdicts[:-1])


def test_check_does_not_change_state():
    det = SpikeDetector()
    for v in [2.0, 2.1, 2.0]:
        det.update(v)
    before = det.state_dict()
    assert det.check(9.0).kind == "spike" and det.check(NAN).kind == "nonfinite"
    assert det.state_dict() == before


@pytest.mark.parametrize("cut", [5, 150, 201, 202, 260])
def test_state_dict_round_trips_through_json(cut):
    values = _healthy(300, 0.05)
    values[200:203] = [40.0, 41.0, NAN]
    values[250] = 50.0
    whole = _kinds(values)
    det = SpikeDetector()
    for s, v in enumerate(values[:cut]):
        det.update(v, step=s)
    resumed = SpikeDetector()
    resumed.load_state_dict(json.loads(json.dumps(det.state_dict(), allow_nan=False)))
    rest = [resumed.update(v, step=s) for s, v in enumerate(values) if s >= cut]
    assert [(v.kind, v.blip_step) for v in rest] == [(v.kind, v.blip_step) for v in whole[cut:]]


def test_state_of_another_version_is_refused():
    with pytest.raises(UsageError, match="version"):
        SpikeDetector().load_state_dict({"version": 99})


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"window": 1}, "window"),
        ({"sigma": 0}, "sigma"),
        ({"ratio": 1.0}, "ratio"),
        ({"min_readings": 0}, "min_readings"),
        ({"min_spread": 200}, "min_spread"),
        ({"mad_floor": -1}, "mad_floor"),
        ({"blip_gap": 0.5}, "blip_gap"),
    ],
)
def test_config_is_validated(kwargs, match):
    with pytest.raises(UsageError, match=match):
        SpikeConfig(**kwargs)


def test_config_is_frozen():
    with pytest.raises(AttributeError):
        LOSS.ratio = 2.0  # type: ignore[misc]


def _series(rng: random.Random) -> tuple[list[float], list[float]]:
    """A series with the shapes a log has: noise, blips, sustained spikes, a drop, NaN/inf,
    zeros and negatives; short or long, with uneven steps."""
    n = rng.choice([0, 1, 2, 3, 5, 9, 50, 130, 300, 1000])
    base, noise = rng.choice([2.4, 0.015, 0.0, -1.0]), rng.choice([0, 0.001, 0.01, 0.5])
    if base > 0:
        v = [base * math.exp(rng.gauss(0, noise)) for _ in range(n)]
    else:
        v = [base + rng.gauss(0, noise) for _ in range(n)]
    for _ in range(rng.randint(0, 6) if n else 0):
        i, kind = rng.randrange(n), rng.random()
        if kind < 0.3:
            v[i] = rng.choice([NAN, math.inf, -math.inf, 0.0, -0.0])
        elif kind < 0.6:
            v[i] *= rng.choice([1.6, 3, 100])  # a blip
        elif kind < 0.9:
            for k in range(i, min(n, i + rng.randint(2, 200))):
                v[k] *= rng.choice([2, 5])  # a sustained spike
        else:
            v[i:] = [x * 0.3 for x in v[i:]]
    steps = [float(s) for s in itertools.accumulate(rng.choice([1, 1, 10, 0, 2.5]) for _ in v)]
    return v, steps


def _notable(
    det: SpikeDetector, values: list[float], steps: list[float]
) -> list[tuple[int, Verdict]]:
    out = []
    for i, (v, s) in enumerate(zip(values, steps, strict=True)):
        verdict = det.update(v, s)
        if verdict.kind not in ("ok", "warmup") or verdict.recovered or verdict.rebased:
            out.append((i, verdict))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_feed_gives_what_update_gives_reading_by_reading(seed):
    """The offline batch entry point: same verdicts, same state, in any chunks, from any state."""
    np = pytest.importorskip("numpy")
    rng = random.Random(seed)
    configs = [LOSS, GRAD_NORM, SpikeConfig(window=4, min_readings=2, min_spread=2)]
    for _ in range(150):
        config = rng.choice(configs)
        each, batch = SpikeDetector(config), SpikeDetector(config)
        if rng.random() < 0.5:  # a state left by earlier readings
            before = _series(rng)
            _notable(each, *before)
            _notable(batch, *before)
        values, steps = _series(rng)
        want = _notable(each, values, steps)
        got, at, size = [], 0, rng.choice([1, 7, 100, 10**6])
        while at < len(values):
            chunk = slice(at, at + size)
            verdicts = batch.feed(np.array(values[chunk]), np.array(steps[chunk]))
            got += [(at + i, v) for i, v in verdicts]
            at += size
        assert repr(got) == repr(want)
        assert batch.state_dict() == each.state_dict()
        assert repr(batch._sorted) == repr(each._sorted)
        assert repr((batch.level, batch.threshold)) == repr((each.level, each.threshold))
