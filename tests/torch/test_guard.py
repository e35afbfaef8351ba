"""TrainingGuard on one process: fault injection on small real models (CPU)."""

from __future__ import annotations

import copy
import json
import math

import pytest

torch = pytest.importorskip("torch")

from datacheck.errors import InputError, UsageError  # noqa: E402
from datacheck.torch import (  # noqa: E402
    Action,
    GuardConfig,
    TrainingGuard,
    bad_steps,
    read_quarantine,
)
from datacheck.torch._guard_types import DIVERGENCE_EVENTS  # noqa: E402

F = torch.nn.functional


def _regression(seed: int = 0, n: int = 512):
    torch.manual_seed(seed)
    x = torch.randn(n, 16)
    y = x @ torch.randn(16, 1) + 0.1 * torch.randn(n, 1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    return x, y, model


def _batches(x, y, steps: int, seed: int = 1, size: int = 32):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, len(x), (size,), generator=gen)
        yield idx, x[idx].clone(), y[idx]


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def _adam_state(opt) -> list[torch.Tensor]:
    out = []
    for state in opt.state.values():
        out += [
            state["exp_avg"].clone(),
            state["exp_avg_sq"].clone(),
            torch.as_tensor(state["step"]).clone(),
        ]
    return out


def test_nan_batch_is_skipped_and_adam_state_is_untouched(tmp_path):
    x, y, model = _regression()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    guard = TrainingGuard(model, opt, clip_norm=1.0, log=str(tmp_path / "guard.jsonl"))
    k = 7
    for step, (idx, xb, yb) in enumerate(_batches(x, y, 15)):
        if step == k:
            xb[3, 5] = float("nan")
            before_w, before_state = _flat(model), _adam_state(opt)
        loss = F.mse_loss(model(xb), yb)
        loss.backward()
        result = guard.step(loss, indices=idx.tolist())
        opt.zero_grad(set_to_none=True)
        if step == k:
            assert result.action is Action.SKIP
            assert result.events == ("nonfinite",)
            assert result.ranks == (0,)
            assert torch.equal(_flat(model), before_w)
            for a, b in zip(_adam_state(opt), before_state, strict=True):
                assert torch.equal(a, b)
        else:
            assert result.action.stepped
    assert torch.isfinite(_flat(model)).all()
    assert all(torch.isfinite(t).all() for t in _adam_state(opt))
    assert all(int(s["step"]) == 14 for s in opt.state.values())  # 15 batches, one skipped
    events = [json.loads(line) for line in (tmp_path / "guard.jsonl").read_text().splitlines()]
    nan_event = next(e for e in events if e["kind"] == "nonfinite")
    assert nan_event["step"] == k and nan_event["ranks"] == [0] and nan_event["action"] == "skip"
    assert len(nan_event["indices"]) == 32
    assert bad_steps(tmp_path / "guard.jsonl") == {k}


def _nan_at(guard, model, opt, x, y, steps: range, bad: int) -> None:
    for step in steps:
        loss = F.mse_loss(model(x[:8]), y[:8]) * (float("nan") if step == bad else 1.0)
        loss.backward()
        guard.step(loss)
        opt.zero_grad(set_to_none=True)


def test_torn_last_line_after_a_crash_is_ignored_then_ended_on_resume(tmp_path):
    from datacheck import _logs

    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    log = tmp_path / "guard.jsonl"
    guard = TrainingGuard(model, opt, log=str(log), log_every=1)
    _nan_at(guard, model, opt, x, y, range(6), bad=3)
    guard.close()
    torn = log.read_text().splitlines()[-1][:25]  # the crash cut a record mid-write
    log.write_text(log.read_text() + torn)
    assert bad_steps(log) == {3}
    assert len(_logs.read_history(log).steps) == 6
    guard = TrainingGuard(model, opt, log=str(log), log_every=1)  # the restarted job appends
    _nan_at(guard, model, opt, x, y, range(3), bad=1)
    guard.close()
    assert all(json.loads(line) for line in log.read_text().splitlines())  # nothing glued on
    assert bad_steps(log) == {3, 1}
    log.write_text(log.read_text() + '{"step": 9, "ki\n{"step": 10, "kind": "step"}\n')
    with pytest.raises(InputError, match="not JSON"):  # torn in the middle: damage, not a crash
        bad_steps(log)


def test_resume_ends_an_unterminated_line_that_is_no_torn_record(tmp_path):
    log = tmp_path / "guard.jsonl"
    log.write_text('{"step": 0, "kind": "step", "loss": 1.0}')  # whole, only the newline missing
    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    guard = TrainingGuard(model, opt, log=str(log), log_every=1)
    _nan_at(guard, model, opt, x, y, range(1), bad=-1)
    guard.close()
    lines = log.read_text().splitlines()
    assert lines[0] == '{"step": 0, "kind": "step", "loss": 1.0}' and len(lines) == 2
    assert json.loads(lines[1])["kind"] == "step"


def test_unguarded_step_on_that_batch_poisons_adam():
    """The fault the previous test injects really is fatal without the guard."""
    x, y, model = _regression()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    xb = x[:32].clone()
    xb[3, 5] = float("nan")
    F.mse_loss(model(xb), y[:32]).backward()
    opt.step()
    assert not torch.isfinite(_flat(model)).all()


def test_single_inf_gradient_is_caught_before_clipping_zeroes_the_rest():
    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    guard = TrainingGuard(model, opt, clip_norm=1.0)
    F.mse_loss(model(x[:32]), y[:32]).backward()
    next(model.parameters()).grad[0, 0] = float("inf")
    before = _flat(model)
    result = guard.step(torch.tensor(1.0))
    assert result.action is Action.SKIP and math.isinf(result.grad_norm)
    assert torch.equal(_flat(model), before)


@pytest.mark.parametrize("clip_norm", [None, 0.5])
def test_one_norm_reused_for_clipping(clip_norm):
    x, y, model = _regression()
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    guard = TrainingGuard(model, opt, clip_norm=clip_norm)
    for m in (model, ref):
        F.mse_loss(m(x[:64]), y[:64]).backward()
    norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), clip_norm or math.inf)
    ref_opt.step()
    result = guard.step(F.mse_loss(model(x[:64]), y[:64]))
    assert result.grad_norm == pytest.approx(norm.item(), rel=1e-6)
    assert result.action is (Action.CLIP if clip_norm and norm > clip_norm else Action.STEP)
    assert torch.allclose(_flat(model), _flat(ref), atol=1e-7)


def _train_with_lr_jump(guard_on: bool, steps: int = 400, jump_at: int = 200):
    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    guard = TrainingGuard(model, opt, clip_norm=1.0, checkpoint_every=20) if guard_on else None
    losses, results = [], []
    for step, (_, xb, yb) in enumerate(_batches(x, y, steps)):
        if step == jump_at:
            for group in opt.param_groups:
                group["lr"] *= 100
        loss = F.mse_loss(model(xb), yb)
        loss.backward()
        if guard is not None:
            results.append(guard.step(loss))
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    with torch.no_grad():
        final = F.mse_loss(model(x), y).item()
    pre_spike = sum(losses[jump_at - 20 : jump_at]) / 20
    return pre_spike, final, results, opt


def test_lr_x100_spike_rolls_back_and_lowers_lr():
    pre_spike, final, results, opt = _train_with_lr_jump(guard_on=True)
    kinds = [k for r in results for k in r.events]
    assert "loss_spike" in kinds and "rollback" in kinds and "lr_reduced" in kinds
    first_spike = next(r.step for r in results if "loss_spike" in r.events)
    assert 200 <= first_spike <= 205
    assert opt.param_groups[0]["lr"] == pytest.approx(5.0)  # the schedule's LR is the user's
    assert results[-1].lr < 5.0 * 0.25  # the guard's cut stays on it
    assert math.isfinite(final) and final < 5 * pre_spike
    _, clip_final, _, _ = _train_with_lr_jump(guard_on=False)
    assert clip_final > 50 * final  # clipping alone does not recover


def test_grad_norm_spike_is_a_warning_and_the_step_is_clipped(tmp_path):
    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    guard = TrainingGuard(model, opt, clip_norm=5.0, log=str(tmp_path / "g.jsonl"))
    for step, (_, xb, yb) in enumerate(_batches(x, y, 42)):
        loss = F.mse_loss(model(xb), yb)
        loss.backward()
        if step in (5, 40):  # step 5 is inside the detector's warm-up: not judged
            for p in model.parameters():
                p.grad.mul_(1000.0)
        result = guard.step(loss)
        opt.zero_grad(set_to_none=True)
    spike = [json.loads(s) for s in (tmp_path / "g.jsonl").read_text().splitlines()]
    spike = [e for e in spike if e["kind"] == "grad_spike"]
    assert [e["step"] for e in spike] == [40] and spike[0]["severity"] == "warning"
    assert spike[0]["clipped"] is True and spike[0]["grad_norm"] >= 10 * spike[0]["level"]
    assert result.action.stepped


def _fp16_run(guard: TrainingGuard, model, x, y, steps: int, inf_grads: bool = False):
    results = []
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(model(x).float(), y)
        guard.scaler.scale(loss).backward()
        if inf_grads:
            next(model.parameters()).grad[0, 0] = float("inf")
        results.append(guard.step(loss))
        guard.optimizer.zero_grad(set_to_none=True)
    return results


def test_fp16_scaler_overflow_is_not_divergence(tmp_path):
    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20)  # overflows fp16 for a few steps
    guard = TrainingGuard(model, opt, scaler, log=str(tmp_path / "g.jsonl"), log_every=1)
    results = _fp16_run(guard, model, x[:32], y[:32], 12)
    actions = [r.action for r in results]
    assert Action.SCALER_SKIP in actions and actions[-1].stepped
    assert all(not set(r.events) & DIVERGENCE_EVENTS for r in results)
    logged = [json.loads(s) for s in (tmp_path / "g.jsonl").read_text().splitlines()]
    overflow = [e for e in logged if e["kind"] == "scaler_overflow"]
    assert overflow and all(e["severity"] == "info" for e in overflow)
    assert overflow[-1]["scale"] < 2.0**20
    assert torch.isfinite(_flat(model)).all()
    from datacheck import _logs

    timeline = _logs.analyze(_logs.read_history(tmp_path / "g.jsonl"))  # overflow is no NaN
    assert timeline.status == "healthy" and timeline.guard_events["scaler_overflow"] >= 1


def test_fp16_a_batch_skipped_for_its_loss_keeps_the_loss_scale():
    """A NaN/Inf loss comes from the forward pass, not from the scale: halving the scale at each
    bad batch (30 in a run) would leave it so low that the good batches' gradients underflow."""
    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    guard = TrainingGuard(model, opt, scaler, rollback_after=99)
    actions = []
    for step in range(8):
        xb = x[:32].clone()
        if step % 2:
            xb[3, 0] = float("nan")  # a bad sample: NaN loss and NaN gradients
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(model(xb).float(), y[:32])
        scaler.scale(loss).backward()
        actions.append(guard.step(loss).action)
        opt.zero_grad(set_to_none=True)
    assert [a.stepped for a in actions] == [True, False] * 4
    assert scaler.get_scale() == 1024.0


def test_disabled_scaler_does_not_excuse_nan_gradients():
    """``GradScaler(enabled=use_fp16)`` with fp16 off: a NaN gradient is divergence, not overflow."""
    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    guard = TrainingGuard(model, opt, scaler, rollback_after=2, checkpoint_every=0)
    results = []
    for step in range(4):
        loss = F.mse_loss(model(x[:32]), y[:32])
        scaler.scale(loss).backward()
        if step in (1, 2):
            next(model.parameters()).grad[0, 0] = float("nan")
        results.append(guard.step(loss))
        opt.zero_grad(set_to_none=True)
    actions = [r.action for r in results]
    assert Action.SCALER_SKIP not in actions
    assert results[1].action is Action.SKIP and results[1].events == ("nonfinite",)
    # two in a row: the guard checks the weights; they are finite, so it skips as skip-and-clip
    assert results[2].events == ("nonfinite",) and guard.lr == pytest.approx(0.01)
    assert actions[3].stepped


def test_repeated_overflow_collapse_cuts_the_lr_then_falls_back_never_stops(tmp_path):
    """A loss scale that keeps collapsing, no snapshot: the LR is cut at each repeat; once the
    cuts kept not helping the guard falls back to skip-and-clip (LR cut undone), says so with a
    warning and a line ``datacheck logs`` shows, and the run goes on: the weights are finite."""
    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    log = tmp_path / "g.jsonl"
    guard = TrainingGuard(
        model, opt, scaler, max_scaler_skips=4, max_rollbacks=2, checkpoint_every=0, log=str(log)
    )
    with pytest.warns(RuntimeWarning, match="falls? back to skip-and-clip|skip-and-clip"):
        results = _fp16_run(guard, model, x[:32], y[:32], 40, inf_grads=True)
    kinds = [k for r in results for k in r.events]
    assert kinds.count("lr_reduced") == 2 and kinds.count("fallback") == 1
    assert "stop" not in kinds and guard.step_count == 40
    assert guard.lr == pytest.approx(0.01)  # the cuts did not help: undone
    guard.close()
    from datacheck import _logs

    text = _logs.render_text(_logs.read_history(log), _logs.analyze(_logs.read_history(log)))
    assert "fell back to skip-and-clip at step 15" in text


def test_stop_only_when_the_weights_are_non_finite_and_nothing_recovers_them():
    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    guard = TrainingGuard(model, opt, rollback_after=2, checkpoint_every=0, raise_on_stop=False)
    actions = []
    for step in range(8):
        if step == 3:
            with torch.no_grad():
                next(model.parameters()).fill_(float("nan"))  # e.g. an optimizer blow-up
        loss = F.mse_loss(model(x[:8]), y[:8])
        loss.backward()
        actions.append(guard.step(loss).action)
        opt.zero_grad()
    assert all(a.stepped for a in actions[:3]) and actions[3] is Action.SKIP
    assert actions[4:] == [Action.STOP] * 4  # stopped stays stopped
    assert "no snapshot is kept" in guard._stop_message


def test_non_finite_weights_are_rolled_back_at_once():
    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    guard = TrainingGuard(model, opt, rollback_after=2, checkpoint_every=5)
    results = []
    for step in range(20):
        if step == 12:
            with torch.no_grad():
                next(model.parameters()).fill_(float("nan"))
        loss = F.mse_loss(model(x[:8]), y[:8])
        loss.backward()
        results.append(guard.step(loss))
        opt.zero_grad()
    assert results[13].action is Action.ROLLBACK and "rollback" in results[13].events
    assert torch.isfinite(_flat(model)).all() and all(r.action.stepped for r in results[14:])


def test_rollback_from_disk_restores_the_snapshot(tmp_path):
    """Divergence from step 24 (the loss x1000 on the live weights until they are replaced):
    two sharp spikes, then the live weights' losses on 3 fresh batches are still high, so the
    guard probes the step-20 snapshot (read from disk) on the next batches; it does clearly
    better, so the rollback stands."""
    x, y, model = _regression()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ckpt = tmp_path / "ckpt"
    guard = TrainingGuard(
        model,
        opt,
        checkpoint_every=5,
        rollback_after=2,
        checkpoint_dir=str(ckpt),
        skip_after_rollback=3,
    )
    replaced = False
    for step, (_, xb, yb) in enumerate(_batches(x, y, 36)):
        diverged = step >= 24 and not replaced
        loss = F.mse_loss(model(xb), yb) * (1000.0 if diverged else 1.0)
        loss.backward()
        result = guard.step(loss)
        opt.zero_grad(set_to_none=True)
        replaced = replaced or "probe" in result.events
        if step in (25, 26, 27):  # the fresh batches on the live weights: stepped
            assert result.action.stepped and "probe" not in result.events
        if step == 28:
            assert result.action is Action.ROLLBACK and "probe" in result.events
            saved = torch.load(ckpt / "guard-step20.pt", weights_only=True)
            for name, value in model.state_dict().items():
                assert torch.equal(value, saved["model"][name])
            assert opt.state_dict()["state"][0]["step"] == 20
        if step in (29, 30):
            assert result.action is Action.SKIP and not result.events  # the probe's batches
        if step == 31:
            assert result.action is Action.ROLLBACK and result.events == ("rollback",)
            assert guard.lr == pytest.approx(1e-2)  # a first rollback: no LR cut
        if step in (32, 33, 34):
            assert result.action is Action.SKIP and result.events == ("data_skip",)
    assert sorted(p.name for p in ckpt.iterdir()) == ["guard-step15.pt", "guard-step20.pt"]


def _diverging_run(starts, steps, **options):
    """A regression that diverges at each of ``starts`` (the loss x1000 on the live weights,
    as when the LR made them blow up) until the guard replaces the weights with a snapshot."""
    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    guard = TrainingGuard(model, opt, scheduler=sched, **options)
    results, diverged = [], False
    for step, (_, xb, yb) in enumerate(_batches(x, y, steps)):
        diverged = diverged or step in starts
        loss = F.mse_loss(model(xb), yb) * (1000.0 if diverged else 1.0)
        loss.backward()
        results.append(guard.step(loss))
        diverged = diverged and "probe" not in results[-1].events
        sched.step()
        opt.zero_grad()
    return guard, results


def test_lr_is_cut_only_on_repeated_confirmed_divergence_and_restored_after_stable_steps():
    # divergence at 20: sharp at 21 (rollback_after=2), still high on 3 fresh batches: probe at
    # 24, rollback at 27; again at 32 (the series has spiked 5 times since: 4 in a row make no
    # chance, then 3 fresh): probe at 38, rollback and an LR cut at 41, restored 5 steps later
    guard, results = _diverging_run(
        {20, 32}, 52, rollback_after=2, lr_restore_after=5, checkpoint_every=5
    )
    kinds = [r.events for r in results]
    assert [i for i, k in enumerate(kinds) if "probe" in k] == [24, 38]
    assert "rollback" in kinds[27] and "lr_reduced" not in kinds[27]  # the first: no cut
    assert "rollback" in kinds[41] and "lr_reduced" in kinds[41]  # again soon after: a cut
    lrs = [r.lr for r in results]
    assert lrs[42] == pytest.approx(0.0125) and lrs[-1] == pytest.approx(0.05)
    assert [r.step for r in results if "lr_restored" in r.events] == [46]


def test_samples_behind_a_nan_are_named(tmp_path):
    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    guard = TrainingGuard(model, opt, log=str(tmp_path / "g.jsonl"), quarantine=str(tmp_path / "q"))
    xb = x[:8].clone()
    xb[5, 0] = float("nan")
    per_sample = F.mse_loss(model(xb), y[:8], reduction="none").mean(dim=1)
    loss = per_sample.mean()
    loss.backward()
    guard.step(loss, indices=list(range(100, 108)), sample_losses=per_sample)
    event = json.loads((tmp_path / "g.jsonl").read_text().splitlines()[0])
    assert event["kind"] == "nonfinite"
    assert [(s["index"], s["check"]) for s in event["samples"]] == [(105, "nonfinite_loss")]
    guard.close()
    quarantined = read_quarantine(tmp_path / "q")
    assert quarantined[["index", "check", "key", "value", "step"]].values.tolist() == [
        [105, "nonfinite_loss", "loss", "nan", 0]
    ]


def test_log_lines_are_flushed_as_written(tmp_path):
    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    path = tmp_path / "g.jsonl"
    guard = TrainingGuard(model, opt, log=str(path), log_every=2)
    for _, xb, yb in _batches(x, y, 5):
        loss = F.mse_loss(model(xb), yb)
        loss.backward()
        guard.step(loss)
        opt.zero_grad()
    lines = [json.loads(s) for s in path.read_text().splitlines()]  # guard still open
    assert [(r["step"], r["kind"]) for r in lines] == [(0, "step"), (2, "step"), (4, "step")]
    assert all(math.isfinite(r["loss"]) and r["lr"] == 0.1 for r in lines)
    guard.close()


@pytest.mark.parametrize(
    "options, match",
    [
        ({"rollback_window": 0}, "rollback_window"),
        ({"clip_norm": 0.0}, "clip_norm"),
        ({"lr_factor": 2.0}, "lr_factor"),
        ({"lr_restore_after": 0}, "lr_restore_after"),
        ({"quiet_steps": -1}, "quiet_steps"),
        ({"async_checkpoint": True}, "needs checkpoint_dir"),
    ],
)
def test_config_is_validated(options, match):
    with pytest.raises(UsageError, match=match):
        GuardConfig(**options)


def test_config_and_options_are_exclusive():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(UsageError, match="not both"):
        TrainingGuard(model, opt, config=GuardConfig(), clip_norm=2.0)
    with pytest.raises(UsageError, match="DistributedDataParallel"):
        TrainingGuard(model, opt, drop_bad_ranks=True)
    guard = TrainingGuard(model, opt)
    with pytest.raises(UsageError, match=r"scalar loss \(got shape \(4, 1\)\)"):
        guard.step(model(torch.randn(4, 2)))


def test_guard_log_reads_back_with_datacheck_logs(tmp_path):
    from datacheck import _logs

    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    log = tmp_path / "guard.jsonl"
    guard = TrainingGuard(model, opt, clip_norm=1.0, checkpoint_every=20, log=str(log), log_every=1)
    for step, (_, xb, yb) in enumerate(_batches(x, y, 260)):
        if step == 200:
            opt.param_groups[0]["lr"] *= 100
        loss = F.mse_loss(model(xb), yb)
        loss.backward()
        guard.step(loss)
        opt.zero_grad(set_to_none=True)
    guard.close()
    hist = _logs.read_history(log)
    tl = _logs.analyze(hist)
    assert tl.status == "diverging" and 200 <= tl.warning_step <= 205 and tl.nan_step is None
    # the guard's last confirmed checkpoint: the one at 200 was discarded, the steps after it spiked
    assert tl.restart_step == 180
    assert tl.suggested_lr == pytest.approx(0.025)
    assert tl.guard_events["rollback"] >= 1 and tl.guard_events["loss_spike"] >= 1


def test_tensorboard_scalars_and_events(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    guard = TrainingGuard(model, opt, tensorboard=str(tmp_path / "tb"), log_every=1)
    for step, (_, xb, yb) in enumerate(_batches(x, y, 12)):
        if step == 5:
            xb[0, 0] = float("nan")
        loss = F.mse_loss(model(xb), yb)
        loss.backward()
        guard.step(loss)
        opt.zero_grad()
    guard.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("guard/event/nonfinite")] == [5]
    assert [e.step for e in acc.Scalars("guard/loss")] == [s for s in range(12) if s != 5]
    assert (
        "nonfinite"
        in acc.Tensors("guard/events/text_summary")[0].tensor_proto.string_val[0].decode()
    )


def test_rollback_restores_the_scaler_but_the_schedule_goes_on(tmp_path):
    x, y, model = _regression()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    guard = TrainingGuard(
        model,
        opt,
        scaler,
        scheduler=sched,
        checkpoint_every=3,
        rollback_after=2,
        checkpoint_dir=str(tmp_path),
    )
    replaced = False
    for step, (_, xb, yb) in enumerate(_batches(x, y, 20)):
        diverged = step >= 12 and not replaced  # until the snapshot replaces the live weights
        loss = F.mse_loss(model(xb), yb) * (1000.0 if diverged else 1.0)
        scaler.scale(loss).backward()
        result = guard.step(loss)
        sched.step()
        opt.zero_grad()
        replaced = replaced or "probe" in result.events
        if step == 16:  # sharp at 13, still high on 3 fresh batches (14-16)
            assert result.action is Action.ROLLBACK and "probe" in result.events
    assert result.action is Action.ROLLBACK and result.events == ("rollback",)
    # the candidate of step 12 was never confirmed (steps 12 and 13 were bad): back to step 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["guard-step6.pt", "guard-step9.pt"]
    saved = torch.load(tmp_path / "guard-step9.pt", weights_only=True)
    assert sched.last_epoch == 20  # the data and the schedule go on: not rewound
    assert saved["optimizer"]["param_groups"][0]["lr"] == pytest.approx(1e-3 * 0.9)
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3 * 0.9**4)
    assert scaler.get_scale() == saved["scaler"]["scale"]


def _adam_run(sync_every: int, nan_steps: tuple[int, ...], steps: int = 16, log=None):
    x, y, model = _regression()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    guard = TrainingGuard(model, opt, sync_every=sync_every, log=log, log_every=0)
    results, snaps = [], {}
    for step, (_, xb, yb) in enumerate(_batches(x, y, steps)):
        if step in nan_steps:
            xb[0, 0] = float("nan")
            snaps[step] = (_flat(model), _adam_state(opt))
        loss = F.mse_loss(model(xb), yb)
        loss.backward()
        results.append(guard.step(loss))
        opt.zero_grad(set_to_none=True)
        if step in nan_steps:
            after = (_flat(model), _adam_state(opt))
            assert torch.equal(after[0], snaps[step][0])
            if snaps[step][1]:
                assert all(torch.equal(a, b) for a, b in zip(after[1], snaps[step][1], strict=True))
            else:  # no state before the first step: whatever it created is back at its zeros
                assert all(not t.any() for t in after[1])
    return model, opt, results


def test_sync_free_mode_skips_on_the_device_and_matches_the_host_mode(tmp_path):
    log = tmp_path / "g.jsonl"
    model, opt, results = _adam_run(4, nan_steps=(0, 6), log=str(log))  # 0: before Adam has state
    assert [r.action for r in results[:3]] == [Action.DEFERRED] * 3
    assert all(math.isnan(r.loss) for r in results[:3])  # nothing read back yet
    read_backs = [r for r in results if r.step % 4 == 3]
    assert [r.events for r in read_backs] == [("nonfinite",), ("nonfinite",), (), ()]
    assert all(math.isfinite(r.loss) for r in read_backs)
    events = [json.loads(s) for s in log.read_text().splitlines()]
    assert [(e["step"], e["kind"], e["action"]) for e in events] == [
        (0, "nonfinite", "skip"),
        (6, "nonfinite", "skip"),
    ]
    ref_model, ref_opt, ref_results = _adam_run(0, nan_steps=(0, 6))
    assert [r.action for r in ref_results].count(Action.SKIP) == 2
    assert torch.equal(_flat(model), _flat(ref_model))  # the masked update is the same update
    assert all(
        torch.equal(a, b) for a, b in zip(_adam_state(opt), _adam_state(ref_opt), strict=True)
    )


def test_sync_free_mode_rolls_back_after_the_lr_jump():
    x, y, model = _regression()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    guard = TrainingGuard(model, opt, clip_norm=1.0, checkpoint_every=20, sync_every=5)
    kinds = []
    for step, (_, xb, yb) in enumerate(_batches(x, y, 400)):
        if step == 200:
            opt.param_groups[0]["lr"] *= 100
        loss = F.mse_loss(model(xb), yb)
        loss.backward()
        kinds += guard.step(loss).events
        opt.zero_grad(set_to_none=True)
    assert "loss_spike" in kinds and "rollback" in kinds and "lr_reduced" in kinds
    with torch.no_grad():  # clipping alone ends near 30 (test_lr_x100_spike_rolls_back_...)
        assert F.mse_loss(model(x), y).item() < 0.5


def test_sync_free_mode_refuses_a_grad_scaler():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(UsageError, match="sync_every needs scaler=None"):
        TrainingGuard(model, opt, torch.amp.GradScaler("cpu"), sync_every=4)


@pytest.mark.parametrize(
    ("losses", "outliers", "threshold", "named"),
    [
        ([0.05] * 15 + [float("nan")], False, None, [(15, "nonfinite_loss")]),
        ([0.05] * 14 + [3.0, 1e27], True, None, [(15, "loss_outlier")]),  # not the hard one
        ([0.05] * 14 + [3.0, 1e27], False, None, []),  # outliers not asked for
        ([2.0] * 16, True, 0.1, []),  # the batch spikes as a whole
        ([0.05] * 15 + [32.0], True, 0.1, [(15, "loss_outlier")]),
        ([0.05] * 14 + [8.6, 32.0], True, 0.1, [(15, "loss_outlier"), (14, "loss_outlier")]),
        ([0.05] * 15 + [32.0], True, 10.0, []),  # this batch is under the threshold
    ],
)
def test_samples_are_named_only_on_per_sample_evidence(losses, outliers, threshold, named):
    from datacheck.torch._guard_log import name_samples

    got = name_samples(
        list(range(16)), torch.tensor(losses), outliers=outliers, threshold=threshold
    )
    assert [(s["index"], s["check"]) for s in got] == named
