"""TrainingGuard as a PyTorch Lightning callback.

Example:
    >>> from datacheck.torch.integrations.lightning import GuardCallback
    >>> guard = GuardCallback(clip_norm=1.0, log="runs/exp1/guard.jsonl")
    >>> trainer = lightning.Trainer(callbacks=[guard], precision="bf16-mixed")
    >>> trainer.fit(model, train_loader)
    >>> guard.results[-1].action, guard.guard.lr

Works with automatic optimization and one optimizer (the common case). Lightning still runs the
forward, backward, gradient clipping (``gradient_clip_val``), the AMP scaler and the LR
scheduler; the guard decides whether the weights move, rolls back and cuts the LR as it does in
a plain loop. With ``precision="16-mixed"`` Lightning's GradScaler skips overflowing steps
itself (the guard does not see them); with fp32 and bf16 every step goes through the guard.
"""

from __future__ import annotations

from typing import Any

import torch

try:  # the unified package, else the standalone one (a Trainer accepts only its own Callback)
    import lightning.pytorch as _pl
except ImportError:  # pragma: no cover - depends on what is installed
    import pytorch_lightning as _pl  # type: ignore[no-redef]

from datacheck.errors import UsageError
from datacheck.torch._guard import StepResult, TrainingGuard
from datacheck.torch.integrations._step import GuardedStep

Callback: Any = _pl.Callback

__all__ = ["GuardCallback"]


class GuardCallback(Callback):
    """Route every optimizer step of a Lightning ``Trainer.fit`` through a TrainingGuard.

    Args:
        **options: :class:`~datacheck.torch.GuardConfig` fields (``clip_norm``, ``log``, ...).
    """

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.options = options
        self.guard: TrainingGuard | None = None
        """The guard of the current fit (None before ``fit`` starts)."""
        self._step: GuardedStep | None = None

    @property
    def results(self) -> list[StepResult]:
        """What the guard decided at each optimizer step of the current fit."""
        return self._step.results if self._step is not None else []

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if not pl_module.automatic_optimization:
            raise UsageError(
                "GuardCallback needs automatic optimization; with manual optimization call "
                "TrainingGuard.step(loss) yourself instead of optimizer.step()"
            )
        if len(trainer.optimizers) != 1:
            raise UsageError(
                f"GuardCallback guards one optimizer; this module configures {len(trainer.optimizers)}"
            )
        optimizer = trainer.optimizers[0]
        configs = getattr(trainer, "lr_scheduler_configs", [])
        scheduler = configs[0].scheduler if configs else None
        self.guard = TrainingGuard(pl_module, optimizer, scheduler=scheduler, **self.options)
        self._step = GuardedStep(self.guard, optimizer)

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
        if self._step is not None:
            self._step.note_loss(loss)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._close()

    def _close(self) -> None:
        if self._step is not None:
            self._step.restore()
        if self.guard is not None:
            self.guard.close()
