"""TrainingGuard and GuardedLoader as a PyTorch Lightning callback.

Example:
    >>> from datacheck.torch.integrations.lightning import GuardCallback
    >>> guard = GuardCallback(clip_norm=1.0, log="runs/exp1/guard.jsonl",
    ...                       loader_options={"quarantine": "runs/exp1/quarantine", "fits": "fp16"})
    >>> trainer = lightning.Trainer(callbacks=[guard], precision="bf16-mixed")
    >>> trainer.fit(model, train_loader)
    >>> guard.results[-1].action, guard.loader.stats

The data: the train DataLoader is wrapped in a :class:`~datacheck.torch.GuardedLoader`
(``loader_options`` are its options), after Lightning has put its ``DistributedSampler`` in
under DDP, so an unreadable sample is quarantined instead of ending the fit and a NaN or
overflowing one is dropped from its batch; Lightning's ``set_epoch`` reaches the sampler.
A train loader that already is a GuardedLoader is used as it is; ``guard_data=False`` leaves the
data alone.

The steps: every optimizer step goes through a :class:`~datacheck.torch.TrainingGuard`.
Lightning still runs the forward, backward, gradient clipping (``gradient_clip_val``), the AMP
scaler and the LR scheduler; the guard decides whether the weights move, rolls back and cuts the
LR as it does in a plain loop. Each step's evidence is the dataset indices of its batches and,
when ``training_step`` returns ``{"loss": loss, "sample_losses": per_sample}``, the per-sample
losses: a sample whose loss is non-finite or far above the rest is named, quarantined and
excluded for the rest of the run instead of its batch being skipped every epoch. Works with
automatic optimization and one optimizer. With ``precision="16-mixed"`` Lightning's GradScaler
skips overflowing steps itself (the guard does not see them); with fp32 and bf16 every step
goes through the guard.

How: the callback wraps two methods of the trainer's strategy (public hooks of Lightning's
``Strategy``) for the length of the fit: ``process_dataloader``, called on every loader after
Lightning's own processing (the train loader is the one processed while ``trainer.training``),
and ``training_step``, whose output carries the per-sample losses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader

try:  # the unified package, else the standalone one (a Trainer accepts only its own Callback)
    import lightning.pytorch as _pl
except ImportError:  # pragma: no cover - depends on what is installed
    import pytorch_lightning as _pl  # type: ignore[no-redef]

from datacheck.errors import UsageError
from datacheck.torch._guard import StepResult, TrainingGuard
from datacheck.torch._loader import GuardedLoader
from datacheck.torch._loader_config import LoaderConfig
from datacheck.torch.integrations._step import (
    GuardedStep,
    sample_losses_of,
    with_loader_quarantine,
)

Callback: Any = _pl.Callback

__all__ = ["GuardCallback"]


class GuardCallback(Callback):
    """Guard a Lightning ``Trainer.fit``: its train data per sample, its optimizer steps.

    Args:
        loader_options: :class:`~datacheck.torch.LoaderConfig` fields for the train loader's
            GuardedLoader (``quarantine``, ``fits``, ``on_bad``, ...).
        guard_data: False leaves the train loader as it is (only the steps are guarded).
        **options: :class:`~datacheck.torch.GuardConfig` fields (``clip_norm``, ``log``, ...);
            the guard's ``quarantine`` is the loader's unless given.
    """

    def __init__(
        self,
        *,
        loader_options: Mapping[str, Any] | None = None,
        guard_data: bool = True,
        **options: Any,
    ) -> None:
        super().__init__()
        self.options = options
        self.loader_options = dict(loader_options or {})
        LoaderConfig(**self.loader_options)  # a bad option fails here, not inside the fit
        self.guard_data = guard_data
        self.guard: TrainingGuard | None = None
        """The guard of the current fit (None before ``fit`` starts)."""
        self.loader: GuardedLoader | None = None
        """The train loader's GuardedLoader (None before the fit loads its data)."""
        self._step: GuardedStep | None = None
        self._strategy: Any = None
        self._indices: list[int] | None = None

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
        self.loader = None  # this fit's, once Lightning loads its data
        options = with_loader_quarantine(self.options, self.loader_options)
        self.guard = TrainingGuard(pl_module, optimizer, scheduler=scheduler, **options)
        self._step = GuardedStep(self.guard, optimizer)
        self._hook(trainer)

    def _hook(self, trainer: Any) -> None:
        """Wrap the strategy's ``process_dataloader`` and ``training_step`` for this fit."""
        strategy = self._strategy = trainer.strategy
        process, training_step = strategy.process_dataloader, strategy.training_step

        def process_dataloader(dataloader: object) -> object:
            dataloader = process(dataloader)
            return self._guarded(dataloader) if trainer.training else dataloader

        def guarded_training_step(*args: Any, **kwargs: Any) -> Any:
            output = training_step(*args, **kwargs)
            if self._step is not None:
                self._step.note_batch(self._indices, sample_losses_of(output))
            return output

        strategy.process_dataloader = process_dataloader
        strategy.training_step = guarded_training_step

    def _guarded(self, dataloader: object) -> object:
        """The train loader as a GuardedLoader (built here unless it is one already)."""
        if isinstance(dataloader, GuardedLoader):
            loader = dataloader
        elif self.guard_data and isinstance(dataloader, DataLoader):
            try:
                loader = GuardedLoader(dataloader, **self.loader_options)
            except UsageError as exc:
                raise UsageError(
                    f"GuardCallback: the train loader cannot be guarded: {exc} (pass "
                    "guard_data=False to guard only the optimizer steps)"
                ) from exc
        else:
            return dataloader
        self.loader = loader
        if self.guard is not None:
            self.guard.loader = loader
        return loader

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self._indices = self.loader.take_indices() if self.loader is not None else None

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
        if self._step is not None:
            self._step.note_loss(loss)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._close()

    def _close(self) -> None:
        if self._strategy is not None:  # the strategy's own methods back
            for name in ("process_dataloader", "training_step"):
                self._strategy.__dict__.pop(name, None)
            self._strategy = None
        if self._step is not None:
            self._step.restore()
        if self.guard is not None:
            self.guard.close()
        if self.loader is not None:
            self.loader.close()
