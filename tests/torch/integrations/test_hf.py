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

from datacheck.torch import read_quarantine  # noqa: E402
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
        trainer = GuardedTrainer(**kwargs, guard_options=guard_options, guard_data=False)
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


class Embedded(torch.utils.data.Dataset):
    """Sequences of 4 embeddings and a regression target for a tiny BERT, three samples bad: a
    NaN input, one whose loading raises, a target of 1e30 (its squared error overflows)."""

    NAN, BROKEN, HUGE = 11, 29, 50

    def __init__(self, n: int = 64) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 4, 16, generator=g)
        self.y = self.x[:, :, 0].mean(1)
        self.x[self.NAN, 1, 3] = float("nan")
        self.y[self.HUGE] = 1e30

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if i == self.BROKEN:
            raise OSError(f"[Errno 5] Input/output error: '/data/{i}.pt'")
        return {"inputs_embeds": self.x[i], "labels": self.y[i]}


def tiny_bert() -> torch.nn.Module:
    config = transformers.BertConfig(
        vocab_size=8,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=8,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=1,
        problem_type="regression",
    )
    torch.manual_seed(0)
    return transformers.BertForSequenceClassification(config)


def per_sample_mse(outputs, inputs) -> torch.Tensor:
    return (outputs.logits.squeeze(-1) - inputs["labels"]) ** 2


def train_bert(tmp_path, **guarded) -> object:
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        num_train_epochs=2,
        learning_rate=1e-3,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    kwargs = {"model": tiny_bert(), "args": args, "train_dataset": Embedded()}
    trainer = GuardedTrainer(**kwargs, **guarded) if guarded else transformers.Trainer(**kwargs)
    trainer.train()
    return trainer


def test_the_train_data_is_guarded_and_a_1e30_sample_is_named_once(tmp_path):
    """A tiny BERT built from a config: the unreadable sample no longer ends the run, the NaN
    one is dropped from its batch, and the one with a 1e30 target (kept by the loader: a
    warning), whose squared error is Inf, is named by the guard from its per-sample loss and
    quarantined, then never drawn again."""
    q = tmp_path / "q"
    trainer = train_bert(
        tmp_path,
        guard_options=GUARD_OPTIONS,
        loader_options={"quarantine": str(q)},
        sample_loss_fn=per_sample_mse,
    )
    rows = read_quarantine(q)
    assert dict(zip(rows["index"], rows["check"], strict=True)) == {
        Embedded.NAN: "nan",
        Embedded.BROKEN: "load_error",
        Embedded.HUGE: "nonfinite_loss",
    }
    assert set(rows["epoch"]) == {0}
    skipped = [r for r in trainer.guard_results if "nonfinite" in r.events]
    assert len(skipped) == 1  # epoch 0 only: not the same batch skipped every epoch
    stats = trainer.guarded_loader.stats
    assert (stats.load_errors, stats.dropped, stats.excluded) == (1, 2, 3)  # epoch 1: all three
    params = torch.cat([p.detach().reshape(-1) for p in trainer.model.parameters()])
    assert torch.isfinite(params).all()


def test_the_plain_trainer_ends_at_the_unreadable_sample(tmp_path):
    with pytest.raises(OSError, match="Input/output error"):
        train_bert(tmp_path)
