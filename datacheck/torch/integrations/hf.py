"""TrainingGuard inside a Hugging Face ``Trainer``: a minimal subclass.

Example:
    >>> from datacheck.torch.integrations.hf import GuardedTrainer
    >>> trainer = GuardedTrainer(model=model, args=args, train_dataset=ds,
    ...                          guard_options={"clip_norm": 1.0, "log": "out/guard.jsonl"})
    >>> trainer.train()
    >>> trainer.guard_results[-1].action

A subclass, not a ``TrainerCallback``: a callback can neither see the loss before the optimizer
step nor skip the step. Three overrides, each calling the Trainer's own: ``create_optimizer``
(the guard wraps the optimizer's ``step``), ``create_scheduler`` (the guard learns the
scheduler), ``training_step`` (each micro-batch's loss is noted; with gradient accumulation the
step is judged on their mean). The Trainer still runs forward, backward, ``max_grad_norm``
clipping, its AMP scaler (``fp16=True``: overflowing steps are skipped by the scaler, unseen by
the guard) and its scheduler; the guard decides whether the weights move.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Trainer

from datacheck.torch._guard import StepResult, TrainingGuard
from datacheck.torch.integrations._step import GuardedStep

__all__ = ["GuardedTrainer"]

_Trainer: Any = Trainer


class GuardedTrainer(_Trainer):
    """A ``transformers.Trainer`` whose optimizer steps go through a TrainingGuard.

    Args:
        *args: the Trainer's.
        guard_options: :class:`~datacheck.torch.GuardConfig` fields (``clip_norm``, ``log``, ...).
        **kwargs: the Trainer's.
    """

    def __init__(self, *args: Any, guard_options: dict[str, Any] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.guard_options = dict(guard_options or {})
        self.guard: TrainingGuard | None = None
        """The guard (built with the optimizer)."""
        self._guarded: GuardedStep | None = None

    @property
    def guard_results(self) -> list[StepResult]:
        """What the guard decided at each optimizer step."""
        return self._guarded.results if self._guarded is not None else []

    def create_optimizer(self, *args: Any, **kwargs: Any) -> torch.optim.Optimizer:
        optimizer = super().create_optimizer(*args, **kwargs)
        if self._guarded is None or self._guarded.optimizer is not optimizer:
            self.guard = TrainingGuard(self.model, optimizer, **self.guard_options)
            self._guarded = GuardedStep(self.guard, optimizer)
        return optimizer

    def create_scheduler(self, *args: Any, **kwargs: Any) -> Any:
        scheduler = super().create_scheduler(*args, **kwargs)
        if self.guard is not None and self.guard.scheduler is None:
            self.guard.scheduler = scheduler
        return scheduler

    def training_step(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        loss = super().training_step(model, inputs, *args, **kwargs)
        if self._guarded is not None:
            self._guarded.note_loss(loss)
        return loss
