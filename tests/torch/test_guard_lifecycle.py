"""TrainingGuard over a run's life: every LR scheduler, gradient accumulation, resume, names."""

from __future__ import annotations

import json
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from datacheck.errors import UsageError  # noqa: E402
from datacheck.torch import Action, TrainingGuard, bad_steps, read_quarantine  # noqa: E402

F = torch.nn.functional
S = torch.optim.lr_scheduler


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    x = torch.randn(256, 8)
    return model, x, x.sum(1, keepdim=True)


SCHEDULERS = {
    "LambdaLR": lambda o: S.LambdaLR(o, lambda s: 1.0 / (1 + s)),
    "MultiplicativeLR": lambda o: S.MultiplicativeLR(o, lambda s: 0.95),
    "StepLR": lambda o: S.StepLR(o, 3, 0.5),
    "MultiStepLR": lambda o: S.MultiStepLR(o, [2, 5], 0.5),
    "ConstantLR": lambda o: S.ConstantLR(o, 0.5, total_iters=4),
    "LinearLR": lambda o: S.LinearLR(o, 0.2, 1.0, total_iters=6),
    "ExponentialLR": lambda o: S.ExponentialLR(o, 0.9),
    "PolynomialLR": lambda o: S.PolynomialLR(o, total_iters=10, power=2.0),
    "CosineAnnealingLR": lambda o: S.CosineAnnealingLR(o, T_max=5),
    "CosineAnnealingWarmRestarts": lambda o: S.CosineAnnealingWarmRestarts(o, T_0=4),
    "CyclicLR": lambda o: S.CyclicLR(o, 0.01, 0.1, step_size_up=3),
    "OneCycleLR": lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=20),
    "SequentialLR": lambda o: S.SequentialLR(
        o, [S.LinearLR(o, 0.5, total_iters=3), S.ExponentialLR(o, 0.9)], milestones=[3]
    ),
    "ChainedScheduler": lambda o: S.ChainedScheduler(
        [S.ExponentialLR(o, 0.9), S.StepLR(o, 4, 0.5)]
    ),
    "ReduceLROnPlateau": lambda o: S.ReduceLROnPlateau(o, patience=0, factor=0.5),
}


def _scheduled_lrs(name: str, cut_at: int | None, steps: int = 16) -> tuple[list[float], Any]:
    model, x, y = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = SCHEDULERS[name](opt)
    guard = TrainingGuard(model, opt, scheduler=sched, checkpoint_every=0, lr_restore_after=None)
    lrs = []
    for step in range(steps):
        if step == cut_at:
            guard._policy.lr_scale = 0.25  # the state a divergence leaves (tested elsewhere)
        loss = F.mse_loss(model(x[:32]), y[:32])
        loss.backward()
        lrs.append(guard.step(loss).lr)
        if name == "ReduceLROnPlateau":
            sched.step(float(step % 3))  # a plateau every few steps
        else:
            sched.step()
        opt.zero_grad()
    return lrs, guard


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_the_lr_cut_survives_every_scheduler(name):
    reference, _ = _scheduled_lrs(name, cut_at=None)
    cut, _ = _scheduled_lrs(name, cut_at=0)
    # the optimizer stepped with 0.25x what the schedule says, at every step; the schedule itself
    # (including absolute ones: OneCycleLR, CyclicLR) never saw the cut
    assert cut == pytest.approx([0.25 * lr for lr in reference], rel=1e-6)


def test_every_scheduler_class_in_torch_is_covered():
    classes = {
        n
        for n in dir(S)
        if isinstance(getattr(S, n), type)
        and issubclass(getattr(S, n), (S.LRScheduler, S.ReduceLROnPlateau))
        and n not in ("LRScheduler", "_LRScheduler", "SWALR")
    }
    assert classes <= set(SCHEDULERS)  # SWALR is torch.optim.swa_utils' and needs an SWA model


def test_gradient_accumulation_checks_every_micro_batch(tmp_path):
    model, x, y = _setup()
    ref, _, _ = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    guard = TrainingGuard(model, opt, log=str(tmp_path / "g.jsonl"), quarantine=str(tmp_path / "q"))
    results = []
    for step in range(6):
        for micro in range(4):
            rows = slice(32 * micro, 32 * micro + 8)
            xb = x[rows].clone()
            if step == 3 and micro == 2:
                xb[5, 0] = float("nan")  # one sample of one micro-batch
            per_sample = F.mse_loss(model(xb), y[rows], reduction="none").mean(1)
            idx = list(range(rows.start, rows.stop))
            guard.backward(per_sample.mean() / 4, indices=idx, sample_losses=per_sample)
            if step != 3:
                (F.mse_loss(ref(x[rows]), y[rows]) / 4).backward()
        results.append(guard.step())
        opt.zero_grad()
        if step != 3:
            torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
            ref_opt.step()
        ref_opt.zero_grad()
    assert [r.action.stepped for r in results] == [True, True, True, False, True, True]
    events = [json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    event = next(e for e in events if e["kind"] == "nonfinite")
    assert event["step"] == 3 and event["cause"] == "data"
    assert [s["index"] for s in event["samples"]] == [64 + 5]
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)  # the accumulated steps are the plain ones
    with pytest.raises(UsageError, match="without a loss"):
        loss = F.mse_loss(model(x[:8]), y[:8])
        guard.backward(loss)
        guard.step(loss)


def test_step_without_a_loss_or_backward_is_a_usage_error():
    model, _, _ = _setup()
    guard = TrainingGuard(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(UsageError, match="guard.backward"):
        guard.step()


def _run(guard, model, opt, x, y, steps, nan_at=()):
    out = []
    for _ in range(steps):
        step = guard.step_count
        loss = F.mse_loss(model(x[:32]), y[:32]) * (float("nan") if step in nan_at else 1.0)
        loss.backward()
        out.append(guard.step(loss))
        opt.zero_grad()
    return out


def test_resume_continues_steps_log_and_bad_steps_and_cleans_stale_snapshots(tmp_path):
    model, x, y = _setup()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    opts = {
        "log": str(tmp_path / "g.jsonl"),
        "checkpoint_dir": str(tmp_path / "ck"),
        "checkpoint_every": 5,
        "name": "main",
    }
    guard = TrainingGuard(model, opt, **opts)
    _run(guard, model, opt, x, y, 14, nan_at=(3,))
    saved = {"guard": guard.state_dict(), "model": model.state_dict(), "opt": opt.state_dict()}
    _run(guard, model, opt, x, y, 6, nan_at=(15,))  # then the job dies at step 20
    guard.close()
    assert bad_steps(tmp_path / "g.jsonl") == {3, 15}
    assert {p.name for p in (tmp_path / "ck").iterdir()} == {
        "guard-step11-main.pt",
        "guard-step17-main.pt",
    }

    model2, _, _ = _setup(seed=1)
    opt2 = torch.optim.Adam(model2.parameters(), lr=1e-2)
    model2.load_state_dict(saved["model"])
    opt2.load_state_dict(saved["opt"])
    guard2 = TrainingGuard(model2, opt2, **opts)
    guard2.load_state_dict(saved["guard"])
    assert guard2.step_count == 14 and guard2.skipped_steps == {3}
    # snapshots of steps the dead job reached after the checkpoint are gone
    assert {p.name for p in (tmp_path / "ck").iterdir()} == {"guard-step11-main.pt"}
    results = _run(guard2, model2, opt2, x, y, 6, nan_at=(16,))
    guard2.close()
    assert [r.step for r in results] == list(range(14, 20))
    assert bad_steps(tmp_path / "g.jsonl") == {3, 16} == guard2.skipped_steps
    assert bad_steps(tmp_path / "g.jsonl", name="other") == set()
    records = [json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    assert all(r["guard"] == "main" for r in records)
    resume = next(r for r in records if r["kind"] == "resume")
    assert resume["step"] == 14
    assert all(len(r["lrs"]) == 1 for r in records if r["kind"] == "step")
    with pytest.raises(UsageError, match="state version"):
        guard2.load_state_dict({"version": 99})


def test_a_snapshot_is_a_rollback_target_only_once_healthy_steps_followed_it(tmp_path):
    """The update right before a snapshot can be the one that spoiled the run, its damage
    showing a step later (momentum, a delayed blow-up): the snapshot of step 15 saw one healthy
    step, then bad ones, so the probe goes to the confirmed one of step 10, never to 15.  The
    loss stays x50 on the snapshot too (the data moved, not only the weights): the new level is
    learned and the run steps on, no divergence, no LR cut."""
    model, x, y = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    log = tmp_path / "g.jsonl"
    guard = TrainingGuard(model, opt, checkpoint_every=5, log=str(log))
    results = []
    for step in range(40):
        loss = F.mse_loss(model(x[:32]), y[:32]) * (50.0 if step >= 16 else 1.0)
        loss.backward()
        results.append(guard.step(loss))
        opt.zero_grad()
    guard.close()
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["at_step"] for e in events if e["kind"] == "checkpoint"][:2] == [5, 10]
    assert [e["at_step"] for e in events if e["kind"] == "checkpoint_discarded"] == [15]
    # sharp at 18, still x50 on the live weights' 3 fresh batches (19-21): the probe at 21
    assert all(r.action.stepped for r in results[:21])
    assert results[21].action is Action.ROLLBACK and "probe" in results[21].events
    assert next(e for e in events if e["kind"] == "probe")["to_step"] == 10
    assert "level_shift" in results[24].events and "rollback" not in kinds(events)
    assert not any(e.get("lr_scale") for e in events)
    assert all(r.action.stepped for r in results[25:])  # learned: stepped again


def kinds(events):
    return [e["kind"] for e in events]


def test_a_finite_outlier_is_never_quarantined_and_its_batch_is_stepped(tmp_path):
    """A finite high loss alone is no evidence of a bad sample (hard and mislabelled-looking
    clean samples are normal, more so on a converged model): skip-and-clip steps on it, so does
    the guard, and nothing is quarantined, whether the sample's error is 1 or 1e4."""
    model, x, y = _setup()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    folder = tmp_path / "q"
    guard = TrainingGuard(model, opt, quarantine=str(folder))
    events = {}
    for step in range(300):
        yb = y[:32].clone()
        if step in (260, 280):
            yb[7] += {260: 1.0, 280: 100.0}[step]  # hard (error 1), then broken (error 1e4)
        per_sample = F.mse_loss(model(x[:32]), yb, reduction="none").mean(1)
        per_sample.mean().backward()
        result = guard.step(
            per_sample.mean(), indices=list(range(32)), sample_losses=per_sample.detach()
        )
        events[step] = result
        opt.zero_grad()
    guard.close()
    assert "loss_spike" in events[280].events
    assert events[260].action.stepped and events[280].action.stepped
    assert not (folder.exists() and len(read_quarantine(folder)))
    assert guard._policy.start_level > 1.0  # the untrained model's mean squared error


def test_samples_that_overflow_the_gradient_are_named_even_in_consecutive_bad_steps(tmp_path):
    """An input of 1e30 gives a finite loss (about 1e29) but a gradient norm that overflows: a
    non-finite step, with one sample's loss far above the rest.  Three such batches in a row are
    bad data, named at once, not a divergence to roll back from."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    guard = TrainingGuard(model, opt, quarantine=str(tmp_path / "q"))
    results = []
    for step in range(20):
        xb = x.clone()
        if step in (10, 11, 12):
            xb[step - 5, 2] = 1e30
        per_sample = F.cross_entropy(model(xb), y, reduction="none")
        per_sample.mean().backward()
        indices = [100 * step + i for i in range(32)]
        results.append(guard.step(per_sample.mean(), indices=indices, sample_losses=per_sample))
        opt.zero_grad()
    guard.close()
    assert [r.step for r in results if not r.action.stepped] == [10, 11, 12]
    assert not any("rollback" in r.events for r in results)
    assert sorted(read_quarantine(tmp_path / "q")["index"]) == [1005, 1106, 1207]


def test_first_snapshot_is_taken_at_the_start_and_sparse_bad_batches_do_not_block_more():
    model, x, y = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    guard = TrainingGuard(model, opt, checkpoint_every=10)
    nan_at = tuple(range(0, 60, 7))  # a bad batch every 7 steps
    results = _run(guard, model, opt, x, y, 60, nan_at=nan_at)
    assert len(guard._snaps) == 2 and guard._snaps.files() == []  # in memory, two kept
    assert sum("checkpoint" in r.events for r in results) >= 4
    assert all(r.action is Action.SKIP for r in results if r.step in nan_at)
    assert not any("rollback" in r.events or "lr_reduced" in r.events for r in results)


def test_async_snapshots_on_disk(tmp_path):
    model, x, y = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    guard = TrainingGuard(
        model, opt, checkpoint_every=4, checkpoint_dir=str(tmp_path), async_checkpoint=True
    )
    _run(guard, model, opt, x, y, 13)
    guard.close()
    assert guard._snaps.files() == [
        (4, str(tmp_path / "guard-step4.pt")),
        (8, str(tmp_path / "guard-step8.pt")),
    ]
    # the two confirmed snapshots, and the candidate of step 12 (one healthy step after it)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "guard-step12.pt",
        "guard-step4.pt",
        "guard-step8.pt",
    ]
    saved = torch.load(tmp_path / "guard-step12.pt", weights_only=True)
    assert set(saved) == {"model", "optimizer", "scaler", "rng", "guard"}


def test_two_guards_sharing_a_log_are_told_apart(tmp_path):
    log = str(tmp_path / "g.jsonl")
    a, x, y = _setup()
    b, _, _ = _setup()
    oa, ob = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    ga = TrainingGuard(a, oa, log=log, log_every=1, name="gen")
    gb = TrainingGuard(b, ob, log=log, log_every=1, name="disc")
    _run(ga, a, oa, x, y, 3, nan_at=(1,))
    _run(gb, b, ob, x, y, 3)
    ga.close()
    gb.close()
    assert bad_steps(log, name="gen") == {1} and bad_steps(log, name="disc") == set()


def test_a_sample_the_guard_names_is_excluded_by_the_loader_for_the_rest_of_the_run(tmp_path):
    from torch.utils.data import DataLoader, TensorDataset

    from datacheck.torch import GuardedLoader, read_quarantine

    _, x, y = _setup()
    model = torch.nn.Linear(8, 1)
    x = x[:64].clone()
    x[13] = 1e30  # "extreme" is a warning: the loader keeps it; its squared error is Inf
    ds = TensorDataset(x, y[:64], torch.arange(64))
    loader = GuardedLoader(DataLoader(ds, batch_size=16, shuffle=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    folder = tmp_path / "q"
    guard = TrainingGuard(model, opt, loader=loader, quarantine=str(folder))
    seen = {0: [], 1: []}
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        for xb, yb, idx in loader:
            seen[epoch] += idx.tolist()
            per_sample = F.mse_loss(model(xb), yb, reduction="none").mean(1)
            per_sample.mean().backward()
            guard.step(per_sample.mean(), indices=idx.tolist(), sample_losses=per_sample.detach())
            opt.zero_grad()
    guard.close()
    assert 13 in seen[0] and 13 not in seen[1] and len(seen[1]) == 63
    rows = read_quarantine(folder)
    assert rows[["index", "epoch", "step", "key"]].values.tolist() == [[13, 0, 0, "loss"]]
    # the loader stamped the record with its dataset: a grown dataset refuses an index-only name
    assert rows["dataset"].str.startswith("n=64 probe=").all()
    from datacheck.errors import UsageError

    grown = TensorDataset(torch.cat([x, x[:2]]), torch.cat([y[:64], y[:2]]), torch.arange(66))
    with pytest.raises(UsageError, match="another dataset"):
        GuardedLoader(DataLoader(grown, batch_size=16), quarantine=folder)


@pytest.mark.parametrize(
    "names",
    [
        [f"n01440764_{10000 + i}" for i in range(32)],  # WebDataset __key__s
        [f"{i:06d}" for i in range(32)],  # zero-padded keys: '000007' is not index 7
    ],
)
def test_string_keys_name_the_sample_as_text_never_as_an_index(tmp_path, names):
    """Keys from a stream (WebDataset's ``__key__``) are names, not numbers: a NaN loss names
    the sample by its key in the quarantine and the event log, and nothing becomes an index."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    log = tmp_path / "guard.jsonl"
    guard = TrainingGuard(model, opt, quarantine=str(tmp_path / "q"), log=str(log))
    for step in range(8):
        xb = x.clone()
        if step == 5:
            xb[7, 3] = float("nan")
        per_sample = F.cross_entropy(model(xb), y, reduction="none")
        per_sample.mean().backward()
        guard.step(per_sample.mean(), indices=names, sample_losses=per_sample.detach())
        opt.zero_grad()
    guard.close()
    q = read_quarantine(tmp_path / "q")
    assert q["sample"].tolist() == [names[7]] and q["index"].isna().all()
    assert q["check"].tolist() == ["nonfinite_loss"]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    bad = next(e for e in events if e["kind"] == "nonfinite")
    assert bad["indices"] == names and [s["index"] for s in bad["samples"]] == [names[7]]
