"""What every reader produces: training rows, evaluation rows and events, column by column.

Readers keep only the keys that can play a role (a step counter, a loss, a grad norm, a
learning rate, a loss scale, a skip or NaN counter, or a key the user named), so memory grows
with the number of log lines times a handful of floats, not with every metric a trainer prints.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

__all__ = ["MISSING", "Columns", "Table", "is_eval_key", "norm_key", "role_of", "to_float"]

MISSING = -1.7976931348623157e308
"""Stored where a row has no value for a key: the most negative finite double, which no log
prints (a printed ``-inf`` stays a non-finite reading, never a missing one)."""

COUNTERS = (
    "global_step",
    "trainer_global_step",
    "num_updates",
    "iteration",
    "iter",
    "step",
    "steps",
    "it",
    "updates",
    "epoch",
)
"""Step counters, most preferred first (``epoch`` last: it may be fractional)."""

_EVAL_TOKENS = frozenset({"val", "valid", "validation", "eval", "evaluation", "test", "dev"})
_NORM = re.compile(r"[^a-z0-9]+")


def norm_key(key: str) -> str:
    """``train/Loss`` -> ``train_loss``, ``lm loss`` -> ``lm_loss``."""
    return _NORM.sub("_", key.lower()).strip("_") or key


def to_float(value: Any) -> float | None:
    """A number from a JSON/CSV/text value, or ``None`` (bools and words are not numbers)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def is_eval_key(key: str) -> bool:
    """``val_loss``, ``eval_g0_loss``, ``valid/loss``: a key of an evaluation metric."""
    tokens = key.split("_")
    return any(t in _EVAL_TOKENS for t in tokens) or key.startswith(("eval", "val"))


@lru_cache(maxsize=4096)
def role_of(key: str) -> str | None:
    """The role a normalised key can play, or ``None`` (the reader then drops it)."""
    tokens = key.split("_")
    if key in COUNTERS or key.endswith("global_step"):
        return "step"
    if "nan" in tokens and ("iterations" in tokens or "steps" in tokens):
        return "nan_count"
    if "skipped" in tokens:
        return "skipped_count"
    if key in ("loss_scale", "scale", "scaler_scale", "grad_scale"):
        return "scale"
    if "loss" in key and not {"scale", "best", "ppl"} & set(tokens):
        return "loss"
    if "grad" in key and "norm" in key or key in ("gnorm", "total_norm"):
        return "grad_norm"
    if "learning_rate" in key or re.fullmatch(r"(?:.*_)?lr\d*", key):
        return "lr"
    return None


class Columns:
    """Rows of floats under keys, stored column by column (``MISSING`` where a row lacks one)."""

    def __init__(self, keep: Iterable[str] = ()) -> None:
        self.n = 0
        self.cols: dict[str, array[float]] = {}
        self.keep = frozenset(keep)

    def wanted(self, key: str) -> bool:
        """Whether a reader should keep this (normalised) key."""
        return key in self.keep or role_of(key) is not None

    def add(self, row: Mapping[str, float]) -> int:
        """Append one row (already normalised and filtered); returns its index."""
        cols, n = self.cols, self.n
        for key, value in row.items():
            col = cols.get(key)
            if col is None:
                col = cols[key] = array("d", [MISSING]) * n
            col.append(value)
        self.n = n = n + 1
        if len(row) < len(cols):
            for col in cols.values():
                if len(col) < n:
                    col.append(MISSING)
        return n - 1

    def drop_head(self, first: int) -> None:
        """Drop the rows before ``first``, in place (a key left with no value goes)."""
        if first <= 0:
            return
        for key, col in list(self.cols.items()):
            del col[:first]
            if not any(v != MISSING for v in col):
                del self.cols[key]
        self.n = max(self.n - first, 0)

    def get(self, key: str, i: int) -> float | None:
        """The value of ``key`` in row ``i``, or ``None``."""
        col = self.cols.get(key)
        if col is None:
            return None
        v = col[i]
        return None if v == MISSING else v

    def present(self, key: str) -> int:
        """Rows that have ``key``."""
        col = self.cols.get(key)
        return 0 if col is None else len(col) - col.count(MISSING)


@dataclass
class Table:
    """A reader's output: training rows, evaluation rows, and events with steps or row numbers.

    An event is a dict with ``kind`` (``checkpoint``, ``overflow``, ``nonfinite``, ``skipped``,
    or a guard event kind) and either ``step`` (known) or ``row`` (the training row it belongs
    to; the step is filled in once the step counter is chosen).
    """

    format: str
    train: Columns
    eval: Columns
    events: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counter: str | None = None
    """The step key when the format fixes it (TensorBoard, trainer_state.json)."""

    def add_row(self, row: dict[str, float]) -> None:
        """A row whose losses are all evaluation losses is an eval row; any other row with
        something besides a step counter is a training row; a bare counter is dropped."""
        losses = [k for k in row if role_of(k) == "loss"]
        if losses and all(map(is_eval_key, losses)):
            self.eval.add(row)
        elif any(role_of(k) != "step" for k in row):
            self.train.add(row)
