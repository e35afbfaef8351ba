"""What every reader produces: training rows, evaluation rows and events, column by column.

Readers keep the keys that can play a role: a name that says so (a loss, a grad norm, a
learning rate, a loss scale, a skip or NaN counter, a step counter) or a key the user named;
and, for the first rows of a log, every numeric key, so that a step counter printed under a name
nobody listed (``Up.``, ``Train: 3``, a bare first column) is found by what it does: after
:data:`PROBE_ROWS` data rows the columns are *settled* and only the keys that behaved like a
counter (whole numbers that rise) stay besides the named ones.  So memory grows with the number
of log lines times a handful of floats, not with every metric a trainer prints.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

__all__ = [
    "MISSING",
    "PROBE_ROWS",
    "Columns",
    "Table",
    "counter_rank",
    "fields_of",
    "is_eval_key",
    "is_positional",
    "norm_key",
    "role_of",
    "to_float",
]

MISSING = -1.7976931348623157e308
"""Stored where a row has no value for a key: the most negative finite double, which no log
prints (a printed ``-inf`` stays a non-finite reading, never a missing one)."""

PROBE_ROWS = 256
"""Data rows read with every numeric key kept, before the columns are settled."""
_PENDING_ROWS = 16 * PROBE_ROWS
_PROBE_CELLS = 1 << 22
"""Cells (rows x columns) a probe may hold: a log printing thousands of keys settles sooner."""

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
    "update",
    "up",
    "iter_num",
    "current_steps",
    "global_iter",
    "train_iter",
    "batch",
    "batches",
    "epoch",
    "ep",
)
"""Step counters by name, most preferred first (``epoch`` late: it may be fractional or
coarse); names only break ties between counters found by their behaviour."""

_COUNTER_TOKENS = frozenset(
    {"step", "steps", "iter", "iters", "iteration", "iterations", "update", "updates"}
)
_EVAL_TOKENS = frozenset({"val", "valid", "validation", "eval", "evaluation", "test", "dev"})
_OBJECTIVE_TOKENS = frozenset(
    {"nll", "ce", "xent", "objective", "crossentropy", "mse", "rmse", "mae", "bce"}
    | {"l1", "l2", "logloss", "mlogloss", "huber", "rmsle", "mape"}
)
"""An objective under its own name: NLL, cross-entropy (MXNet's ``cross-entropy``), the
regression objectives (``MSE``, XGBoost's ``train-rmse``) and the boosting libraries' metric
names of their objectives (LightGBM's ``training's l2`` / ``binary_logloss``, XGBoost's
``mlogloss``)."""
_PPL_TOKENS = frozenset({"ppl", "perplexity"})
_COST_NOT = frozenset({"batch", "data", "time", "io", "compute", "comm", "ms", "s"})
_LR = re.compile(r"lr\d*")
_NORM = re.compile(r"[^a-z0-9]+")
_POSITIONAL = re.compile(r"(?:column_\d+|bracket_\d+|bar)(?:_total)?")


def norm_key(key: str) -> str:
    """``train/Loss`` -> ``train_loss``, ``lm loss`` -> ``lm_loss``, ``L.r.`` -> ``l_r``."""
    return _NORM.sub("_", key.lower()).strip("_") or key


def is_positional(key: str) -> bool:
    """``column_2``, ``bracket_1``: a field named by where it sits, not by the log."""
    return _POSITIONAL.fullmatch(key) is not None


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


_RATIO_TEXT = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


def fields_of(key: str, value: Any) -> Iterator[tuple[str, float]]:
    """The numbers one ``key: value`` of a record holds, under normalised keys.

    A number or a numeric string is itself; a string ``"N/M"`` is a counter and its total
    (ms-swift's ``"global_step/max_steps": "8280/11043"`` gives ``global_step`` 8280 and
    ``max_steps`` 11043; ``"step": "5/100"`` gives ``step`` 5 and ``step_total`` 100); a list of
    numbers is its first (DeepSpeed's ``lr=[1e-4, 1e-4]``, one LR per parameter group).
    """
    num = to_float(value)
    if num is not None:
        yield norm_key(key), num
        return
    if isinstance(value, str) and (m := _RATIO_TEXT.fullmatch(value)) is not None:
        names = key.split("/")
        if len(names) == 2 and all(n.strip() for n in names):
            yield norm_key(names[0]), float(m.group(1))
            yield norm_key(names[1]), float(m.group(2))
        else:
            yield norm_key(key), float(m.group(1))
            yield norm_key(key) + "_total", float(m.group(2))
    elif isinstance(value, list) and value and (first := to_float(value[0])) is not None:
        yield norm_key(key), first


def is_eval_key(key: str) -> bool:
    """``val_loss``, ``eval_g0_loss``, ``valid/loss``: a key of an evaluation metric."""
    tokens = key.split("_")
    return any(t in _EVAL_TOKENS for t in tokens) or key.startswith(("eval", "val"))


@lru_cache(maxsize=8192)
def role_of(key: str) -> str | None:
    """The role a normalised key's name says it can play, or ``None``."""
    tokens = key.split("_")
    toks = set(tokens)
    if key in COUNTERS or key.endswith("global_step"):
        return "step"
    if "nan" in toks and ("iterations" in toks or "steps" in toks):
        return "nan_count"
    if "skipped" in toks:
        return "skipped_count"
    if key in ("loss_scale", "scale", "scaler_scale", "grad_scale", "cur_scale"):
        return "scale"
    if _is_loss(key, toks):
        return "loss"
    if _counter_name(tokens):
        return "step"
    if ("grad" in key and "norm" in key) or key in ("gnorm", "total_norm"):
        return "grad_norm"
    if "learning_rate" in key or key == "l_r" or _lr_tokens(tokens):
        return "lr"
    return None


def _counter_name(tokens: list[str]) -> bool:
    """``train_iter``, ``current_steps``, ``num_updates``: a counter's name, not a setting
    (``max_steps``, ``warmup_steps``, ``steps_per_epoch`` are totals and settings)."""
    if not _COUNTER_TOKENS & set(tokens):
        return False
    return not {"max", "total", "warmup", "per", "time", "sec", "s", "ms"} & set(tokens)


def _is_loss(key: str, toks: set[str]) -> bool:
    if "loss" in key:
        return not {"scale", "scaler", "best", "weight", "ppl", "perplexity"} & toks
    if "cost" in toks:
        return not _COST_NOT & toks
    return (
        bool(_OBJECTIVE_TOKENS & toks or _PPL_TOKENS & toks)
        or {"cross", "entropy"} <= toks
        or key in _SCORES
    )


_SCORES = ("score", "train_score", "training_score", "learn")
"""DL4J's ``model.score()`` (``Score at iteration N is X``) is the loss; qualified scores
(``bleu_score``, ``f1_score``) are metrics. CatBoost prints its objective on the training set
as ``learn: X`` (``0:\tlearn: 0.69\ttest: 0.69\tbest: ..``)."""


def _lr_tokens(tokens: list[str]) -> bool:
    """``lr``, ``lr0``, ``x_lr0``, ``lr_adam`` (Lightning's ``lr-Adam``), ``lr_pg0``,
    ``optim0_lr0`` (ESPnet); not ``lr_scale`` or ``lr_warmup_steps``."""
    if not any(_LR.fullmatch(t) for t in tokens):
        return False
    return not {"scale", "warmup", "steps", "decay", "min", "max", "ratio"} & set(tokens)


def objective_kind(key: str) -> int:
    """How surely a loss-role key is the per-step objective: 0 a loss, 1 a cost, 2 an NLL /
    cross-entropy / objective, 3 a perplexity (``exp`` of the loss), 4 a bare score."""
    toks = set(key.split("_"))
    if "loss" in key:
        return 0
    if "cost" in toks:
        return 1
    if _PPL_TOKENS & toks:
        return 3
    if key in _SCORES:
        return 4
    return 2


def counter_rank(key: str) -> int:
    """Tie-break between counters that behave alike: the known names first, in order."""
    if key in COUNTERS:
        return COUNTERS.index(key)
    if key.endswith("global_step"):
        return 0
    if role_of(key) == "step":
        return len(COUNTERS)
    return len(COUNTERS) + 1 + is_positional(key)


def _whole(values: Iterable[float]) -> bool:
    return all(v == math.floor(v) for v in values)


_UNIX = (946684800.0, 4102444800.0)
"""2000-01-01 and 2100-01-01 in Unix seconds."""


def unix_time(col: Iterable[float]) -> bool:
    """Every value a moment of this century in Unix seconds, milliseconds, microseconds or
    nanoseconds, the same unit throughout (MLflow's ``<timestamp ms> <value> <step>`` lines,
    a ``time.time()`` column): a clock, never a counter (no run counts 10^9 steps)."""
    import numpy as np

    v = np.frombuffer(col, np.float64) if isinstance(col, array) else np.fromiter(col, float)
    present = v != MISSING  # NaN compares unequal, and fails the range below
    if not present.any():
        return False
    lo = float(v.min(where=present, initial=np.inf))
    hi = float(v.max(where=present, initial=-np.inf))
    return any(_UNIX[0] * k <= lo and hi <= _UNIX[1] * k for k in (1.0, 1e3, 1e6, 1e9))


def counter_like(col: array[float]) -> bool:
    """Whole, non-negative numbers that rise across the readings (a few falls allowed: a
    resumed run starts its counter again) or reset with another counter (a step within an
    epoch): what a step counter does (a clock of Unix time does it too, and is none)."""
    vals = [v for v in col if v != MISSING]
    if len(vals) < 2 or any(not math.isfinite(v) or v < 0 for v in vals):
        return False
    if not _whole(vals) or unix_time(vals):
        return False
    ups = sum(b > a for a, b in zip(vals, vals[1:], strict=False))
    return ups >= 1 and ups >= 0.5 * sum(b != a for a, b in zip(vals, vals[1:], strict=False))


def _constant_whole(col: array[float]) -> bool:
    vals = {v for v in col if v != MISSING}
    return len(vals) == 1 and _whole(vals) and min(vals) >= 0


def _falls(col: array[float]) -> bool:
    vals = [v for v in col if v != MISSING]
    return any(b < a for a, b in zip(vals, vals[1:], strict=False))


class Columns:
    """Rows of floats under keys, stored column by column (``MISSING`` where a row lacks one).

    While *probing* (the first :data:`PROBE_ROWS` data rows), every key is wanted; then
    :meth:`settle` keeps the named keys and those that behaved like a counter.
    """

    def __init__(self, keep: Iterable[str] = ()) -> None:
        self.n = 0
        self.cols: dict[str, array[float]] = {}
        self.keep = frozenset(keep)
        self.extra: set[str] = set()
        """Keys without a role by name that behaved like a counter while probing."""
        self.pending: set[str] = set()
        """Whole numbers that stayed constant while probing (an epoch of a long epoch?):
        judged again after :data:`_PENDING_ROWS` data rows."""
        self.probing = True
        self.data_rows = 0
        self.generation = 0
        """Changes when the wanted keys change (a reader's cached plans are then stale)."""

    def wanted(self, key: str) -> bool:
        """Whether a reader should keep this (normalised) key."""
        if self.probing:
            return True
        return (
            key in self.keep or key in self.extra or key in self.pending or role_of(key) is not None
        )

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
        if self.probing or self.pending:
            self.count(row)
        return n - 1

    def count(self, keys: Iterable[str]) -> None:
        """Count a row just added (its keys) toward the probe; settle when it is full."""
        if any(role_of(k) not in (None, "step") or k in self.keep for k in keys):
            self.data_rows += 1
        if self.probing and (
            self.data_rows >= PROBE_ROWS or self.n * len(self.cols) > _PROBE_CELLS
        ):
            self.settle()
        elif self.pending and self.data_rows >= _PENDING_ROWS:
            for key in self.pending:
                if counter_like(self.cols[key]):
                    self.extra.add(key)
                else:
                    del self.cols[key]
            self.pending = set()
            self.generation += 1

    def settle(self) -> bool:
        """End the probe: keep named keys and counter-like ones; ``True`` if it was probing."""
        if not self.probing:
            return False
        self.probing = False
        self.generation += 1
        for key in list(self.cols):
            if key in self.keep or role_of(key) is not None or key.endswith("_total"):
                continue
            col = self.cols[key]
            if is_positional(key) or counter_like(col):
                self.extra.add(key)
            elif _constant_whole(col):
                self.pending.add(key)
            else:
                del self.cols[key]
        for key in [k for k in self.cols if k.endswith("_total") and k not in self.keep]:
            base = self.cols.get(key[: -len("_total")])
            if base is not None and _falls(base):  # the period of a counter that resets
                self.extra.add(key)
            else:
                del self.cols[key]
        return True

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
        """A row whose losses are all evaluation losses is an eval row; any other row is a
        training row (a row of counters alone carries the step of the rows after it)."""
        losses = [k for k in row if role_of(k) == "loss"]
        if losses and all(map(is_eval_key, losses)):
            self.eval.add(row)
        elif row:
            self.train.add(row)
