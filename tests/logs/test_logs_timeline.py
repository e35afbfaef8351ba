"""The timeline: the founding example, documented spikes, blips, guard logs, restart and LR."""

from __future__ import annotations

import json
import math
from pathlib import Path

import _trainers as tr
import pytest

from datacheck import _logs
from datacheck.checks._spike import SpikeConfig
from datacheck.errors import InputError


def _text(tmp_path: Path, lines: list[str], name: str = "train.log") -> _logs.Timeline:
    path = tr.write(tmp_path / name, "\n".join(lines) + "\n")
    return _logs.analyze(_logs.read_history(path))


def test_founding_example(tmp_path):
    """The diverging run this project was started for: a short log, warning 6100, NaN 6400."""
    values = ["2.451", "2.432", "2.445", "2.410", "25.842", "842.15", "15402.9", "nan"]
    tl = _text(
        tmp_path, [f"step {5700 + 100 * i} | loss {v} | lr 3e-4" for i, v in enumerate(values)]
    )
    assert (tl.status, tl.warning_step, tl.danger_step, tl.nan_step) == ("nan", 6100, 6200, 6400)
    assert tl.restart_step is not None and tl.restart_step <= 6000
    assert tl.restart_from == "last healthy step" and tl.suggested_lr == pytest.approx(1.5e-4)


def _megatron(rows: list[tuple[int, float, float]]) -> list[str]:
    return [
        f" iteration {s:8d}/  311541 | learning rate: 6.000E-05 | lm loss: {loss:.6E} | "
        f"loss scale: 4096.0 | grad norm: {g:.3f} | number of skipped iterations:   0 | "
        "number of nan iterations:   0 |"
        for s, loss, g in rows
    ]


@pytest.mark.parametrize(
    "losses, warning",
    [  # the shapes BigScience documents: 1.6-2.6x jumps after one to five readings
        ([6.4, 11.3], 1),
        ([2.70, 2.71, 4.43, 4.42, 4.45], 2),
        ([2.78, 2.77, 2.77, 7.35, 8.70, 7.65], 3),
        ([2.20, 2.22, 2.60, 2.24, 2.35, 5.10, 3.49, 3.21, 2.80], 5),
    ],
)
def test_language_model_spikes_are_found(tmp_path, losses, warning):
    rows = [(1000 + 10 * i, v, 0.3) for i, v in enumerate(losses)]
    tl = _text(tmp_path, _megatron(rows))
    assert tl.warning_step == 1000 + 10 * warning and tl.status in ("spike", "diverging")
    assert tl.restart_step == 1000 + 10 * (warning - 1)


def test_grad_norm_rise_is_an_early_warning_on_its_own(tmp_path):
    gnorms = [0.24, 0.25, 0.24, 2.4, 15.9, 145.0, 960.0]
    tl = _text(tmp_path, _megatron([(100 + i, 2.2, g) for i, g in enumerate(gnorms)]))
    assert (tl.status, tl.grad_warning_step, tl.warning_step) == ("warning", 103, None)
    assert tl.restart_step == 102


def test_one_noisy_batch_in_a_converged_run_is_a_blip(tmp_path):
    run = tr.make_run(n=200, every=1, level=0.015, seed=4)
    run.loss[150] = 0.196
    path = tr.write(tmp_path / "guard.jsonl", tr.guard_jsonl(run))
    tl = _logs.analyze(_logs.read_history(path))
    assert (tl.status, tl.blips, tl.warning_step, tl.restart_step) == (
        "healthy",
        (150,),
        None,
        None,
    )
    assert "blips      1" in _logs.render_text(_logs.read_history(path), tl)


def test_two_readings_up_are_a_spike(tmp_path):
    run = tr.make_run(n=100, every=1)
    run.loss[50] = run.loss[51] = 10.0
    tl = _logs.analyze(_logs.read_history(tr.write(tmp_path / "g.jsonl", tr.guard_jsonl(run))))
    assert (tl.status, tl.warning_step, tl.danger_step, tl.blips) == ("diverging", 50, 51, ())


def test_spike_ratio_is_configurable(tmp_path):
    run = tr.make_run(n=100, every=1)
    for i in range(60, 80):
        run.loss[i] *= 1.4
    hist = _logs.read_history(tr.write(tmp_path / "g.jsonl", tr.guard_jsonl(run)))
    assert _logs.analyze(hist).status == "healthy"
    assert _logs.analyze(hist, loss=SpikeConfig(ratio=1.3)).warning_step == 60


def test_suggested_lr_is_half_the_lr_before_a_raise(tmp_path):
    run = tr.make_run(n=100, every=1, spike_at=70, lr=1e-4)
    run.lr[60:] = [1e-2] * 40  # raised 100x at step 60; the loss reacts at 70
    hist = _logs.read_history(tr.write(tmp_path / "g.jsonl", tr.guard_jsonl(run)))
    tl = _logs.analyze(hist)
    assert (tl.restart_step, tl.lr_raised_step) == (69, 60)
    assert tl.restart_lr == pytest.approx(1e-4) and tl.suggested_lr == pytest.approx(5e-5)
    assert "the LR before it was raised at step 60" in _logs.render_text(hist, tl)


def _guard_log(run: tr.Run, events: list[dict[str, object]]) -> str:
    return tr.guard_jsonl(run, events=events)


def test_guard_data_skips_are_not_nan(tmp_path):
    run = tr.make_run(n=60, every=1)
    for s in (20, 21):
        run.loss[s] = run.grad_norm[s] = math.nan
    log = _guard_log(run, [{"step": 20, "kind": "data_skip"}, {"step": 21, "kind": "data_skip"}])
    tl = _logs.analyze(_logs.read_history(tr.write(tmp_path / "g.jsonl", log)))
    assert (tl.status, tl.nan_step, tl.guard_events) == ("healthy", None, {"data_skip": 2})


def test_guard_rollback_is_not_healthy(tmp_path):
    run = tr.make_run(n=60, every=1)
    events = [
        {"step": 30, "kind": "checkpoint", "at_step": 30},
        {"step": 45, "kind": "rollback", "to_step": 30},
    ]
    tl = _logs.analyze(_logs.read_history(tr.write(tmp_path / "g.jsonl", _guard_log(run, events))))
    assert (tl.status, tl.danger_step, tl.restart_step, tl.restart_from) == (
        "diverging",
        45,
        30,
        "checkpoint",
    )


def test_guard_resume_replaces_the_replayed_steps(tmp_path):
    run = tr.make_run(n=60, every=1)
    crashed = run.loss[:]
    crashed[40:] = [math.nan] * 20
    first = tr.Run(run.steps[:45], crashed[:45], run.grad_norm[:45], run.lr[:45])
    resume = json.dumps({"step": 40, "rank": 0, "kind": "resume"}) + "\n"
    second = tr.Run(run.steps[40:], run.loss[40:], run.grad_norm[40:], run.lr[40:])
    path = tr.write(tmp_path / "g.jsonl", tr.guard_jsonl(first) + resume + tr.guard_jsonl(second))
    tl = _logs.analyze(_logs.read_history(path))
    assert (tl.status, tl.steps) == ("healthy", 60)


def test_fp16_scaler_overflow_rows_are_not_nan(tmp_path):
    run = tr.make_run(n=60, every=1)
    for s in (0, 1, 2, 3, 30):
        run.grad_norm[s] = math.inf
    events = [
        {"step": s, "kind": "scaler_overflow", "action": "scaler_skip"} for s in (0, 1, 2, 3, 30)
    ]
    tl = _logs.analyze(_logs.read_history(tr.write(tmp_path / "g.jsonl", _guard_log(run, events))))
    assert (tl.status, tl.nan_step, tl.guard_events) == ("healthy", None, {"scaler_overflow": 5})


def test_torn_last_line_of_a_guard_log_is_ignored(tmp_path):
    text = tr.guard_jsonl(tr.make_run(n=60, every=1))
    path = tr.write(tmp_path / "g.jsonl", text + '{"time": 1.5, "step": 60, "rank": 0, "kind": "st')
    assert len(_logs.read_history(path).steps) == 60
    path.write_text(path.read_text() + '\n{"step": 61, "loss": 2.0}\n')
    with pytest.raises(InputError, match="line 61: not JSON"):
        _logs.read_history(path)


def test_text_log_that_starts_with_a_printed_dict(tmp_path):
    run = tr.make_run(nan_at=400)
    body = [f"step {s} loss {tr._f(v)}" for s, v in zip(run.steps, run.loss, strict=True)]
    for head in ("{'lr': 0.0001, 'batch_size': 512, 'fp16': True}", '{"lr": 0.0001}'):
        tl = _text(tmp_path, [head, *body])
        assert tl.nan_step == 400 and tl.suggested_lr is None


def test_unreadable_inputs(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        _logs.read_history(tmp_path / "missing.log")
    (tmp_path / "noise.log").write_text("hello world\nnothing to see here 42\n")
    with pytest.raises(InputError, match="no training loss found"):
        _logs.read_history(tmp_path / "noise.log")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no TensorBoard event files"):
        _logs.read_history(tmp_path / "empty")
