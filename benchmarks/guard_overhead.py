"""TrainingGuard overhead per step vs plain ``clip_grad_norm_ + optimizer.step()``.

Run: ``python benchmarks/guard_overhead.py`` (CPU) or ``--device cuda`` on a GPU machine.
Two identical models train side by side, one plain and one guarded, alternating step by step
so that other load on the machine hits both alike, on 8 batches in turn.  Prints one JSON
object: median step time of each, the median paired difference (the guard's work on a typical
step) and the mean paired difference (with the snapshot every ``--checkpoint-every`` steps, as
the guard's defaults take them, spread over the steps), in ms and in percent of the plain step,
and on CUDA the host synchronisations per step counted with
``torch.cuda.set_sync_debug_mode("warn")``.  For the issue's "1 % of a 100 ms step", size the
step to about 100 ms (``--width 1024 --batch 2048`` on one CPU thread) and pass ``--evidence``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from typing import Any

import torch
from _harness import Table, write_results

from datacheck.torch import TrainingGuard


def _setup(device: str, width: int, depth: int, seed: int = 0) -> tuple[torch.nn.Module, Any]:
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1)).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _update(
    guard: TrainingGuard | None,
    model: torch.nn.Module,
    opt: Any,
    loss: torch.Tensor,
    evidence: tuple[list[int], torch.Tensor] | None = None,
) -> int:
    """The update part of a step; returns the host syncs it made (CUDA only)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if torch.cuda.is_available():
            torch.cuda.set_sync_debug_mode("warn")
        try:
            if guard is not None and evidence is not None:
                guard.step(loss, indices=evidence[0], sample_losses=evidence[1])
            elif guard is not None:
                guard.step(loss)
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
                opt.step()
                loss.item()  # plain loops read the loss to log it; the guard's one read does
        finally:
            if torch.cuda.is_available():
                torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def _step(guard, model, opt, x, y, device, names=None) -> tuple[float, float, int]:
    """(whole step seconds, update seconds, host syncs in the update)."""
    _sync(device)
    t0 = time.perf_counter()
    per_sample = torch.nn.functional.mse_loss(model(x), y, reduction="none").mean(dim=1)
    loss = per_sample.mean()
    loss.backward()
    _sync(device)
    t1 = time.perf_counter()
    syncs = _update(guard, model, opt, loss, (names, per_sample.detach()) if names else None)
    opt.zero_grad(set_to_none=True)
    _sync(device)
    t2 = time.perf_counter()
    return t2 - t0, t2 - t1, syncs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (CPU)")
    ap.add_argument("--sync-every", type=int, default=0, help="the guard's sync-free mode (0: off)")
    ap.add_argument(
        "--evidence",
        action="store_true",
        help="pass indices= and sample_losses= each step (as the docs' loop does)",
    )
    ap.add_argument(
        "--checkpoint-every",
        type=int,
        default=50,
        help="the guard's snapshots (its default; 0: off)",
    )
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    runs = {}
    for variant in ("plain", "guard"):
        model, opt = _setup(a.device, a.width, a.depth)
        guard = (
            TrainingGuard(
                model,
                opt,
                clip_norm=1.0,
                checkpoint_every=a.checkpoint_every,
                sync_every=a.sync_every,
            )
            if variant == "guard"
            else None
        )
        runs[variant] = (guard, model, opt)
    xs = [torch.randn(a.batch, a.width, device=a.device) for _ in range(8)]
    ys = [torch.randn(a.batch, 1, device=a.device) for _ in range(8)]
    rec: dict[str, list[tuple[float, float, int]]] = {"plain": [], "guard": []}
    for i in range(a.steps + 20):
        names = list(range(i * a.batch, (i + 1) * a.batch)) if a.evidence else None
        for variant in ("plain", "guard") if i % 2 else ("guard", "plain"):
            out = _step(*runs[variant], xs[i % 8], ys[i % 8], a.device, names)
            if i >= 20:
                rec[variant].append(out)
    med = {
        v: {
            "step_ms": 1e3 * statistics.median(r[0] for r in rs),
            "update_ms": 1e3 * statistics.median(r[1] for r in rs),
        }
        for v, rs in rec.items()
    }
    paired = [g[0] - p[0] for g, p in zip(rec["guard"], rec["plain"], strict=True)]
    result = {
        "device": a.device,
        "width": a.width,
        "depth": a.depth,
        "batch": a.batch,
        "steps": a.steps,
        "threads": torch.get_num_threads(),
        "sync_every": a.sync_every,
        "evidence": a.evidence,
        "checkpoint_every": a.checkpoint_every,
        **med,
        "overhead_ms": 1e3 * statistics.median(paired),
        "overhead_pct": 100 * statistics.median(paired) / med["plain"]["step_ms"] * 1e3,
        "overhead_mean_ms": 1e3 * statistics.fmean(paired),
        "overhead_mean_pct": 100 * statistics.fmean(paired) / med["plain"]["step_ms"] * 1e3,
        "host_syncs_per_step": (
            {v: sum(r[2] for r in rs) / len(rs) for v, rs in rec.items()}
            if a.device == "cuda"
            else "not counted on CPU"
        ),
    }
    print(json.dumps(result, indent=1))
    table = Table(
        ["variant", "step ms (median)", "update ms (median)"],
        title=f"TrainingGuard overhead ({a.device})",
    )
    for v in ("plain", "guard"):
        table.rows.append([v, med[v]["step_ms"], med[v]["update_ms"]])
    table.rows.append(["overhead %", result["overhead_pct"], ""])
    table.rows.append(["overhead ms", result["overhead_ms"], ""])
    table.rows.append(["overhead % (mean, with snapshots)", result["overhead_mean_pct"], ""])
    name = f"guard-overhead-{a.device}" + ("-evidence" if a.evidence else "")
    write_results(name, result, table=table, params=vars(a))


if __name__ == "__main__":
    main()
