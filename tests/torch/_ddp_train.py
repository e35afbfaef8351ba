"""Two-process training through a GuardedLoader under each trainer, run as a real script.

``python -m tests.torch._ddp_train KIND OUT`` (``plain``, ``accelerate`` and ``hf`` under torchrun;
``lightning`` launches its second process itself, as ``strategy="ddp"`` does from a script).
The samples are ``.npy`` files the test wrote with numpy in ``OUT/data`` (:func:`write_files`),
listed as torchvision's ``ImageFolder`` lists its images (``samples``). Each rank writes
``OUT/rank{r}.json``: the sample ids it trained on, per epoch (``plain`` runs: then the ids a new
loader over the same quarantine yields, the next run), its loader's batches per epoch, and the
ids of the next run (``grown``): a new loader, and a new fit under the trainers, over the same
quarantine, on the files listed in another order with new ones among them (every index moves).
The quarantine goes to ``OUT/q``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from datacheck.torch import GuardedLoader

N, BATCH, EPOCHS = 48, 4, 2
NAN, BROKEN, HUGE = 5, 17, 30
"""A NaN input, a file cut short (loading raises), an input of 1e30 (beyond fp16)."""
BAD = {NAN, BROKEN, HUGE}
GROWN = 8
"""New files in the next run (ids N..N+GROWN-1)."""


def write_files(folder: Path) -> None:
    """``{i:03d}.npy`` for every id of both runs, written by numpy; BROKEN's is cut short."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(N + GROWN):
        x = np.full(8, i / N, np.float32)
        x[2] = np.nan if i == NAN else 1e30 if i == HUGE else x[2]
        np.save(folder / f"{i:03d}.npy", x)
        if i == BROKEN:
            path = folder / f"{i:03d}.npy"
            path.write_bytes(path.read_bytes()[:100])


def listed(out: Path, grown: bool = False) -> list[int]:
    """The ids a run lists: 0..N-1; the next run's: all of them, reversed."""
    return list(range(N + GROWN))[::-1] if grown else list(range(N))


class Planted(Dataset):
    """The files of ``ids``, listed as ``ImageFolder`` does (``samples``: (path, class))."""

    def __init__(self, out: Path, grown: bool = False) -> None:
        self.samples = [(str(out / "data" / f"{i:03d}.npy"), 0) for i in listed(out, grown)]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, k: int) -> dict[str, torch.Tensor | int]:
        path = self.samples[k][0]
        return {"x": torch.from_numpy(np.load(path)), "i": int(Path(path).stem)}


def _loader(out: Path, sampler: bool = False, grown: bool = False) -> GuardedLoader:
    ds = Planted(out, grown)
    if sampler:  # the user's own DistributedSampler, whose set_epoch nobody calls
        dl = DataLoader(ds, batch_size=BATCH, sampler=DistributedSampler(ds, shuffle=True))
    else:  # shuffle=True: no sampler of the ranks' own
        dl = DataLoader(ds, batch_size=BATCH, shuffle=True)
    return GuardedLoader(dl, **_options(out))


def _options(out: Path) -> dict[str, Any]:
    """What every run guards with."""
    return {"quarantine": str(out / "q"), "fits": "fp16", "max_load_errors": None}


def _write(
    out: Path, rank: int, epochs: list[list[int]], lengths: list[int], grown: list[int]
) -> None:
    record = {"epochs": epochs, "lengths": lengths, "grown": grown}
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
    grown = [i for batch in _loader(out, sampler, grown=True) for i in batch["i"].tolist()]
    _write(out, dist.get_rank(), [*epochs, rerun], lengths, grown)
    dist.destroy_process_group()


def accelerate(out: Path) -> None:
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt, loader = acc.prepare(model, opt, _loader(out))
    assert isinstance(loader, GuardedLoader)  # accelerate passes it through

    def train(loader: Any, epochs: int) -> tuple[list[list[int]], list[int]]:
        seen: list[list[int]] = []
        lengths = []
        for _ in range(epochs):
            seen.append([])
            lengths.append(len(loader))
            for batch in loader:
                loss = model(batch["x"]).pow(2).mean()
                acc.backward(loss)
                opt.step()
                opt.zero_grad()
                seen[-1] += batch["i"].tolist()
        return seen, lengths

    epochs, lengths = train(loader, EPOCHS)
    acc.wait_for_everyone()  # every rank's quarantine written
    grown, _ = train(acc.prepare(_loader(out, grown=True)), 1)
    _write(out, acc.process_index, epochs, lengths, grown[0])


def lightning(out: Path, callback: bool = False) -> None:
    """``callback``: a plain DataLoader and GuardCallback, which wraps it once Lightning has put
    its DistributedSampler in (and sets that sampler's epoch itself); else a GuardedLoader. The
    next run is a second fit of a new Trainer."""
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

    def fit(model: Linear, epochs: int, grown: bool) -> Any:
        trainer = pl.Trainer(
            strategy="ddp",
            accelerator="cpu",
            devices=2,
            max_epochs=epochs,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[GuardCallback(loader_options=_options(out))] if callback else [],
        )
        plain = DataLoader(Planted(out, grown), batch_size=BATCH, shuffle=True)
        trainer.fit(model, plain if callback else _loader(out, grown=grown))
        return trainer

    model = Linear()
    trainer = fit(model, EPOCHS, False)
    lengths = [int(trainer.num_training_batches)] * EPOCHS
    trainer.strategy.barrier()  # every rank's quarantine written
    fit(model, 1, True)
    _write(out, trainer.global_rank, model.epochs[:EPOCHS], lengths, model.epochs[EPOCHS])


def hf(out: Path) -> None:
    """GuardedTrainer on a tiny BERT built from a config (the samples are its input
    embeddings); the next run is a new GuardedTrainer."""
    import transformers

    from datacheck.torch.integrations.hf import GuardedTrainer

    epochs: list[list[int]] = []

    class TinyBert(transformers.BertForSequenceClassification):
        def forward(self, x: torch.Tensor, i: torch.Tensor) -> Any:  # type: ignore[override]
            epochs[-1] += i.tolist()
            embeds = x.reshape(len(x), 1, 8)  # a sequence of one 8-wide embedding
            return super().forward(inputs_embeds=embeds, labels=x[:, 0])

    config = transformers.BertConfig(
        vocab_size=8,
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=4,
        num_labels=1,
        problem_type="regression",
    )

    class Epochs(transformers.TrainerCallback):
        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            epochs.append([])

    def train(n: int, grown: bool) -> GuardedTrainer:
        args = transformers.TrainingArguments(
            output_dir=str(out / "hf"),
            per_device_train_batch_size=BATCH,
            num_train_epochs=n,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            use_cpu=True,
            ddp_backend="gloo",
            disable_tqdm=True,
        )
        trainer = GuardedTrainer(
            model=TinyBert(config),
            args=args,
            train_dataset=Planted(out, grown),
            callbacks=[Epochs()],
            loader_options=_options(out),
        )
        trainer.train()
        return trainer

    trainer = train(EPOCHS, False)
    assert trainer.guarded_loader is not None
    lengths = [len(trainer.guarded_loader)] * EPOCHS
    torch.distributed.barrier()  # every rank's quarantine written
    train(1, True)
    _write(out, trainer.args.process_index, epochs[:EPOCHS], lengths, epochs[EPOCHS])


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
