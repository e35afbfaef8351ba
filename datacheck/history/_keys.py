"""Which key is the loss, the grad norm and the learning rate: one documented order, with reasons.

The choice never depends on hash order or file order, and a key the user names wins (the step
counter is found by its behaviour, in :mod:`datacheck.history._counters`):

* **loss**: the per-step objective.  A running mean beside the per-step value (``average_loss``
  beside ``step_loss``) is passed over.  A key named the loss first (:data:`LOSS_ORDER`), else
  one naming a total (:data:`_TOTAL`), else one that is the sum of the others on every line;
  else, when several component losses are printed together (YOLO ``box/obj/cls``, mmdet
  ``loss_cls/loss_bbox``), their sum; else the loss key on the most rows; else what trainers
  call the objective when they do not call it a loss: a cost (Marian's ``Cost``), an NLL /
  cross-entropy / ``xent`` / objective, a perplexity, whose natural log is the loss, and last a
  bare score (DL4J).  Evaluation keys (``val``, ``eval``, ``test``, ...) never are the training
  loss, and a constant column (all readings equal) is passed over when another of its kind
  exists.  A log of bare columns (``76930 2.6496577``) has no names: the first column that is
  not the step counter nor rises on every line (a clock) is the loss.
* **grad norm** / **learning rate**: the first of their preferred names, else the shortest
  matching key, ties broken by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from datacheck.errors import InputError
from datacheck.history._table import (
    MISSING,
    Columns,
    is_eval_key,
    is_positional,
    norm_key,
    objective_kind,
    role_of,
)

__all__ = [
    "EVAL_LOSS_ORDER",
    "LOSS_ORDER",
    "Keys",
    "Overrides",
    "choose_keys",
    "eval_loss_key",
]

LOSS_ORDER = (
    "loss",
    "train_loss",
    "training_loss",
    "loss_train",
    "lm_loss",
    "train_lm_loss",
    "total_loss",
    "loss_total",
    "train_total_loss",
)
EVAL_LOSS_ORDER = (
    "val_loss",
    "valid_loss",
    "validation_loss",
    "eval_loss",
    "test_loss",
    "loss",
    "lm_loss_value",
    "lm_loss",
)
GRAD_ORDER = (
    "grad_norm",
    "gnorm",
    "total_grad_norm",
    "grad_norm_total",
    "total_norm",
    "gradient_norm",
)
LR_ORDER = ("lr", "learning_rate", "train_lr", "train_learning_rate", "lr0", "x_lr0", "l_r")
_AVERAGE = frozenset({"avg", "average", "mean", "running", "smoothed", "smooth", "ema"})
"""A running average of the loss (NVIDIA BERT's ``average_loss`` beside ``step_loss``): the
per-step value beside it is preferred, and the two are never summed."""
_TOTAL = frozenset({"total", "losses", "sum", "overall", "all"})
"""A loss named the total of the components printed beside it (``total_loss``, ``losses``)."""
_KINDS = (
    "a loss",
    "a cost (the objective under another name)",
    "an objective by its own name (NLL, cross-entropy, MSE, ...)",
)


@dataclass(frozen=True)
class Overrides:
    """Keys the user named (``--loss``/``--step``/``--grad-norm``/``--lr``), as printed."""

    loss: str | None = None
    """The training loss key (several joined with ``+`` are summed)."""
    step: str | None = None
    """The step counter key."""
    grad_norm: str | None = None
    """The grad-norm key."""
    lr: str | None = None
    """The learning-rate key."""

    def names(self) -> set[str]:
        """Every normalised key named, so readers keep them."""
        out: set[str] = set()
        for value in (self.loss, self.step, self.grad_norm, self.lr):
            if value:
                out.update(norm_key(part) for part in value.split("+"))
        return out


@dataclass(frozen=True)
class Keys:
    """The chosen keys; ``loss`` holds one key, or several to be summed."""

    step: str | None
    loss: tuple[str, ...]
    grad_norm: str | None
    lr: str | None
    eval_loss: str | None = None
    log_loss: bool = False
    """The loss is a perplexity: its natural log is judged."""
    reasons: dict[str, str] = field(default_factory=dict)

    def describe(self) -> dict[str, str | None]:
        """For output: the loss as ``a+b+c`` when summed, ``ln(ppl)`` for a perplexity."""
        loss = "+".join(self.loss) or None
        return {
            "step": self.step,
            "loss": f"ln({loss})" if loss and self.log_loss else loss,
            "grad_norm": self.grad_norm,
            "lr": self.lr,
            "eval_loss": self.eval_loss,
        }


def _constant(cols: Columns, key: str) -> bool:
    seen: set[float] = set()
    count = 0
    for v in cols.cols[key]:
        if v != MISSING and v == v:
            seen.add(v)
            count += 1
            if len(seen) > 1:
                return False
    return count >= 3


def _ordered(candidates: list[str], order: tuple[str, ...]) -> list[str]:
    rank = {k: i for i, k in enumerate(order)}
    return sorted(candidates, key=lambda k: (rank.get(k, len(order)), len(k), k))


def _most(cols: Columns, keys: list[str]) -> str:
    return min(keys, key=lambda k: (-cols.present(k), len(k), k))


def _loss(cols: Columns, step: str | None) -> tuple[tuple[str, ...], bool, str]:
    """(keys, a perplexity?, why)."""
    keys = [k for k in cols.cols if role_of(k) == "loss" and not is_eval_key(k)]
    for kind in range(5):  # a constant loss is still a loss: constancy breaks ties in a kind
        of_kind = [k for k in keys if objective_kind(k) == kind]
        if of_kind:
            of_kind = [k for k in of_kind if not _constant(cols, k)] or of_kind
            break
    else:
        return _unnamed(cols, step)
    if kind == 4:
        key = _most(cols, of_kind)
        return (
            (key,),
            False,
            f"{key}: no loss is printed, only a score of the objective (DL4J's model.score(), CatBoost's learn)",
        )
    per_step = [k for k in of_kind if not _AVERAGE & set(k.split("_"))]
    means = ""
    if per_step and len(per_step) < len(of_kind):  # a running mean beside the per-step value
        means = f" ({', '.join(sorted(set(of_kind) - set(per_step)))}: a running mean, passed over)"
        of_kind = per_step
    if kind == 3:
        key = _most(cols, of_kind)
        return (key,), True, f"ln({key}): no loss is printed, only a perplexity; its log is one"
    named = [
        k for k in _ordered(of_kind, LOSS_ORDER) if k in LOSS_ORDER or _TOTAL & set(k.split("_"))
    ]
    if named:
        why = "named the loss" if named[0] in LOSS_ORDER else "named the total loss"
        return (named[0],), False, f"{named[0]}: {why}{means}"
    if kind == 0 and (total := _sum_of_others(cols, [k for k in keys if objective_kind(k) == 0])):
        return (total,), False, f"{total}: the sum of the other losses on every line, their total"
    if kind == 0 and len(of_kind) > 1:
        # Components are printed together; keys that are not (Lightning's train_loss_step
        # beside train_loss_epoch) are variants of one loss: take the one on the most rows.
        present = {k: cols.present(k) for k in of_kind}
        most = max(present.values())
        parts = sorted(k for k in of_kind if present[k] >= 0.9 * most)
        if len(parts) > 1:
            left = sorted(set(keys) - set(parts))
            why = f"{'+'.join(parts)}: the sum of the loss components printed together"
            return tuple(parts), False, why + (f" ({', '.join(left)} passed over)" if left else "")
    key = _most(cols, of_kind)
    return (
        (key,),
        False,
        f"{key}: {_KINDS[kind]}" + (", on the most lines" if len(of_kind) > 1 else "") + means,
    )


def _sum_of_others(cols: Columns, keys: list[str]) -> str | None:
    """The loss that is the sum of the others printed with it (a total by what it holds, as
    YOLOv5's ``total`` is ``box + obj + cls``), to print precision, on the lines of all."""
    if len(keys) < 3:
        return None
    arrays = {k: np.frombuffer(cols.cols[k], np.float64) for k in sorted(keys)}
    every = np.logical_and.reduce([(a != MISSING) & np.isfinite(a) for a in arrays.values()])
    if every.sum() < 1:
        return None
    rows = {k: a[every] for k, a in arrays.items()}
    whole = np.sum(list(rows.values()), axis=0)
    for key, own in rows.items():
        rest = whole - own
        if np.all(np.abs(rest - own) <= 1e-3 * np.maximum(np.abs(own), 1e-6) + 1e-4):
            return key
    return None


def _unnamed(cols: Columns, step: str | None) -> tuple[tuple[str, ...], bool, str]:
    """A log of bare columns: the first one that is not the step counter, nor a column rising
    on every line (a clock), is the loss."""
    columns = sorted(
        (k for k in cols.cols if is_positional(k) and k.startswith("column_") and k != step),
        key=lambda k: int(k.split("_")[1]),
    )
    columns = [k for k in columns if not k.endswith("_total") and not _constant(cols, k)]
    columns = [k for k in columns if not _clock(cols, k)] or columns
    if not columns:
        return (), False, ""
    return (
        (columns[0],),
        False,
        f"{columns[0]}: the log names no loss; the first column that is not the step counter "
        "(name another with --loss column_N)",
    )


def _clock(cols: Columns, key: str) -> bool:
    """A column that rises on every line (Caffe's ``Seconds`` beside ``#Iters``): a clock or
    a counter, never the loss."""
    arr = np.frombuffer(cols.cols[key], np.float64)
    arr = arr[(arr != MISSING) & np.isfinite(arr)]
    return len(arr) >= 3 and bool(np.all(arr[1:] > arr[:-1]))


def _first(cols: Columns, role: str, order: tuple[str, ...]) -> str | None:
    keys = [k for k in cols.cols if role_of(k) == role and not is_eval_key(k)]
    return next(iter(_ordered(keys, order)), None)


def eval_loss_key(cols: Columns, tagged: bool) -> str | None:
    """The evaluation loss: in rows tagged as evaluation any loss key, else an eval-named one."""
    keys = [k for k in cols.cols if role_of(k) == "loss" and (tagged or is_eval_key(k))]
    return next(iter(_ordered(keys, EVAL_LOSS_ORDER)), None)


def _named(cols: Columns, name: str | None, what: str, source: str) -> str | None:
    if name is None:
        return None
    key = norm_key(name)
    if key not in cols.cols:
        seen = ", ".join(sorted(cols.cols)[:20]) or "none"
        raise InputError(f"'{source}': no key '{name}' for {what} (keys seen: {seen})")
    return key


def choose_keys(cols: Columns, overrides: Overrides, source: str, step: str | None) -> Keys:
    """Choose the keys of the training rows (an override that is absent is an InputError)."""
    reasons: dict[str, str] = {}
    log_loss = False
    if overrides.loss:
        loss = tuple(
            k for part in overrides.loss.split("+") if (k := _named(cols, part, "--loss", source))
        )
        reasons["loss"] = f"{'+'.join(loss)}: named with --loss"
    else:
        loss, log_loss, why = _loss(cols, step)
        if loss:
            reasons["loss"] = why
    grad = _named(cols, overrides.grad_norm, "--grad-norm", source)
    if grad is not None:
        reasons["grad_norm"] = f"{grad}: named with --grad-norm"
    elif (grad := _first(cols, "grad_norm", GRAD_ORDER)) is not None:
        reasons["grad_norm"] = f"{grad}: named a grad norm"
    lr = _named(cols, overrides.lr, "--lr", source)
    if lr is not None:
        reasons["lr"] = f"{lr}: named with --lr"
    elif (lr := _first(cols, "lr", LR_ORDER)) is not None:
        reasons["lr"] = f"{lr}: named a learning rate"
    return Keys(
        step=step,
        loss=loss,
        grad_norm=grad,
        lr=lr,
        eval_loss=eval_loss_key(cols, tagged=False),
        log_loss=log_loss,
        reasons=reasons,
    )
