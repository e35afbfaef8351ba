"""TrainingGuard and GuardedLoader inside a Hugging Face ``Trainer``: a minimal subclass.

Example:
    >>> from datacheck.torch.integrations.hf import GuardedTrainer
    >>> trainer = GuardedTrainer(model=model, args=args, train_dataset=ds,
    ...                          guard_options={"clip_norm": 1.0, "log": "out/guard.jsonl"},
    ...                          loader_options={"quarantine": "out/quarantine", "fits": "fp16"})
    >>> trainer.train()
    >>> trainer.guard_results[-1].action, trainer.guarded_loader.stats

A subclass, not a ``TrainerCallback``: a callback can neither see the loss before the optimizer
step nor skip the step. The overrides each call the Trainer's own:

- ``get_train_dataloader``: the DataLoader the Trainer builds is wrapped in a
  :class:`~datacheck.torch.GuardedLoader` (``loader_options``) before ``accelerator.prepare``,
  which passes it through; under DDP it shards itself (a DistributedSampler in place of the
  Trainer's RandomSampler), and the Trainer's ``set_epoch`` reaches it. An unreadable sample is
  quarantined instead of ending the run; a NaN or overflowing one is dropped from its batch.
  ``guard_data=False`` keeps the Trainer's own loader.
- ``create_optimizer`` (the guard wraps the optimizer's ``step``), ``create_scheduler`` (the
  guard learns the scheduler).
- ``training_step``: each micro-batch's loss is noted (with gradient accumulation the step is
  judged on their mean), with its dataset indices and, where the model gives them, its
  per-sample losses: ``sample_losses`` in the model's output, or ``sample_loss_fn(outputs,
  inputs)``. A sample whose loss is non-finite or far above the rest is then named,
  quarantined and excluded for the rest of the run.

The Trainer still runs forward, backward, ``max_grad_norm`` clipping, its AMP scaler
(``fp16=True``: overflowing steps are skipped by the scaler, unseen by the guard) and its
scheduler; the guard decides whether the weights move. Resuming mid-epoch from a checkpoint
(``resume_from_checkpoint``) skips the epoch's first batches through accelerate's
``skip_first_batches``, which rebuilds a plain loader from the dataset: that epoch's rest is
then not guarded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader
from transformers import Trainer

from datacheck.errors import UsageError
from datacheck.torch._guard import StepResult, TrainingGuard
from datacheck.torch._loader import GuardedLoader
from datacheck.torch._loader_config import LoaderConfig
from datacheck.torch.integrations._step import (
    GuardedStep,
    sample_losses_of,
    with_loader_quarantine,
)

__all__ = ["GuardedTrainer"]

_Trainer: Any = Trainer
SampleLossFn = Callable[[Any, Mapping[str, Any]], torch.Tensor]
"""``sample_loss_fn(outputs, inputs)``: one loss per sample of the batch."""


class GuardedTrainer(_Trainer):
    """A ``transformers.Trainer`` whose train data and optimizer steps are guarded.

    Args:
        *args: the Trainer's.
        guard_options: :class:`~datacheck.torch.GuardConfig` fields (``clip_norm``, ``log``, ...);
            the guard's ``quarantine`` is the loader's unless given.
        loader_options: :class:`~datacheck.torch.LoaderConfig` fields for the train loader
            (``quarantine``, ``fits``, ``on_bad``, ...).
        guard_data: False keeps the Trainer's own train loader (only the steps are guarded).
        sample_loss_fn: per-sample losses from the model's outputs and the batch, for models
            that return none (e.g. ``cross_entropy(outputs.logits, inputs["labels"],
            reduction="none")``).
        **kwargs: the Trainer's.
    """

    def __init__(
        self,
        *args: Any,
        guard_options: dict[str, Any] | None = None,
        loader_options: Mapping[str, Any] | None = None,
        guard_data: bool = True,
        sample_loss_fn: SampleLossFn | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.guard_options = dict(guard_options or {})
        self.loader_options = dict(loader_options or {})
        LoaderConfig(**self.loader_options)  # a bad option fails here, not inside train()
        self.guard_data = guard_data
        self.sample_loss_fn = sample_loss_fn
        self.guard: TrainingGuard | None = None
        """The guard (built with the optimizer)."""
        self.guarded_loader: GuardedLoader | None = None
        """The train loader's GuardedLoader (built with the train loader)."""
        self._guarded: GuardedStep | None = None
        self._sample_losses: torch.Tensor | None = None

    @property
    def guard_results(self) -> list[StepResult]:
        """What the guard decided at each optimizer step."""
        return self._guarded.results if self._guarded is not None else []

    def get_train_dataloader(self) -> Any:
        if not self.guard_data:
            return super().get_train_dataloader()
        accelerator = self.accelerator
        prepare = accelerator.prepare

        def guarded_prepare(*objs: Any, **kwargs: Any) -> Any:
            wrapped = [self._guard_loader(o) if isinstance(o, DataLoader) else o for o in objs]
            return prepare(*wrapped, **kwargs)

        accelerator.prepare = guarded_prepare
        try:
            loader = super().get_train_dataloader()
        finally:
            del accelerator.prepare  # the Accelerator's own method again
        if not isinstance(loader, GuardedLoader):
            raise UsageError(
                "GuardedTrainer: the Trainer built its train loader without handing a "
                f"DataLoader to accelerator.prepare (got {type(loader).__name__}), so it could "
                "not be guarded; pass guard_data=False to guard only the optimizer steps"
            )
        return loader

    def _guard_loader(self, dataloader: DataLoader) -> GuardedLoader:
        try:
            loader = GuardedLoader(dataloader, **self.loader_options)
        except UsageError as exc:
            raise UsageError(
                f"GuardedTrainer: the train loader cannot be guarded: {exc} (pass "
                "guard_data=False to guard only the optimizer steps)"
            ) from exc
        self.guarded_loader = loader
        if self.guard is not None:
            self.guard.loader = loader
        return loader

    def create_optimizer(self, *args: Any, **kwargs: Any) -> torch.optim.Optimizer:
        optimizer = super().create_optimizer(*args, **kwargs)
        if self._guarded is None or self._guarded.optimizer is not optimizer:
            options = with_loader_quarantine(self.guard_options, self.loader_options)
            self.guard = TrainingGuard(self.model, optimizer, loader=self.guarded_loader, **options)
            self._guarded = GuardedStep(self.guard, optimizer)
        return optimizer

    def create_scheduler(self, *args: Any, **kwargs: Any) -> Any:
        scheduler = super().create_scheduler(*args, **kwargs)
        if self.guard is not None and self.guard.scheduler is None:
            self.guard.scheduler = scheduler
        return scheduler

    def compute_loss(
        self, model: Any, inputs: Any, return_outputs: bool = False, **kwargs: Any
    ) -> Any:
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, **kwargs)
        if self.sample_loss_fn is not None:
            self._sample_losses = self.sample_loss_fn(outputs, inputs)
        else:
            self._sample_losses = sample_losses_of(outputs)
        return (loss, outputs) if return_outputs else loss

    def training_step(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        indices = self.guarded_loader.take_indices() if self.guarded_loader is not None else None
        self._sample_losses = None
        loss = super().training_step(model, inputs, *args, **kwargs)
        if self._guarded is not None:
            self._guarded.note_loss(loss)
            self._guarded.note_batch(indices, self._sample_losses)
        return loss
