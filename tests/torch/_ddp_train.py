"""Two-process training through a GuardedLoader under each trainer, run as a real script.

``python -m tests.torch._ddp_train KIND OUT`` (``plain``, ``accelerate`` and ``hf`` under torchrun;
``lightning`` launches its second process itself, as ``strategy="ddp"`` does from a script).
Each rank writes ``OUT/rank{r}.json``: the sample ids it trained on, per epoch (``plain``
runs: then the ids a new loader over the same quarantine yields, the next run), and its
loader's batches per epoch. The quarantine goes to ``OUT/q``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from datacheck.torch import GuardedLoader

N, BATCH, EPOCHS = 48, 4, 2
NAN, BROKEN, HUGE = 5, 17, 30
"""A NaN input, a sample whose loading raises, an input of 1e30 (beyond fp16)."""
BAD = {NAN, BROKEN, HUGE}


class Planted(Dataset):
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict[str, torch.Tensor | int]:
        if i == BROKEN:
            raise OSError(f"[Errno 5] Input/output error: '/data/{i}.npy'")
        x = torch.full((8,), float(i) / N)
        x[2] = float("nan") if i == NAN else 1e30 if i == HUGE else x[2]
        return {"x": x, "i": i}


def _loader(out: Path, sampler: bool = False) -> GuardedLoader:
    ds = Planted()
    if sampler:  # the user's own DistributedSampler, whose set_epoch nobody calls
        dl = DataLoader(ds, batch_size=BATCH, sampler=DistributedSampler(ds, shuffle=True))
    else:  # shuffle=True: no sampler of the ranks' own
        dl = DataLoader(ds, batch_size=BATCH, shuffle=True)
    return GuardedLoader(dl, **_options(out))


def _options(out: Path) -> dict[str, Any]:
    """What every run guards with."""
    return {"quarantine": str(out / "q"), "fits": "fp16", "max_load_errors": None}


def _write(out: Path, rank: int, epochs: list[list[int]], lengths: list[int]) -> None:
    record = {"epochs": epochs, "lengths": lengths}
    (out / f"rank{rank}.json").write_text(json.dumps(record))


def plain(out: Path, sampler: bool) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = _loader(out, sampler)
    epochs, lengths = [], []
    for _ in range(EPOCHS):
        seen: list[int] = []
        lengths.append(len(loader))
        for batch in loader:
            loss = model(batch["x"]).pow(2).mean()
            loss.backward()  # the gradient all-reduce: hangs if the ranks' steps differ
            opt.step()
            opt.zero_grad()
            seen += batch["i"].tolist()
        epochs.append(seen)
    dist.barrier()  # every rank's quarantine written
    again = _loader(out, sampler)  # the next run: a new loader reading the quarantine
    rerun = [i for batch in again for i in batch["i"].tolist()]
    _write(out, dist.get_rank(), [*epochs, rerun], lengths)
    dist.destroy_process_group()


def accelerate(out: Path) -> None:
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt, loader = acc.prepare(model, opt, _loader(out))
    assert isinstance(loader, GuardedLoader)  # accelerate passes it through
    epochs, lengths = [], []
    for _ in range(EPOCHS):
        seen: list[int] = []
        lengths.append(len(loader))
        for batch in loader:
            loss = model(batch["x"]).pow(2).mean()
            acc.backward(loss)
            opt.step()
            opt.zero_grad()
            seen += batch["i"].tolist()
        epochs.append(seen)
    _write(out, acc.process_index, epochs, lengths)


def lightning(out: Path, callback: bool = False) -> None:
    """``callback``: a plain DataLoader and GuardCallback, which wraps it once Lightning has put
    its DistributedSampler in (and sets that sampler's epoch itself); else a GuardedLoader."""
    import lightning.pytorch as pl

    from datacheck.torch.integrations.lightning import GuardCallback

    class Linear(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)
            self.epochs: list[list[int]] = []

        def on_train_epoch_start(self) -> None:
            self.epochs.append([])

        def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
            self.epochs[-1] += batch["i"].tolist()
            return self.net(batch["x"]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    model = Linear()
    trainer = pl.Trainer(
        strategy="ddp",
        accelerator="cpu",
        devices=2,
        max_epochs=EPOCHS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[GuardCallback(loader_options=_options(out))] if callback else [],
    )
    plain = DataLoader(Planted(), batch_size=BATCH, shuffle=True)
    trainer.fit(model, plain if callback else _loader(out))
    _write(out, trainer.global_rank, model.epochs, [int(trainer.num_training_batches)] * EPOCHS)


def hf(out: Path) -> None:
    import transformers

    from datacheck.torch.integrations.hf import GuardedTrainer

    epochs: list[list[int]] = []

    class Linear(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def forward(self, x: torch.Tensor, i: torch.Tensor) -> dict[str, torch.Tensor]:
            epochs[-1] += i.tolist()
            return {"loss": self.net(x).pow(2).mean()}

    class Epochs(transformers.TrainerCallback):
        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            epochs.append([])

    args = transformers.TrainingArguments(
        output_dir=str(out / "hf"),
        per_device_train_batch_size=BATCH,
        num_train_epochs=EPOCHS,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        ddp_backend="gloo",
        disable_tqdm=True,
    )
    trainer = GuardedTrainer(
        model=Linear(),
        args=args,
        train_dataset=Planted(),
        callbacks=[Epochs()],
        loader_options=_options(out),
    )
    trainer.train()
    assert trainer.guarded_loader is not None
    lengths = [len(trainer.guarded_loader)] * EPOCHS
    _write(out, trainer.args.process_index, epochs, lengths)


if __name__ == "__main__":
    kind, where = sys.argv[1], Path(sys.argv[2])
    if kind.startswith("lightning"):
        lightning(where, callback=kind == "lightning-callback")
    elif kind == "accelerate":
        accelerate(where)
    elif kind == "hf":
        hf(where)
    else:
        plain(where, sampler=kind == "plain-sampler")
