"""A tiny regression task with a planted NaN batch, shared by the trainer integration tests."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset

N, BATCH, DIM = 128, 8, 4
NAN_BATCH = 5
"""Batch (of each epoch, in order) whose inputs hold a NaN."""
SPIKE_STEP = 20
"""Optimizer step at which the test multiplies the learning rate by SPIKE for one step."""
SPIKE = 1000.0


class Regression(Dataset):
    """y = x @ w + noise; the samples of batch NAN_BATCH (or ``nan``) carry a NaN input."""

    def __init__(self, nan: slice | list[int] = slice(NAN_BATCH * BATCH, (NAN_BATCH + 1) * BATCH)):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(N, DIM, generator=g)
        self.y = self.x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.01 * torch.randn(N, generator=g)
        self.x[nan, 1] = float("nan")

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "y": self.y[i]}


def clean_loss(weight: torch.Tensor, bias: torch.Tensor) -> float:
    """Mean squared error of a linear model on the clean samples."""
    ds = Regression()
    keep = torch.isfinite(ds.x).all(dim=1)
    pred = ds.x[keep] @ weight.reshape(-1) + bias.reshape(())
    return float(((pred - ds.y[keep]) ** 2).mean())


GUARD_OPTIONS = {"clip_norm": 10.0, "checkpoint_every": 5}


PLANTED_NAN, BROKEN, HUGE = 13, 42, 77
"""A NaN input, a sample whose loading raises, an input of 1e30 (the loss overflows)."""


class Planted(Regression):
    """Regression with three bad samples of different kinds, one of each."""

    def __init__(self) -> None:
        super().__init__(nan=[PLANTED_NAN])
        self.x[HUGE, 0] = 1e30

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if i == BROKEN:
            raise OSError(f"[Errno 5] Input/output error: '/data/{i}.npy'")
        return {**super().__getitem__(i), "i": torch.tensor(i)}
