"""GuardedTrainer: a Hugging Face Trainer run through a NaN sample and an LR spike."""

from __future__ import annotations

import math

import pytest
import torch

from tests.torch.integrations._tiny import (
    BATCH,
    GUARD_OPTIONS,
    SPIKE,
    N,
    Regression,
    clean_loss,
)

transformers = pytest.importorskip("transformers")

from datacheck.torch.integrations.hf import GuardedTrainer  # noqa: E402

EPOCHS = 2
SPIKE_STEP = 24
"""Not a step where the shuffled NaN sample lands (5 and 20 with seed 0; checked below)."""


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": torch.nn.functional.mse_loss(self.net(x).squeeze(1), y)}


class SpikeLR(transformers.TrainerCallback):
    def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
        if state.global_step == SPIKE_STEP:
            for group in optimizer.param_groups:
                group["lr"] *= SPIKE


def train(tmp_path, spike: bool, guard_options: dict | None) -> tuple[Linear, object]:
    torch.manual_seed(0)
    model = Linear()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=BATCH,
        num_train_epochs=EPOCHS,
        learning_rate=0.05,
        optim="sgd",
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
        weight_decay=0.0,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    kwargs = {"model": model, "args": args, "train_dataset": Regression(nan=[40])}
    kwargs["callbacks"] = [SpikeLR()] if spike else []
    if guard_options is None:
        trainer = transformers.Trainer(**kwargs)
    else:
        trainer = GuardedTrainer(**kwargs, guard_options=guard_options)
    trainer.train()
    return model, trainer


def final_loss(model: Linear) -> float:
    return clean_loss(model.net.weight.detach(), model.net.bias.detach())


def test_every_step_goes_through_the_guard_and_the_nan_sample_is_skipped(tmp_path):
    model, trainer = train(
        tmp_path, spike=False, guard_options={"log": str(tmp_path / "g.jsonl"), **GUARD_OPTIONS}
    )
    results = trainer.guard_results
    assert len(results) == EPOCHS * N // BATCH
    bad = [r for r in results if "nonfinite" in r.events]
    assert len(bad) == EPOCHS and not any(r.action.stepped for r in bad)  # once per epoch
    assert not math.isnan(final_loss(model)) and final_loss(model) < 0.05
    assert (tmp_path / "g.jsonl").exists()


def test_the_plain_trainer_is_ruined_by_the_same_nan(tmp_path):
    model, _ = train(tmp_path, spike=False, guard_options=None)
    assert math.isnan(final_loss(model))


def test_the_guard_notices_an_lr_spike_and_training_ends_with_finite_weights(tmp_path):
    model, trainer = train(tmp_path, spike=True, guard_options=GUARD_OPTIONS)
    results = trainer.guard_results
    assert len(results) == EPOCHS * N // BATCH
    assert "nonfinite" not in results[SPIKE_STEP].events and results[SPIKE_STEP].lr == 0.05 * SPIKE
    assert any(r.events and r.events != ("checkpoint",) for r in results[SPIKE_STEP + 1 :])
    assert math.isfinite(final_loss(model))
