"""GuardCallback: a Lightning fit through a NaN batch and an LR spike."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.data import DataLoader

from tests.torch.integrations._tiny import (
    BATCH,
    BROKEN,
    GUARD_OPTIONS,
    HUGE,
    NAN_BATCH,
    PLANTED_NAN,
    SPIKE,
    SPIKE_STEP,
    N,
    Planted,
    Regression,
    clean_loss,
)

pl = pytest.importorskip("lightning.pytorch")

from datacheck.errors import UsageError  # noqa: E402
from datacheck.torch import GuardedLoader, read_quarantine  # noqa: E402
from datacheck.torch.integrations.lightning import GuardCallback  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:.*does not have many workers:UserWarning",
    "ignore:.*GPU available but not used:UserWarning",
    "ignore:.*treespec, LeafSpec.*:FutureWarning",  # lightning 2.6 on torch 2.13's pytree
)
EPOCHS = 2


class Linear(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.losses: list[float] = []

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(self.net(batch["x"]).squeeze(1), batch["y"])
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.05)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class SpikeLR(pl.Callback):
    """Multiplies the LR by SPIKE for the one optimizer step SPIKE_STEP."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == SPIKE_STEP:
            for group in trainer.optimizers[0].param_groups:
                group["lr"] *= SPIKE


def fit(*callbacks: pl.Callback, spike: bool = True, epochs: int = EPOCHS) -> Linear:
    torch.manual_seed(0)
    model = Linear()
    trainer = pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[*([SpikeLR()] if spike else []), *callbacks],
    )
    trainer.fit(model, DataLoader(Regression(), batch_size=BATCH))
    return model


def final_loss(model: Linear) -> float:
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.isfinite(params).all()
    return clean_loss(model.net.weight.detach(), model.net.bias.detach())


def test_every_step_goes_through_the_guard_and_the_nan_batch_is_skipped(tmp_path):
    guard = GuardCallback(log=str(tmp_path / "guard.jsonl"), guard_data=False, **GUARD_OPTIONS)
    model = fit(guard, spike=False)
    assert len(guard.results) == EPOCHS * N // BATCH  # every optimizer step
    bad = [r.step for r in guard.results if "nonfinite" in r.events]
    assert bad == [NAN_BATCH, NAN_BATCH + N // BATCH]  # once per epoch
    assert not any(guard.results[s].action.stepped for s in bad)
    assert final_loss(model) < 0.05  # as good as training on the clean samples
    assert (tmp_path / "guard.jsonl").exists()
    # the optimizer's own step is back after the fit
    assert "GuardedStep" not in type(model.trainer.optimizers[0].step).__name__


def test_the_guard_notices_an_lr_spike_and_the_fit_ends_with_finite_weights():
    guard = GuardCallback(guard_data=False, **GUARD_OPTIONS)
    model = fit(guard)
    assert len(guard.results) == EPOCHS * N // BATCH
    assert any(r.events and r.events != ("checkpoint",) for r in guard.results[SPIKE_STEP:])
    final_loss(model)  # finite


def test_the_guard_recovers_from_an_lr_spike(tmp_path):
    log = tmp_path / "guard.jsonl"
    guard = GuardCallback(log=str(log), guard_data=False, **GUARD_OPTIONS)
    model = fit(guard, epochs=3)  # 16 steps per epoch: the spike at 20, then 27 more steps
    events = [json.loads(line) for line in log.read_text().splitlines()]
    # the snapshot taken right after the spiked update (at step 21) is never confirmed: the
    # steps after it were bad, so the rollback goes to the newest state from before the spike
    assert {"kind": "checkpoint_discarded", "at_step": SPIKE_STEP + 1}.items() <= next(
        e for e in events if e["kind"] == "checkpoint_discarded"
    ).items()
    rollbacks = [e for e in events if e["kind"] == "rollback"]
    assert rollbacks and all(e["to_step"] <= SPIKE_STEP for e in rollbacks)
    checkpoints = [e["at_step"] for e in events if e["kind"] == "checkpoint"]
    assert SPIKE_STEP + 1 not in checkpoints
    assert final_loss(model) < 0.05


def test_without_the_guard_the_same_fit_is_ruined():
    model = fit()
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert not torch.isfinite(params).all()  # the NaN batch alone poisons plain SGD


def test_manual_optimization_is_refused_with_the_fix():
    class Manual(Linear):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: dict, batch_idx: int) -> None:
            return None

    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[GuardCallback()],
    )
    with pytest.raises(UsageError, match="TrainingGuard.step"):
        trainer.fit(Manual(), DataLoader(Regression(), batch_size=BATCH))


class PerSample(Linear):
    """Returns its per-sample losses beside the loss; remembers the samples of each epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[int]] = []

    def on_train_epoch_start(self) -> None:
        self.seen.append([])

    def training_step(self, batch: dict, batch_idx: int) -> dict[str, torch.Tensor]:
        per_sample = (self.net(batch["x"]).squeeze(1) - batch["y"]) ** 2
        self.seen[-1] += batch["i"].tolist()
        return {"loss": per_sample.mean(), "sample_losses": per_sample}


def fit_planted(guard: GuardCallback) -> PerSample:
    torch.manual_seed(0)
    model = PerSample()
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[guard],
    )
    trainer.fit(model, DataLoader(Planted(), batch_size=BATCH, shuffle=True))
    return model


def test_the_train_data_is_guarded_and_a_1e30_sample_is_named_once(tmp_path):
    """The callback wraps the train loader: the unreadable sample no longer ends the fit and the
    NaN one is dropped from its batch; the 1e30 one (kept by the loader: a warning) makes its
    step's loss Inf, and its per-sample loss names it: quarantined, never drawn again."""
    guard = GuardCallback(loader_options={"quarantine": str(tmp_path / "q")}, **GUARD_OPTIONS)
    model = fit_planted(guard)
    assert isinstance(guard.loader, GuardedLoader)
    q = read_quarantine(tmp_path / "q")
    assert dict(zip(q["index"], q["check"], strict=True)) == {
        PLANTED_NAN: "nan",
        BROKEN: "load_error",
        HUGE: "nonfinite_loss",
    }
    assert set(q["epoch"]) == {0}
    skipped = [r.step for r in guard.results if "nonfinite" in r.events]
    assert len(skipped) == 1  # epoch 0 only: not the same batch skipped every epoch
    first, second = model.seen
    clean = set(range(N)) - {PLANTED_NAN, BROKEN, HUGE}
    assert set(first) == clean | {HUGE} and set(second) == clean
    assert len(second) == len(clean)
    assert final_loss(model) < 0.05
    # the strategy's own methods are back after the fit
    assert "process_dataloader" not in vars(model.trainer.strategy)


def test_without_the_data_guard_the_unreadable_sample_ends_the_fit():
    with pytest.raises(OSError, match="Input/output error"):
        fit_planted(GuardCallback(guard_data=False, **GUARD_OPTIONS))


def test_a_bad_loader_option_fails_when_the_callback_is_built():
    with pytest.raises(UsageError, match="on_bad"):
        GuardCallback(loader_options={"on_bad": "ignore"})
