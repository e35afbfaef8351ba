"""The model families of the guard scenario suite: small, fast (a run is seconds), no downloads.

- ``mlp``: an MLP on scikit-learn's bundled 8x8 digits (1,797 images, 10 classes);
- ``cnn``: a small CNN on the same digits, as 1x8x8 images;
- ``lm``: a character GRU language model on this package's own source code;
- ``reg``: an MLP regressor on a tabular task (scikit-learn's generated Friedman #1, 10
  features, standardised target), mean squared error;
- ``bn`` (held out: the guard was never tuned on it, ``_guard_holdout``): an MLP with
  BatchNorm and dropout on scikit-learn's bundled breast-cancer table (569 rows, 30
  features, 2 classes), trained with SGD + Nesterov momentum instead of AdamW.

Each :class:`Task` gives its data (a train :class:`Samples` set returning ``(x, y, index)`` and
a held-out pair), a model factory seeded by the run's seed, its per-sample loss and its
held-out metric (cross-entropy in nats, or MSE for ``reg``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

F = torch.nn.functional
FAMILIES = ("mlp", "cnn", "lm", "reg")
HELD_OUT_FAMILIES = ("bn",)


class Samples(Dataset):
    """(x, y, index) rows; ``poison`` maps an index to a damaged copy of its row."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y
        self.poison: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        x, y = self.poison.get(i, (self.x[i], self.y[i]))
        return x, y, i

    def __getitems__(self, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A whole batch at once (the DataLoader's batched fetch; ``collate`` passes it on)."""
        idx = torch.tensor(rows)
        x, y = self.x[idx].clone(), self.y[idx].clone()
        for k, i in enumerate(rows):
            if i in self.poison:
                x[k], y[k] = self.poison[i]
        return x, y, idx


def collate(batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> Any:
    """The batch :meth:`Samples.__getitems__` already built."""
    return batch


@dataclass
class Task:
    family: str
    train: Samples
    test: tuple[torch.Tensor, torch.Tensor]
    classes: int
    build: Callable[[], torch.nn.Module]
    lr: float
    steps: int
    batch: int = 32
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    sgd: bool = False
    """SGD with Nesterov momentum 0.9 instead of AdamW."""

    @property
    def regression(self) -> bool:
        return self.family == "reg"

    def model(self) -> torch.nn.Module:
        torch.manual_seed(1 + self.seed)
        return self.build()

    def optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        if self.sgd:
            return torch.optim.SGD(model.parameters(), lr=self.lr, momentum=0.9, nesterov=True)
        return torch.optim.AdamW(model.parameters(), lr=self.lr)

    def per_sample(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = out.float()
        if self.regression:
            return F.mse_loss(out.reshape(-1), y.reshape(-1).float(), reduction="none")
        if out.dim() == 3:  # language model: (batch, time, vocab)
            flat = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction="none")
            return flat.reshape(y.shape).mean(dim=1)
        return F.cross_entropy(out, y, reduction="none")

    def evaluate(self, model: torch.nn.Module) -> tuple[float, float]:
        """(held-out loss, accuracy; NaN accuracy for the regressor)."""
        x, y = self.test
        was = model.training
        model.eval()
        with torch.no_grad():
            out = model(x)
            loss = self.per_sample(out, y).mean().item()
            acc = float("nan") if self.regression else (out.argmax(-1) == y).float().mean().item()
        model.train(was)
        return loss, acc


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    return x[perm], y[perm]


def _split(x: torch.Tensor, y: torch.Tensor, test: int) -> tuple[Samples, tuple[Any, Any]]:
    return Samples(x[:-test].clone(), y[:-test].clone()), (x[-test:], y[-test:])


def mlp_task(steps: int = 600, seed: int = 0) -> Task:
    x, y = _digits()
    train, test = _split(x, y, 397)

    def build() -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
        )

    return Task("mlp", train, test, 10, build, 5e-3, steps, seed=seed)


class _Image(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, 1, 8, 8)


def cnn_task(steps: int = 600, seed: int = 0) -> Task:
    x, y = _digits()
    train, test = _split(x, y, 397)

    def build() -> torch.nn.Module:
        return torch.nn.Sequential(
            _Image(),
            torch.nn.Conv2d(1, 8, 3),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 16, 3),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
            torch.nn.Linear(16 * 4 * 4, 10),
        )

    return Task("cnn", train, test, 10, build, 2e-3, steps, seed=seed)


class CharGRU(torch.nn.Module):
    def __init__(self, vocab: int = 96, d: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.rnn = torch.nn.GRU(d, hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.emb(x))[0])


def _codes(text: str) -> torch.Tensor:
    return torch.tensor([min(max(ord(c) - 32, 0), 95) if c != "\n" else 0 for c in text])


def lm_task(steps: int = 500, seed: int = 0, context: int = 32) -> Task:
    root = Path(__file__).resolve().parents[1] / "datacheck"
    text = "".join(p.read_text() for p in sorted(root.rglob("*.py")))[:240_000]
    ids = _codes(text)
    n = (len(ids) - 1) // context
    x = ids[: n * context].reshape(n, context)
    y = ids[1 : n * context + 1].reshape(n, context)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    train, test = _split(x[perm], y[perm], 300)
    return Task("lm", train, test, 96, CharGRU, 4e-3, steps, batch=16, seed=seed)


def reg_task(steps: int = 600, seed: int = 0) -> Task:
    from sklearn.datasets import make_friedman1

    xs, ys = make_friedman1(n_samples=2400, n_features=10, noise=1.0, random_state=0)
    x = torch.tensor(xs, dtype=torch.float32)
    y = torch.tensor((ys - ys.mean()) / ys.std(), dtype=torch.float32)
    x = (x - x.mean(0)) / x.std(0)
    train, test = _split(x, y, 400)

    def build() -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(10, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1), torch.nn.Flatten(0)
        )

    return Task("reg", train, test, 0, build, 2e-3, steps, seed=seed)


def bn_task(steps: int = 600, seed: int = 0) -> Task:
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    x = torch.tensor(d.data, dtype=torch.float32)
    x = (x - x.mean(0)) / x.std(0)
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train, test = _split(x[perm], y[perm], 150)

    def build() -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(30, 64),
            torch.nn.BatchNorm1d(64),
            torch.nn.ReLU(),
            torch.nn.Dropout(0.2),
            torch.nn.Linear(64, 2),
        )

    return Task("bn", train, test, 2, build, 0.02, steps, batch=16, seed=seed, sgd=True)


BUILDERS: dict[str, Callable[..., Task]] = {
    "mlp": mlp_task,
    "cnn": cnn_task,
    "lm": lm_task,
    "reg": reg_task,
    "bn": bn_task,
}


def task(family: str, seed: int, scale: float = 1.0) -> Task:
    """A fresh task of ``family`` (``scale`` shortens the run: the suite's fast slice)."""
    built = BUILDERS[family](seed=seed)
    built.steps = max(60, int(built.steps * scale))
    return built
