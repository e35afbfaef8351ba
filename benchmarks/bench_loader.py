"""GuardedLoader overhead: loader throughput wrapped vs bare, and the check's own cost.

    python benchmarks/bench_loader.py                 # CPU: ratio guarded / bare per batch
    python benchmarks/bench_loader.py --device cuda   # GPU: check time, bandwidth, vs a train step

Batches are 256 x 3 x 64 x 64 float32 (12.6 MB).  Two datasets:

* ``decode``: uint8 images converted and normalised per sample (a light, realistic transform);
* ``stored``: float tensors returned as they are (the worst case: collate is all the loader does).

Bare and guarded epochs alternate so that drift on a shared machine hits both alike; the ratio
is of medians.  Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from _harness import write_results
from torch.utils.data import DataLoader, Dataset

from datacheck.torch import GuardedLoader
from datacheck.torch._checks import launch_check

SHAPE = (3, 64, 64)
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class Images(Dataset):
    def __init__(self, n: int, kind: str) -> None:
        g = torch.Generator().manual_seed(0)
        self.raw = torch.randint(0, 256, (n, *SHAPE), dtype=torch.uint8, generator=g)
        self.stored = self.raw.float() / 255 if kind == "stored" else None

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, i: int) -> dict:
        if self.stored is not None:
            image = self.stored[i]
        else:
            image = (self.raw[i].float() / 255 - MEAN) / STD
        return {"image": image, "label": i}


def epoch_time(loader, device: str | None) -> tuple[float, int]:
    start = time.perf_counter()
    batches = 0
    for batch in loader:
        image = batch["image"]
        if device is not None and image.device.type != device:
            image = image.to(device, non_blocking=True)
        batches += 1
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, batches


def loader_ratio(kind: str, args: argparse.Namespace) -> dict:
    ds = Images(args.batch * args.batches, kind)
    device = None if args.device == "cpu" else args.device

    def make() -> DataLoader:
        return DataLoader(
            ds, batch_size=args.batch, num_workers=args.workers, pin_memory=device == "cuda"
        )

    guarded = GuardedLoader(make(), device=device)
    bare = make()
    epoch_time(bare, device)  # warm-up: worker start, allocator
    epoch_time(guarded, device)
    bare_t, guarded_t = [], []
    for _ in range(args.repeats):
        t, n = epoch_time(bare, device)
        bare_t.append(t / n)
        t, n = epoch_time(guarded, device)
        guarded_t.append(t / n)
    b, g = statistics.median(bare_t), statistics.median(guarded_t)
    return {
        "dataset": kind,
        "bare_ms_per_batch": round(b * 1e3, 3),
        "guarded_ms_per_batch": round(g * 1e3, 3),
        "ratio": round(g / b, 4),
        "overhead_pct": round((g / b - 1) * 100, 2),
    }


def check_cost(args: argparse.Namespace) -> dict:
    """The check alone on one collated batch: ms per batch and effective bandwidth."""
    x = torch.randn(args.batch, *SHAPE, device=args.device)
    batch = {"image": x, "label": torch.arange(args.batch, device=args.device)}

    def rules_for(key: str, dtype: torch.dtype):
        from datacheck.torch._checks import leaf_rules

        return leaf_rules(key, dtype, 65504.0, {})

    def once() -> None:
        launch_check(batch, args.batch, rules_for).result()

    for _ in range(5):
        once()
    times = []
    for _ in range(args.repeats * 10):
        start = time.perf_counter()
        once()  # result() holds the batch's one host sync, so wall time is complete
        times.append(time.perf_counter() - start)
    t = statistics.median(times)
    nbytes = x.numel() * x.element_size()
    out = {
        "batch_bytes": nbytes,
        "check_ms_per_batch": round(t * 1e3, 3),
        "effective_GBps": round(nbytes / t / 1e9, 2),
    }
    if args.device == "cuda":
        step = train_step_ms(x)
        out["train_step_ms"] = round(step * 1e3, 3)
        out["check_vs_train_step"] = round(t / step, 4)
    return out


def train_step_ms(x: torch.Tensor) -> float:
    """Median seconds of one forward/backward/step of a small conv net on the batch."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 10),
    ).to(x.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    y = torch.randint(0, 10, (x.shape[0],), device=x.device)
    times = []
    for i in range(30):
        torch.cuda.synchronize()
        start = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        torch.cuda.synchronize()
        if i >= 5:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=16, help="batches per epoch")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--repeats", type=int, default=5, help="alternating bare/guarded epochs")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: default)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    result = {
        "device": args.device,
        "batch_shape": [args.batch, *SHAPE],
        "workers": args.workers,
        "threads": torch.get_num_threads(),
        "check": check_cost(args),
        "loader": [loader_ratio(kind, args) for kind in ("decode", "stored")],
    }
    print(json.dumps(result, indent=2))
    write_results(f"loader-{args.device}", result, params=vars(args))


if __name__ == "__main__":
    main()
