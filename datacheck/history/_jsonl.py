"""JSON Lines histories: any trainer's ``metrics.jsonl``, and the training guard's own log.

Read through :mod:`datacheck._jsonl` (one reader for our append-only files: a torn last line
is dropped, damage elsewhere is an error).  Nested dicts are flattened (``{"train": {"loss":
..}}`` -> ``train_loss``).  In a guard log, records whose ``kind`` is not ``step`` are events;
their values count for the series too, except where the guard says the step's numbers are not
the model's: an fp16 overflow the scaler handled (``scaler_overflow``/``scaler_skip``) and a
batch skipped on purpose (``data_skip``) carry NaN/Inf that is not divergence.  A ``resume``
record at step R drops the earlier records of steps >= R (the resumed run replays them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from datacheck._jsonl import TOO_DEEP, iter_records
from datacheck.errors import InputError
from datacheck.history._table import Columns, Table, fields_of, to_float

__all__ = ["flatten", "read_jsonl"]

_SHOWN = 10
"""Line numbers listed in a note about skipped records (the count says how many more)."""
_NOT_MODEL_NUMBERS = frozenset({"scaler_overflow", "scaler_skip", "data_skip"})


def flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a/b": 1}``, in key order, without recursion (any depth)."""
    out: dict[str, Any] = {}
    stack: list[tuple[str, Iterator[tuple[Any, Any]]]] = [(prefix, iter(obj.items()))]
    while stack:
        at, items = stack[-1]
        for key, value in items:
            name = f"{at}{key}"
            if isinstance(value, dict):
                stack.append((f"{name}/", iter(value.items())))
                break
            out[name] = value
        else:
            stack.pop()
    return out


def _numbers(rec: dict[str, Any], cols: Columns) -> dict[str, float]:
    row: dict[str, float] = {}
    for key, value in flatten(rec).items():
        for k, num in fields_of(key, value):
            if cols.wanted(k):
                row.setdefault(k, num)
    if rec.get("kind") in _NOT_MODEL_NUMBERS or rec.get("action") in _NOT_MODEL_NUMBERS:
        row = {k: v for k, v in row.items() if math.isfinite(v)}
    return row


def _reading(rec: dict[str, Any], row: dict[str, float]) -> tuple[Any, ...] | None:
    """A guard record's reading (step, rank, loss, grad norm), NaN comparable, or ``None``."""
    if "rank" not in rec or "step" not in rec:
        return None
    return (rec.get("step"), rec.get("rank"), *(repr(row.get(k)) for k in ("loss", "grad_norm")))


def _marks(path: Path) -> tuple[int, list[tuple[int, float]], list[tuple[int, float | None]]]:
    """First pass: the last line number, ``resume`` records and skip records by line number.

    Only lines that can hold one are parsed (a word they must contain, or a JSON escape).
    """
    resumes: list[tuple[int, float]] = []
    skips: list[tuple[int, float | None]] = []
    last = 0
    with path.open(encoding="utf-8", errors="replace") as fh:
        for last, line in enumerate(fh, 1):
            if not ("resume" in line or "skip" in line or "overflow" in line or "\\u" in line):
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                continue  # a damaged or too deep line: the second pass says where
            if not isinstance(rec, dict):
                continue
            if rec.get("kind") == "resume" and (at := to_float(rec.get("step"))) is not None:
                resumes.append((last, at))
            if rec.get("kind") in _NOT_MODEL_NUMBERS or rec.get("action") in _NOT_MODEL_NUMBERS:
                skips.append((last, to_float(rec.get("step"))))
    return last, resumes, skips


class _Replayed:
    """Whether a record is replaced by a later ``resume`` at a step <= its own (the resumed run
    replays those steps); asked in line order."""

    def __init__(self, resumes: list[tuple[int, float]]) -> None:
        self.lines = [n for n, _ in resumes]
        self.floor: list[float] = []  # the lowest resume step from each resume on
        low = math.inf
        for _, at in reversed(resumes):
            low = min(low, at)
            self.floor.append(low)
        self.floor.reverse()
        self.next = 0

    def __call__(self, line: int, step: float | None) -> bool:
        while self.next < len(self.lines) and self.lines[self.next] <= line:
            self.next += 1
        if self.next == len(self.lines):
            return False
        return (step or 0) >= self.floor[self.next]


def read_jsonl(path: Path, keep: set[str]) -> Table:
    """Read JSON Lines in two streamed passes (resumes and skips first, then the rows); raises
    InputError naming the line when one in the middle is damaged."""
    table = Table("jsonl", Columns(keep), Columns(keep))
    last, resumes, skip_marks = _marks(path)
    replayed = _Replayed(resumes)
    skip_check = _Replayed(resumes)
    skipped = {step for n, step in skip_marks if not skip_check(n, step)}
    previous: tuple[Any, ...] | None = None
    deep: list[int] = []
    try:
        for n, rec in iter_records(path, too_deep=deep):
            if n > last:  # the file grew since the first pass
                break
            if replayed(n, to_float(rec.get("step"))):
                continue
            if rec.get("kind") not in (None, "step"):
                rec["row"] = table.train.n
                table.events.append(rec)
                table.format = "guard log"
            elif rec.get("kind") == "step" and to_float(rec.get("step")) in skipped:
                rec = {**rec, "action": "data_skip"}
            row = _numbers(rec, table.train)
            same = _reading(rec, row)
            if same is not None and same == previous:
                continue  # the guard logs a step's reading with each of its events: one reading
            previous = same
            table.add_row(row)
    except InputError as exc:
        raise InputError(f"{exc}; is it a text log?") from exc
    shown = ", ".join(map(str, deep[:_SHOWN])) + (
        f" and {len(deep) - _SHOWN} more" if len(deep) > _SHOWN else ""
    )
    if deep:
        table.notes.append(f"{len(deep)} record(s) skipped, {TOO_DEEP} (line {shown})")
    return table
