"""Sync-free guarding: the skip decision stays on the device.

``MaskedStep`` runs the optimizer every step and then puts back, with ``torch.where`` on a
device-side ``ok`` flag, every parameter and every optimizer state tensor it had before.  A
bad step therefore leaves weights, moments and step counts exactly as they were (multiplying
the update by zero would not: Adam would still decay its moments and count the step, and
``0 * NaN`` is NaN), and the host never has to look at the flag.

The price is memory and bandwidth: one copy of the parameters and of the optimizer state
(for Adam, three times the parameters) is written every step.  The optimizer's state must live
on the parameters' device (on CUDA: ``Adam(..., capturable=True)`` or ``fused=True``), or the
``where`` would copy a flag to the host.  Optimizer state that did not exist before the first
step is created by it and, when that step is bad, reset to zeros (the value Adam and SGD's
momentum start from).
"""

from __future__ import annotations

from typing import Any

import torch

from datacheck.errors import UsageError

__all__ = ["MaskedStep"]


class MaskedStep:
    """``optimizer.step()`` whose effects are undone on the device where ``ok`` is false."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self._keys: list[tuple[int, str | None]] = []
        self._backup: list[torch.Tensor] = []

    def _entries(self) -> list[tuple[torch.Tensor, str | None]]:
        """(parameter, state key) for the parameter itself (key None) and each state tensor."""
        out: list[tuple[torch.Tensor, str | None]] = []
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                out.append((p, None))
                state: dict[str, Any] = self.optimizer.state.get(p, {})
                out += [(p, k) for k, v in state.items() if isinstance(v, torch.Tensor)]
        return out

    def _get(self, p: torch.Tensor, key: str | None) -> torch.Tensor:
        return p.data if key is None else self.optimizer.state[p][key]

    def step(self, ok: torch.Tensor) -> None:
        """Step, then keep the new values only where ``ok`` (a 0-d bool tensor) is true."""
        entries = self._entries()
        keys = [(id(p), k) for p, k in entries]
        live = [self._get(p, k) for p, k in entries]
        if keys != self._keys:
            self._check_devices(live, ok.device)
            self._keys, self._backup = keys, [torch.empty_like(t) for t in live]
        torch._foreach_copy_(self._backup, live)
        self.optimizer.step()
        for (p, k), old in zip(entries, self._backup, strict=True):
            cur = self._get(p, k)
            cur.copy_(torch.where(ok, cur, old))
        known = set(keys)
        for p, k in self._entries():
            if (id(p), k) not in known:  # created by this step: back to its starting zeros
                fresh = self._get(p, k)
                fresh.copy_(torch.where(ok, fresh, torch.zeros_like(fresh)))

    @staticmethod
    def _check_devices(tensors: list[torch.Tensor], device: torch.device) -> None:
        for t in tensors:
            if t.device != device and device.type != "cpu":
                raise UsageError(
                    f"TrainingGuard(sync_every=...): optimizer state on {t.device} while the step "
                    f"runs on {device}; the masked update would copy to the host every step. Use "
                    "an optimizer whose state lives on the device (Adam/AdamW(capturable=True) or "
                    "fused=True), or sync_every=0"
                )
