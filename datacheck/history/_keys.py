"""Which key is the step, the loss, the grad norm and the learning rate: one documented order.

The choice never depends on hash order or file order, and a key the user names wins:

* **step**: the first of :data:`~datacheck.history._table.COUNTERS` present on at least half the
  training rows (``global_step``, ``num_updates``, ``iteration``, ``iter``, ``step``, ...,
  ``epoch`` last); none: row numbers, and the output says so.
* **loss**: the first of :data:`LOSS_ORDER` present; else a key naming a total; else, when
  several component losses remain that are printed together (YOLO ``box/obj/cls``, mmdet
  ``loss_cls/loss_bbox``), their sum; else the loss key on the most rows.  Evaluation keys (``val``, ``eval``, ``test``, ...) never are the
  training loss, and a constant column (all readings equal) is passed over when another exists.
* **grad norm** / **learning rate**: the first of their preferred names, else the shortest
  matching key, ties broken by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from datacheck.errors import InputError
from datacheck.history._table import COUNTERS, MISSING, Columns, is_eval_key, norm_key, role_of

__all__ = [
    "EVAL_LOSS_ORDER",
    "LOSS_ORDER",
    "Keys",
    "Overrides",
    "choose_keys",
    "eval_loss_key",
    "step_key",
]

LOSS_ORDER = (
    "loss",
    "train_loss",
    "training_loss",
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
GRAD_ORDER = ("grad_norm", "gnorm", "total_grad_norm", "grad_norm_total", "total_norm")
LR_ORDER = ("lr", "learning_rate", "train_lr", "train_learning_rate", "lr0", "x_lr0")


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

    def describe(self) -> dict[str, str | None]:
        """For output: the loss as ``a+b+c`` when summed."""
        return {
            "step": self.step,
            "loss": "+".join(self.loss) or None,
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


def _loss(cols: Columns) -> tuple[str, ...]:
    keys = [k for k in cols.cols if role_of(k) == "loss" and not is_eval_key(k)]
    varying = [k for k in keys if not _constant(cols, k)] or keys
    for key in _ordered(varying, LOSS_ORDER):
        if key in LOSS_ORDER or "total" in key.split("_"):
            return (key,)
    if len(varying) <= 1:
        return tuple(varying)
    # Components are printed together; keys that are not (Lightning's train_loss_step beside
    # train_loss_epoch) are variants of one loss: take the one on the most rows.
    present = {k: cols.present(k) for k in varying}
    most = max(present.values())
    parts = sorted(k for k in varying if present[k] >= 0.9 * most)
    if len(parts) > 1:
        return tuple(parts)
    return (min(varying, key=lambda k: (-present[k], len(k), k)),)


def step_key(cols: Columns) -> str | None:
    """The first counter present on at least half the rows."""
    for key in COUNTERS:
        if key in cols.cols and 2 * cols.present(key) >= cols.n:
            return key
    others = sorted(k for k in cols.cols if k.endswith("global_step"))
    return next((k for k in others if 2 * cols.present(k) >= cols.n), None)


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


def choose_keys(cols: Columns, overrides: Overrides, source: str) -> Keys:
    """Choose the keys of the training rows (an override that is absent is an InputError)."""
    loss: tuple[str, ...]
    if overrides.loss:
        loss = tuple(
            k for part in overrides.loss.split("+") if (k := _named(cols, part, "--loss", source))
        )
    else:
        loss = _loss(cols)
    return Keys(
        step=_named(cols, overrides.step, "--step", source) or step_key(cols),
        loss=loss,
        grad_norm=_named(cols, overrides.grad_norm, "--grad-norm", source)
        or _first(cols, "grad_norm", GRAD_ORDER),
        lr=_named(cols, overrides.lr, "--lr", source) or _first(cols, "lr", LR_ORDER),
        eval_loss=eval_loss_key(cols, tagged=False),
    )
