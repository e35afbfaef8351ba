"""An optimizer whose ``step()`` goes through a TrainingGuard, for trainers that call it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from datacheck.torch._guard import StepResult, TrainingGuard


class GuardedStep:
    """Replaces ``optimizer.step`` (on the instance) with the guard's checked step.

    The trainer calls ``optimizer.step(closure)`` (Lightning) or ``optimizer.step()`` after its
    own backward (Hugging Face, or an AMP scaler that found the gradients finite). The loss of
    the step is the closure's result, else the last one passed to :meth:`note_loss` (the mean
    when several micro-batches were accumulated). The guard then calls the real ``step`` (or not).
    Each micro-batch's dataset indices and per-sample losses (:meth:`note_batch`, where the
    trainer's loader and the model give them) go with it: the evidence that names one sample.
    """

    def __init__(self, guard: TrainingGuard, optimizer: torch.optim.Optimizer) -> None:
        self.guard, self.optimizer = guard, optimizer
        self._real: Callable[..., Any] = optimizer.step
        self._losses: list[torch.Tensor] = []
        self._batches: list[tuple[Sequence[int] | None, torch.Tensor | None]] = []
        self._inside = False
        self.results: list[StepResult] = []
        """What the guard decided at each step, in order."""
        # torch's LR schedulers mark the step they wrapped and warn when it is replaced; the
        # real (wrapped) step still runs under the guard, so this one carries the mark.
        self._wrapped_by_lr_sched = getattr(self._real, "_wrapped_by_lr_sched", False)
        optimizer.step = self  # type: ignore[method-assign]

    def note_loss(self, loss: torch.Tensor | None) -> None:
        """The loss of a micro-batch whose backward the trainer ran (or will run)."""
        if loss is not None:
            self._losses.append(loss.detach().float().reshape(()))

    def note_batch(self, indices: Sequence[int] | None, sample_losses: torch.Tensor | None) -> None:
        """A micro-batch's dataset indices and per-sample losses (None where unknown)."""
        if sample_losses is not None:
            sample_losses = sample_losses.detach().reshape(-1)
        self._batches.append((indices, sample_losses))

    def _evidence(self) -> tuple[list[int] | None, torch.Tensor | None]:
        """The step's indices and per-sample losses, when every micro-batch gave them."""
        batches, self._batches = self._batches, []
        if not batches or any(i is None for i, _ in batches):
            return None, None
        indices = [int(i) for ids, _ in batches for i in ids or ()]
        losses = [s for ids, s in batches if s is not None and len(s) == len(ids or ())]
        return indices, torch.cat(losses) if len(losses) == len(batches) else None

    def __call__(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        if self._inside:  # the guard stepping the real optimizer
            return self._real(**kwargs)
        if self._wrapped_by_lr_sched:  # a step the guard skips is still a step to the scheduler
            self.optimizer._opt_called = True  # type: ignore[attr-defined]
        if closure is not None:
            noted = len(self._losses)
            with torch.enable_grad():
                out = closure()
            if len(self._losses) == noted:  # the trainer did not tell us the loss: the closure's
                self.note_loss(out)
        if not self._losses:  # nothing to judge (e.g. the training step returned None)
            return self._real(**kwargs)
        loss = torch.stack(self._losses).mean()
        self._losses.clear()
        indices, sample_losses = self._evidence()
        self._inside = True
        try:
            self.results.append(self.guard.step(loss, indices=indices, sample_losses=sample_losses))
        finally:
            self._inside = False
        return loss

    def restore(self) -> None:
        """Put the optimizer's own ``step`` back."""
        self.optimizer.step = self._real  # type: ignore[method-assign]


def sample_losses_of(output: Any) -> torch.Tensor | None:
    """The per-sample losses a model or training step returns beside its loss, under the key
    ``sample_losses`` of a dict (or a ``ModelOutput``); None when it returns none."""
    if isinstance(output, Mapping) and "sample_losses" in output:
        value = output["sample_losses"]
        return value if isinstance(value, torch.Tensor) else None
    return None


def with_loader_quarantine(options: Mapping[str, Any], loader: Mapping[str, Any]) -> dict[str, Any]:
    """The guard's options, its quarantine the loader's folder unless it names its own: a
    sample the guard names is then skipped at the sampler by the next run, as the loader's."""
    out = dict(options)
    folder = loader.get("quarantine")
    if folder is not None and "quarantine" not in out and "config" not in out:
        out["quarantine"] = str(folder)
    return out
