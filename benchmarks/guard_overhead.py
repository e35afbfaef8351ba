"""TrainingGuard overhead per step vs plain ``clip_grad_norm_ + optimizer.step()``.

Run: ``python benchmarks/guard_overhead.py`` (CPU) or ``--device cuda`` on a GPU machine.
Prints one JSON object: median step time for each variant, the overhead in percent, and on
CUDA the host synchronisations per step counted with ``torch.cuda.set_sync_debug_mode``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

import torch

from datacheck.torch import TrainingGuard


def _setup(device: str, width: int, depth: int, seed: int = 0):
    torch.manual_seed(seed)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return model, opt


def _run(
    variant: str, device: str, steps: int, width: int, depth: int, batch: int
) -> tuple[float, float]:
    """Median seconds per step, and host syncs per step (CUDA only, else NaN)."""
    model, opt = _setup(device, width, depth)
    guard = (
        TrainingGuard(model, opt, clip_norm=1.0, checkpoint_every=0) if variant == "guard" else None
    )
    x = torch.randn(batch, width, device=device)
    y = torch.randn(batch, 1, device=device)
    times, syncs = [], 0
    for i in range(steps + 10):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if device == "cuda":
                torch.cuda.set_sync_debug_mode("warn")
            if guard is not None:
                guard.step(loss)
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
                opt.step()
            if device == "cuda":
                torch.cuda.set_sync_debug_mode("default")
                torch.cuda.synchronize()
        if i >= 10:
            times.append(time.perf_counter() - t0)
            syncs += sum("synchroniz" in str(w.message) for w in caught)
        opt.zero_grad(set_to_none=True)
    return statistics.median(times), (syncs / steps if device == "cuda" else float("nan"))


def _full_step(variant: str, device: str, steps: int, width: int, depth: int, batch: int) -> float:
    """Median seconds for a whole training step (forward, backward, update)."""
    model, opt = _setup(device, width, depth)
    guard = (
        TrainingGuard(model, opt, clip_norm=1.0, checkpoint_every=0) if variant == "guard" else None
    )
    x = torch.randn(batch, width, device=device)
    y = torch.randn(batch, 1, device=device)
    times = []
    for i in range(steps + 10):
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if guard is not None:
            guard.step(loss)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
            opt.step()
            loss.item()  # plain loops read the loss for logging; the guard reads it in its one sync
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        if i >= 10:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5, help="alternating plain/guard runs")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (CPU)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dims = (a.device, a.steps, a.width, a.depth, a.batch)
    full: dict[str, list[float]] = {"plain": [], "guard": []}
    upd: dict[str, list[float]] = {"plain": [], "guard": []}
    syncs: dict[str, float] = {}
    for _ in range(a.repeats):
        for variant in ("plain", "guard"):
            full[variant].append(_full_step(variant, *dims))
            seconds, syncs[variant] = _run(variant, *dims)
            upd[variant].append(seconds)
    ms = {v: 1e3 * statistics.median(t) for v, t in full.items()}
    print(json.dumps({
        "device": a.device, "width": a.width, "depth": a.depth, "batch": a.batch,
        "steps": a.steps, "repeats": a.repeats, "threads": torch.get_num_threads(),
        "full_step_ms": ms,
        "overhead_pct_of_full_step": 100 * (ms["guard"] - ms["plain"]) / ms["plain"],
        "update_only_ms": {v: 1e3 * statistics.median(t) for v, t in upd.items()},
        "host_syncs_per_step": syncs,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
