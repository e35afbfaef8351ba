"""TrainingGuard against skip-and-clip and plain training on a broad scenario suite (issue 28).

Run: ``python benchmarks/guard_scenarios.py --seeds 3`` (CPU; every scenario, family and seed:
about 400 runs of a few seconds each), or a piece of it with ``--only SCENARIO,...`` and/or
``--families mlp,lm``; ``--scale 0.5`` halves every run.  Four model families
(``_guard_tasks``: an MLP and a small CNN on scikit-learn's bundled digits, a character GRU
language model, a tabular MLP regressor) and 22 scenarios (``_guard_faults``): legitimate
changes a guard must leave alone (curricula, class-incremental stages, sequence-length growth,
step / cosine-restart / warm-up schedules, small batches, label noise, rare-class replay) and
faults (NaN/Inf and 1e30 samples, a NaN micro-batch under gradient accumulation, a stuck
loader, all-zero batches, shuffled labels, LR typos x10/x100, LR creep, OneCycleLR past its
stable LR, fp16 overflow, DDP with one bad rank over gloo).  Each is trained three ways from
the same seed and the same batches:

- ``none``: ``loss.backward(); optimizer.step()``;
- ``clip``: skip-and-clip, today's practice: skip a non-finite loss, ``clip_grad_norm_(1.0)``,
  skip a non-finite norm;
- ``guard``: ``GuardedLoader`` + ``TrainingGuard`` with their defaults.

Per run: final held-out loss (cross-entropy in nats; MSE for the regressor), accuracy, steps
lost, stops, crashes, rollbacks, LR cuts, probes, and clean samples quarantined (any sample the
scenario did not damage).  ``--report`` prints the per-scenario comparison (mean and spread over
seeds) from the results files, the table in the docs.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _guard_ddp import measure_ddp
from _guard_faults import SCENARIOS, Scenario, base_schedule
from _guard_holdout import HELD_OUT
from _guard_tasks import BUILDERS, FAMILIES, Task, collate, task
from _guard_train import WAYS, clip_update, count_events, schedule_step
from _harness import RESULTS, Table, write_results
from torch.utils.data import DataLoader, Sampler

from datacheck.torch import GuardedLoader, TrainingGuard, TrainingStopped, read_quarantine

TOLERANCE = (0.05, 0.01)
"""Worse than skip-and-clip means a held-out loss above clip x (1 + 5 %) + 0.01."""


class StepBatches(Sampler[list[int]]):
    """Each step's batch of indices, drawn from the scenario's pool (the same for every way)."""

    def __init__(self, task: Task, scenario: Scenario, batch: int) -> None:
        self.task, self.scenario, self.batch = task, scenario, batch

    def __len__(self) -> int:
        return self.task.steps

    def __iter__(self):
        gen = torch.Generator().manual_seed(3 + self.task.seed)
        t, sc, n = self.task, self.scenario, len(self.task.train)
        stale = None
        for step in range(t.steps):
            pool = sc.pool(t, step) if sc.pool else None
            replay = sc.replay(t, step) if sc.replay else None
            if replay is not None:
                pick = replay[torch.randint(0, len(replay), (self.batch,), generator=gen)]
            elif pool is not None:
                pick = pool[torch.randint(0, len(pool), (self.batch,), generator=gen)]
            else:
                pick = torch.randint(0, n, (self.batch,), generator=gen)
            if sc.stale and sc.stale[0] * t.steps <= step < sum(sc.stale) * t.steps:
                stale = pick if stale is None else stale
                pick = stale
            yield pick.tolist()


def _scheduler(task: Task, sc: Scenario, opt: Any) -> Any:
    if sc.schedule is not None:
        return sc.schedule(opt, task)
    factor = sc.lr or (lambda s, n: 1.0)
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: base_schedule(s, task.steps) * factor(s, task.steps)
    )


def run(task: Task, sc: Scenario, way: str, folder: Path) -> dict[str, Any]:
    """One training run; returns its results."""
    gen = torch.Generator().manual_seed(100 + task.seed)
    if sc.setup:
        sc.setup(task, gen)
    planted = sc.plant(task, gen) if sc.plant else set()
    model = task.model()
    opt = task.optimizer(model)
    sched = _scheduler(task, sc, opt)
    scaler = torch.amp.GradScaler("cpu", enabled=sc.fp16)
    sampler = StepBatches(task, sc, (sc.batch or task.batch) * sc.micro)
    loader: Any = DataLoader(task.train, batch_sampler=sampler, collate_fn=collate)
    guard = None
    if way == "guard":
        loader = GuardedLoader(loader, quarantine=str(folder))
        guard = TrainingGuard(
            model, opt, scaler, scheduler=sched, loader=loader, quarantine=str(folder)
        )
    keys = ("lost", "rollbacks", "lr_cuts", "probes", "fallback", "skips")
    out: dict[str, Any] = dict.fromkeys(keys, 0) | {"stopped": None, "crashed": None}
    after_gen = torch.Generator().manual_seed(200 + task.seed)
    step = 0
    start = time.perf_counter()
    try:
        for x, y, idx in loader:
            if sc.after:
                x, y = sc.after(task, step, x, y, after_gen)
            stepped = _train_step(task, sc, way, guard, model, opt, scaler, x, y, idx, out)
            out["lost"] += not stepped
            schedule_step(sched)
            opt.zero_grad(set_to_none=True)
            step += 1
    except TrainingStopped:
        out["stopped"] = step
    except (IndexError, RuntimeError) as exc:
        out["crashed"] = f"step {step}: {type(exc).__name__}"
    if guard is not None:
        guard.close()
        loader.close()
    loss, acc = task.evaluate(model)
    named = set(read_quarantine(folder)["index"].tolist()) if folder.exists() else set()
    task.train.poison.clear()
    return {
        **out,
        "loss": loss,
        "acc": acc,
        "quarantined": len(named),
        "clean_quarantined": len(named - planted),
        "seconds": round(time.perf_counter() - start, 2),
    }


def _train_step(task, sc, way, guard, model, opt, scaler, x, y, idx, out) -> bool:
    parts = max(1, sc.micro)
    size = -(-len(x) // parts)
    ok, losses, samples = True, [], []
    for k in range(parts):
        xs, ys, ids = x[k * size : (k + 1) * size], y[k * size : (k + 1) * size], idx[k * size :]
        if not len(xs):
            continue
        with torch.autocast("cpu", dtype=torch.float16, enabled=sc.fp16):
            out_ = model(xs)
        per_sample = task.per_sample(out_, ys)
        loss = per_sample.mean() / (1 if guard is not None else parts)
        if guard is not None:
            guard.backward(
                per_sample.mean(),
                indices=ids[: len(xs)].tolist(),
                sample_losses=per_sample.detach(),
            )
            continue
        ok = ok and bool(torch.isfinite(loss))
        if way == "clip" and not ok:
            continue
        scaler.scale(loss).backward()
        losses.append(loss.detach())
        samples.append(per_sample)
    if guard is not None:
        res = guard.step()
        count_events(out, res)
        return res.action.stepped
    total = torch.stack(losses).sum() if losses else torch.tensor(math.nan)
    return clip_update(way, model, opt, scaler, total, ok)


# -- the suite -------------------------------------------------------------------------------


def measure(
    scenarios: tuple[str, ...] = (),
    families: tuple[str, ...] = (),
    seeds: tuple[int, ...] = (0,),
    scale: float = 1.0,
    suite: dict[str, Scenario] = SCENARIOS,
) -> list[dict[str, Any]]:
    """Rows of (scenario, family, way, seed, results) for the chosen part of ``suite``."""
    rows = []
    for name, sc in suite.items():
        if scenarios and name not in scenarios:
            continue
        for family in sc.families:
            if families and family not in families:
                continue
            for seed in seeds:
                head = {"scenario": name, "kind": sc.kind, "family": family, "seed": seed}
                if sc.ddp:
                    steps = task(family, seed, scale).steps
                    rows += [{**head, **r} for r in measure_ddp(steps, seed)]
                    continue
                with tempfile.TemporaryDirectory() as tmp:
                    for way in WAYS:
                        t = task(family, seed, scale)
                        rows.append({**head, "way": way, **run(t, sc, way, Path(tmp, way))})
    return rows


def worse(guard: dict[str, Any], clip: dict[str, Any]) -> bool:
    """The guard ended worse than skip-and-clip (beyond the tolerance), or stopped where it
    finished."""
    if clip["crashed"] is not None or not math.isfinite(clip["loss"]):
        return guard["crashed"] is not None or guard["stopped"] is not None
    if guard["stopped"] is not None or guard["crashed"] is not None:
        return True
    rel, floor = TOLERANCE
    return not guard["loss"] <= clip["loss"] * (1 + rel) + floor


def better(guard: dict[str, Any], clip: dict[str, Any]) -> bool:
    if clip["crashed"] is not None or not math.isfinite(clip["loss"]):
        return guard["crashed"] is None and math.isfinite(guard["loss"])
    return guard["loss"] < clip["loss"] * (1 - TOLERANCE[0]) - TOLERANCE[1]


def _stats(values: list[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "nan"
    mean = sum(finite) / len(finite)
    spread = (max(finite) - min(finite)) / 2
    nan = f" ({len(values) - len(finite)} nan)" if len(finite) < len(values) else ""
    return f"{mean:.4g} ± {spread:.2g}{nan}"


def summarize(rows: list[dict[str, Any]]) -> tuple[Table, dict[str, Any]]:
    """One line per scenario and family: each way's held-out loss over seeds (mean ± half the
    range), steps lost, stops, clean samples quarantined, and the guard against skip-and-clip."""
    groups: dict[tuple[str, str], dict[str, dict[int, dict[str, Any]]]] = {}
    for r in rows:
        groups.setdefault((r["scenario"], r["family"]), {}).setdefault(r["way"], {})[r["seed"]] = r
    out_rows, totals = [], {"worse": 0, "better": 0, "stops": 0, "clean_quarantined": 0, "runs": 0}
    for (scenario, family), ways in groups.items():
        seeds = sorted(ways.get("guard", {}))
        pairs = [(ways["guard"][s], ways["clip"][s]) for s in seeds if s in ways.get("clip", {})]
        n_worse = sum(worse(g, c) for g, c in pairs)
        n_better = sum(better(g, c) for g, c in pairs)
        stops = sum(g["stopped"] is not None for g, _ in pairs)
        clean = sum(g["clean_quarantined"] for g, _ in pairs)
        totals["worse"] += n_worse
        totals["better"] += n_better
        totals["stops"] += stops
        totals["clean_quarantined"] += clean
        totals["runs"] += len(pairs)
        gaps = [
            (g["loss"] - c["loss"]) / c["loss"]
            for g, c in pairs
            if math.isfinite(g["loss"]) and math.isfinite(c["loss"]) and c["loss"] > 0
        ]
        cell = {
            w: _stats([ways[w][s]["loss"] for s in seeds if s in ways.get(w, {})]) for w in WAYS
        }
        crashed = {
            w: sum(ways[w][s]["crashed"] is not None for s in seeds if s in ways.get(w, {}))
            for w in WAYS
        }
        lost = {
            w: _stats([float(ways[w][s]["lost"]) for s in seeds if s in ways.get(w, {})])
            for w in ("clip", "guard")
        }
        out_rows.append(
            [
                scenario,
                family,
                len(pairs),
                cell["none"] + (f" [{crashed['none']} crashed]" if crashed["none"] else ""),
                cell["clip"] + (f" [{crashed['clip']} crashed]" if crashed["clip"] else ""),
                cell["guard"],
                f"{max(gaps):+.1%}" if gaps else "",
                lost["clip"],
                lost["guard"],
                stops,
                clean,
                sum(g["rollbacks"] for g, _ in pairs),
                sum(g["lr_cuts"] for g, _ in pairs),
                f"{n_better}/{n_worse}",
            ]
        )
    cols = [
        "scenario",
        "family",
        "seeds",
        "none",
        "clip",
        "guard",
        "worst gap",
        "lost clip",
        "lost guard",
        "stops",
        "clean quarantined",
        "rollbacks",
        "lr cuts",
        "better/worse",
    ]
    return Table(
        cols, out_rows, title="TrainingGuard suite: held-out loss (mean ± half range)"
    ), totals


def _load(names: list[str], held_out: bool = False) -> list[dict[str, Any]]:
    rows = []
    pattern = "guard-held-out*.json" if held_out else "guard-suite*.json"
    for path in sorted(RESULTS.glob(pattern)) if not names else map(Path, names):
        rows += json.loads(Path(path).read_text())["results"]["rows"]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (from --first-seed)")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--only", default="", help="comma-separated scenarios (default: all)")
    ap.add_argument(
        "--families", default="", help="comma-separated families: " + ",".join(FAMILIES)
    )
    ap.add_argument("--scale", type=float, default=1.0, help="run length factor (0.5: half)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--name", default="", help="results file suffix (guard-suite-NAME.json)")
    ap.add_argument("--report", action="store_true", help="summarize the guard-suite*.json files")
    ap.add_argument(
        "--held-out", action="store_true", help="the held-out scenarios (_guard_holdout) instead"
    )
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.report:
        table, totals = summarize(_load([], a.held_out))
        print(table.markdown())
        print(json.dumps(totals))
        return
    suite = HELD_OUT if a.held_out else SCENARIOS
    only = tuple(x for x in a.only.split(",") if x)
    fams = tuple(x for x in a.families.split(",") if x)
    unknown = [s for s in only if s not in suite] + [f for f in fams if f not in BUILDERS]
    if unknown:
        raise SystemExit(f"guard_scenarios: unknown scenario/family {unknown}")
    rows = measure(only, fams, tuple(range(a.first_seed, a.first_seed + a.seeds)), a.scale, suite)
    table, totals = summarize(rows)
    name = ("guard-held-out" if a.held_out else "guard-suite") + (f"-{a.name}" if a.name else "")
    write_results(name, {"rows": rows, "totals": totals}, table=table, params=vars(a))
    print(json.dumps(totals))


if __name__ == "__main__":
    main()
