"""TensorBoard event files and run folders (through the ``tensorboard`` package).

A folder is searched for ``events.out.tfevents.*`` files (a resumed run writes a new file; one
run may also log into sub-folders such as ``train/`` and ``val/``).  Scalars are merged by
step; for a step logged by several files the newest file (by its name's timestamp, then its
path) wins, because a resumed run rewrites the steps after its checkpoint.
"""

from __future__ import annotations

import re
from pathlib import Path

from datacheck.errors import InputError
from datacheck.history._table import Columns, Table, is_eval_key, norm_key

__all__ = ["event_files", "read_tensorboard"]

_STAMP = re.compile(r"tfevents\.(\d+)")


def event_files(path: Path) -> list[Path]:
    """The event files of a file or a run folder, oldest first."""
    if path.is_file():
        return [path]
    files = [p for p in path.rglob("*") if "tfevents" in p.name and p.is_file()]

    def order(p: Path) -> tuple[int, str]:
        m = _STAMP.search(p.name)
        return (int(m.group(1)) if m else 0, str(p))

    return sorted(files, key=order)


def _scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError as exc:
        raise InputError(
            f"'{path}' is a TensorBoard event file: reading it needs the tensorboard package "
            "(pip install tensorboard)"
        ) from exc
    acc = event_accumulator.EventAccumulator(
        str(path), size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    return {
        tag: [(ev.step, ev.value) for ev in acc.Scalars(tag)]
        for tag in acc.Tags().get("scalars", [])
    }


def read_tensorboard(path: Path, keep: set[str]) -> Table:
    """Merge the scalars of every event file under ``path`` by step."""
    files = event_files(path)
    if not files:
        raise InputError(f"'{path}': no TensorBoard event files (events.out.tfevents.*) in it")
    table = Table("tensorboard", Columns(keep), Columns(keep), counter="step")
    train: dict[int, dict[str, float]] = {}
    evals: dict[int, dict[str, float]] = {}
    for file in files:
        prefix = "" if file.parent == path or path.is_file() else file.parent.name + "_"
        for tag, points in _scalars(file).items():
            key = norm_key(prefix + tag)
            if not table.train.wanted(key):
                continue
            target = evals if is_eval_key(key) and "loss" in key else train
            for step, value in points:
                target.setdefault(step, {"step": float(step)})[key] = value
    if len(files) > 1:
        table.notes.append(f"{len(files)} event files merged by step")
    for step in sorted(train):
        table.train.add(train[step])
    for step in sorted(evals):
        table.eval.add(evals[step])
    return table
