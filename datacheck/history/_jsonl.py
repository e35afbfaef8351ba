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

import math
from pathlib import Path
from typing import Any

from datacheck._jsonl import iter_records
from datacheck.errors import InputError
from datacheck.history._table import Columns, Table, norm_key, to_float

__all__ = ["flatten", "read_jsonl"]

_NOT_MODEL_NUMBERS = frozenset({"scaler_overflow", "scaler_skip", "data_skip"})


def flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a/b": 1}``."""
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}/"))
        else:
            out[name] = value
    return out


def _numbers(rec: dict[str, Any], cols: Columns) -> dict[str, float]:
    row: dict[str, float] = {}
    for key, value in flatten(rec).items():
        k = norm_key(key)
        if cols.wanted(k) and (num := to_float(value)) is not None:
            row.setdefault(k, num)
    if rec.get("kind") in _NOT_MODEL_NUMBERS or rec.get("action") in _NOT_MODEL_NUMBERS:
        row = {k: v for k, v in row.items() if math.isfinite(v)}
    return row


def read_jsonl(path: Path, keep: set[str]) -> Table:
    """Read JSON Lines; raises InputError naming the line when one in the middle is damaged."""
    table = Table("jsonl", Columns(keep), Columns(keep))
    records: list[dict[str, Any]] = []
    try:
        for _, rec in iter_records(path):
            if rec.get("kind") == "resume" and to_float(rec.get("step")) is not None:
                at = float(rec["step"])
                records = [r for r in records if not (to_float(r.get("step")) or 0) >= at]
            records.append(rec)
    except InputError as exc:
        raise InputError(f"{exc}; is it a text log?") from exc
    skipped = {
        to_float(r.get("step"))
        for r in records
        if r.get("kind") in _NOT_MODEL_NUMBERS or r.get("action") in _NOT_MODEL_NUMBERS
    }
    for rec in records:
        if rec.get("kind") not in (None, "step"):
            table.events.append(rec)
            table.format = "guard log"
        elif rec.get("kind") == "step" and to_float(rec.get("step")) in skipped:
            rec = {**rec, "action": "data_skip"}
        row = _numbers(rec, table.train)
        table.add_row(row)
    return table
