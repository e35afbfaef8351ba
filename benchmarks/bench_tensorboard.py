"""``datacheck logs`` on a large TensorBoard events file: the streamed reader against the old one.

Writes one ``events.out.tfevents.*`` file with PyTorch's ``SummaryWriter`` (``--scalars``
readings, half ``train/loss`` and half ``train/grad_norm``, one step each) into a temporary
folder (deleted after), then reads it in fresh child processes, in interleaved rounds (the
fastest counts):

1. ``before``: the reader datacheck had, kept here as it was: tensorboard's
   ``EventAccumulator`` (every event parsed, every scalar a Python ``ScalarEvent``), then the
   scalars merged by step into the history's columns;
2. ``after``: :func:`datacheck.history._tensorboard.read_tensorboard` (streamed, arrays).

Each also runs once under ``tracemalloc`` (``... traced``: its peak of Python allocations
during the read, imports done before; the figure that grows with the readings; the time of
these runs is not compared).  Per variant:
wall and CPU seconds of the read (imports included), peak RSS of the child, readings kept.

    python benchmarks/bench_tensorboard.py                        # 1 M scalars -> tensorboard.json
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from _harness import Table, child_main, interleaved, run_child, write_results

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def _old_read(path: Path) -> Any:
    """datacheck's reader before the streamed one (EventAccumulator), as it was."""
    from tensorboard.backend.event_processing import event_accumulator

    from datacheck.history._table import Columns, Table, is_eval_key, norm_key
    from datacheck.history._tensorboard import event_files

    files = event_files(path)
    keep: set[str] = set()
    table = Table("tensorboard", Columns(keep), Columns(keep), counter="step")
    train: dict[int, dict[str, float]] = {}
    evals: dict[int, dict[str, float]] = {}
    for file in files:
        prefix = "" if file.parent == path or path.is_file() else file.parent.name + "_"
        acc = event_accumulator.EventAccumulator(
            str(file), size_guidance={event_accumulator.SCALARS: 0}
        )
        acc.Reload()
        scalars = {
            tag: [(ev.step, ev.value) for ev in acc.Scalars(tag)]
            for tag in acc.Tags().get("scalars", [])
        }
        del acc
        for tag, points in scalars.items():
            key = norm_key(prefix + tag)
            if not table.train.wanted(key):
                continue
            target = evals if is_eval_key(key) and "loss" in key else train
            for step, value in points:
                target.setdefault(step, {"step": float(step)})[key] = value
    for step in sorted(train):
        table.train.add(train[step])
    for step in sorted(evals):
        table.eval.add(evals[step])
    return table


def _new_read(path: Path) -> Any:
    from datacheck.history._tensorboard import read_tensorboard

    return read_tensorboard(path, set())


def _measure(read: Any, traced: bool) -> dict[str, Any]:
    def variant(args: list[str]) -> dict[str, Any]:
        if traced:  # the readings' memory, not the imports'
            from tensorboard.backend.event_processing import event_accumulator  # noqa: F401

            import datacheck.history._tensorboard  # noqa: F401

            tracemalloc.start()
        cpu, wall = _cpu(), time.perf_counter()
        table = read(Path(args[0]))
        out: dict[str, Any] = {
            "read_s": time.perf_counter() - wall,
            "cpu_s": _cpu() - cpu,
            "readings": sum(table.train.present(k) for k in table.train.cols if k != "step"),
            "rows": table.train.n,
        }
        if traced:
            out["traced_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
        return out

    return variant


VARIANTS = {
    "before": _measure(_old_read, False),
    "after": _measure(_new_read, False),
    "before traced": _measure(_old_read, True),
    "after traced": _measure(_new_read, True),
}


def _write(folder: Path, scalars: int) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder), max_queue=1000, flush_secs=3600)
    for step in range(scalars // 2):
        writer.add_scalar("train/loss", 2.0 + math.sin(step / 100.0), step)
        writer.add_scalar("train/grad_norm", 1.0 + (step % 7) / 10.0, step)
    writer.close()
    return next(folder.glob("events.out.tfevents.*"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scalars", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--name", default="tensorboard")
    args = ap.parse_args()
    load = list(os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        events = _write(Path(tmp), args.scalars)
        print(f"wrote {events.stat().st_size / 2**20:.1f} MiB in {time.perf_counter() - t0:.0f} s")
        best = interleaved(__file__, ["before", "after"], [tmp], rounds=args.rounds)
        for v in ("before", "after"):
            best[f"{v} traced"] = run_child(__file__, f"{v} traced", [tmp])
        size = events.stat().st_size
    rows = [
        [
            v,
            r["readings"],
            r["read_s"],
            r["cpu_s"],
            r["rss_mb"],
            best[f"{v} traced"]["traced_peak_mb"],
        ]
        for v, r in ((v, best[v]) for v in ("before", "after"))
    ]
    table = Table(
        ["reader", "readings", "wall s", "CPU s", "peak RSS MB", "tracemalloc peak MB"], rows
    )
    params = {"scalars": args.scalars, "file_mb": size / 2**20, "rounds": args.rounds}
    write_results(args.name, best, table=table, params=params, load_before=load)


if __name__ == "__main__":
    if not child_main(VARIANTS):
        main()
