"""TrainingGuard in fault scenarios, three ways: no guard, skip-and-clip, datacheck.

Run: ``python benchmarks/guard_scenarios.py`` (CPU, a few minutes; ``--small`` for the
version the test suite runs).  Two small tasks: an MLP on a 10-class 64-feature task (digits-
like, generated) and a character transformer on Python source (this package's own code).
Each scenario is trained three ways from the same seed and the same batches:

- ``none``: ``loss.backward(); optimizer.step()``;
- ``clip``: today's practice: skip a non-finite loss, ``clip_grad_norm_(1.0)``, skip a
  non-finite norm;
- ``guard``: ``GuardedLoader`` + ``TrainingGuard`` with their defaults.

Scenarios: ``clean``; ``poison`` (NaN/Inf/1e30 features, out-of-range labels/ids in 2 % of
the samples); ``lr_base`` (the base LR x100 from mid-run on); ``lr_window`` (the schedule x100
for 20 steps); ``fp16`` (MLP: fp16 autocast, inputs that overflow inside the model);
``shuffled`` (a 50-batch window of shuffled labels / random targets).  Prints final held-out
loss and accuracy, steps lost, guard events and clean samples quarantined; writes
``results/guard-scenarios.json``.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from _harness import Table, write_results
from torch.utils.data import DataLoader, Dataset, RandomSampler

from datacheck.torch import GuardedLoader, TrainingGuard, TrainingStopped, read_quarantine

F = torch.nn.functional
SCENARIOS = ("clean", "poison", "lr_base", "lr_window", "fp16", "shuffled")
WAYS = ("none", "clip", "guard")


# -- the two tasks ---------------------------------------------------------------------------


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


@dataclass
class Task:
    name: str
    train: Samples
    test: tuple[torch.Tensor, torch.Tensor]
    classes: int
    model: Any
    lr: float
    steps: int
    batch: int = 32
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)


def mlp_task(steps: int) -> Task:
    gen = torch.Generator().manual_seed(0)
    protos = torch.randn(10, 64, generator=gen)
    y = torch.randint(0, 10, (1800,), generator=gen)
    x = protos[y] + 1.6 * torch.randn(1800, 64, generator=gen)

    def model() -> torch.nn.Module:
        torch.manual_seed(1)
        return torch.nn.Sequential(
            torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
        )

    train = Samples(x[:1500], y[:1500])
    return Task("mlp", train, (x[1500:], y[1500:]), 10, model, 2e-3, steps, ranges={"1": (0, 9)})


class CharLM(torch.nn.Module):
    def __init__(self, vocab: int = 128, d: int = 64, context: int = 32) -> None:
        super().__init__()
        self.emb, self.pos = (
            torch.nn.Embedding(vocab, d),
            torch.nn.Parameter(torch.zeros(context, d)),
        )
        layer = torch.nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True)
        self.body = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, vocab)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(context))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x) + self.pos[: x.shape[1]]
        return self.head(self.body(h, mask=self.mask[: x.shape[1], : x.shape[1]], is_causal=True))


def lm_task(steps: int, context: int = 32) -> Task:
    root = Path(__file__).resolve().parents[1] / "datacheck"
    text = "".join(p.read_text() for p in sorted(root.rglob("*.py")))
    ids = torch.tensor([min(ord(c), 127) for c in text[:400_000]], dtype=torch.long)
    n = (len(ids) - 1) // context
    x = ids[: n * context].reshape(n, context)
    y = ids[1 : n * context + 1].reshape(n, context)
    cut = int(0.9 * n)

    def model() -> torch.nn.Module:
        torch.manual_seed(1)
        return CharLM(context=context)

    ranges = {"0": (0, 127), "1": (0, 127)}
    return Task(
        "lm", Samples(x[:cut], y[:cut]), (x[cut:], y[cut:]), 128, model, 3e-3, steps, ranges=ranges
    )


def per_sample_loss(task: Task, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if task.name == "lm":
        flat = F.cross_entropy(logits.reshape(-1, task.classes), y.reshape(-1), reduction="none")
        return flat.reshape(y.shape).mean(dim=1)
    return F.cross_entropy(logits, y, reduction="none")


def evaluate(task: Task, model: torch.nn.Module) -> tuple[float, float]:
    x, y = task.test
    with torch.no_grad():
        logits = model(x)
        loss = per_sample_loss(task, logits.float(), y).mean().item()
        acc = (logits.argmax(-1) == y).float().mean().item()
    return loss, acc


# -- faults ------------------------------------------------------------------------------------


def plant(task: Task, scenario: str) -> set[int]:
    """Damage 2 % of the training samples (poison, fp16); returns their indices."""
    if scenario not in ("poison", "fp16"):
        return set()
    gen = torch.Generator().manual_seed(7)
    n = len(task.train)
    bad = torch.randperm(n, generator=gen)[: n // 50].tolist()
    for k, i in enumerate(bad):
        x, y = task.train.x[i].clone(), task.train.y[i].clone()
        if scenario == "fp16":
            x = x.sign() * 40000.0  # fits fp16 (under 65504) but overflows in the first layer
        elif task.name == "lm":
            x[k % len(x)] = 500  # an id beyond the vocabulary
        elif k % 4 == 3:
            y = torch.tensor(10 + k % 5)  # a label beyond the classes
        else:
            x[k % len(x)] = (math.nan, math.inf, 1e30)[k % 4 % 3]
        task.train.poison[i] = (x, y)
    return set(bad)


def lr_multiplier(scenario: str, step: int, steps: int) -> float:
    if scenario == "lr_base" and step >= steps // 2:
        return 100.0
    if scenario == "lr_window" and steps * 2 // 5 <= step < steps * 2 // 5 + 20:
        return 100.0
    return 1.0


def schedule(step: int, steps: int, warmup: int = 30) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def scramble(task: Task, scenario: str, step: int, y: torch.Tensor) -> torch.Tensor:
    start = task.steps * 2 // 5
    if scenario != "shuffled" or not start <= step < start + 50:
        return y
    gen = torch.Generator().manual_seed(step)
    if task.name == "lm":
        return torch.randint(0, task.classes, y.shape, generator=gen)
    return y[torch.randperm(len(y), generator=gen)]


# -- one run -------------------------------------------------------------------------------------


def run(task: Task, scenario: str, way: str, folder: Path) -> dict[str, Any]:
    poisoned = plant(task, scenario)
    model = task.model()
    opt = torch.optim.AdamW(model.parameters(), lr=task.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: schedule(s, task.steps) * lr_multiplier(scenario, s, task.steps)
    )
    fp16 = scenario == "fp16"
    scaler = torch.amp.GradScaler("cpu", enabled=fp16)
    sampler = RandomSampler(task.train, generator=torch.Generator().manual_seed(3))
    loader: Any = DataLoader(task.train, batch_size=task.batch, sampler=sampler, drop_last=True)
    guard = None
    if way == "guard":
        loader = GuardedLoader(loader, quarantine=str(folder), ranges=task.ranges)
        seam = loader if hasattr(loader, "exclude") else None
        guard = TrainingGuard(
            model, opt, scaler, scheduler=sched, loader=seam, quarantine=str(folder)
        )
    out = {"lost": 0, "stopped": None, "crashed": None, "rollbacks": 0, "lr_cuts": 0, "skips": 0}
    step = 0
    try:
        while step < task.steps:
            for x, y, idx in loader:
                if step >= task.steps:
                    break
                y = scramble(task, scenario, step, y)
                with torch.autocast("cpu", dtype=torch.float16, enabled=fp16):
                    logits = model(x)
                per_sample = per_sample_loss(task, logits.float(), y)
                loss = per_sample.mean()
                stepped = update(way, guard, model, opt, scaler, loss, idx, per_sample, out)
                out["lost"] += not stepped
                sched.step()
                opt.zero_grad(set_to_none=True)
                step += 1
    except TrainingStopped:
        out["stopped"] = step
    except (IndexError, RuntimeError) as exc:  # an out-of-range label or id
        out["crashed"] = f"step {step}: {type(exc).__name__}"
    if guard is not None:
        guard.close()
    loss_v, acc = evaluate(task, model) if out["crashed"] is None else (math.nan, math.nan)
    named = set(read_quarantine(folder)["index"].tolist()) if way == "guard" else set()
    task.train.poison.clear()
    return {**out, "loss": loss_v, "acc": acc, "clean_quarantined": len(named - poisoned)}


def update(way, guard, model, opt, scaler, loss, idx, per_sample, out) -> bool:
    if way == "guard":
        scaler.scale(loss).backward()
        res = guard.step(loss, indices=idx.tolist(), sample_losses=per_sample.detach())
        out["rollbacks"] += "rollback" in res.events
        out["lr_cuts"] += "lr_reduced" in res.events
        out["skips"] += res.action.value == "skip"
        return res.action.stepped
    if way == "clip" and not torch.isfinite(loss):
        return False
    scaler.scale(loss).backward()
    if way == "none":
        scaler.step(opt)
        scaler.update()
        return bool(torch.isfinite(loss))
    scaler.unscale_(opt)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if not torch.isfinite(norm):
        scaler.update()
        return False
    scaler.step(opt)
    scaler.update()
    return True


# -- the table -----------------------------------------------------------------------------------


def scenarios_for(task: Task, small: bool) -> list[str]:
    chosen = ["clean", "poison", "lr_base", "shuffled"] if small else list(SCENARIOS)
    return [s for s in chosen if not (s == "fp16" and task.name != "mlp")]


def measure(small: bool = False) -> list[dict[str, Any]]:
    tasks = [mlp_task(300 if small else 900)] + ([] if small else [lm_task(600)])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in tasks:
            for scenario in scenarios_for(task, small):
                for way in WAYS:
                    folder = Path(tmp) / f"{task.name}-{scenario}-{way}"
                    rows.append(
                        {
                            "task": task.name,
                            "scenario": scenario,
                            "way": way,
                            **run(task, scenario, way, folder),
                        }
                    )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--small", action="store_true", help="the quick version the tests run")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rows = measure(a.small)
    cols = [
        "task",
        "scenario",
        "way",
        "loss",
        "acc",
        "lost",
        "skips",
        "rollbacks",
        "lr_cuts",
        "stopped",
        "crashed",
        "clean_quarantined",
    ]
    table = Table(
        cols,
        [[r[c] if r[c] is not None else "" for c in cols] for r in rows],
        title="TrainingGuard scenarios (CPU)",
    )
    write_results(
        "guard-scenarios" + ("-small" if a.small else ""),
        {"rows": rows},
        table=table,
        params=vars(a),
    )


if __name__ == "__main__":
    main()
