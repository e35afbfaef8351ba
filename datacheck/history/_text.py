"""Text training logs, as trainers print them, read in one pass in linear time.

A line yields ``key value`` pairs (``loss 2.3``, ``loss=2.3``, ``loss: 2.3``, ``lm loss: 2.3``,
``Loss is Infinity``, printed dicts), a step counter, a train/eval tag, and signals:

* **counters**: any key of :data:`~datacheck.history._table.COUNTERS`, mmengine
  ``Epoch(train) [e][i/n]`` (global iteration ``(e-1)*n+i``) and ``Iter(train) [i/n]``, Keras
  ``Epoch i/n`` headers with ``k/n [===]`` batch lines (epoch ``i-1+k/n``), Lightning progress
  bars ``Epoch e: ..| k/n [`` (epoch ``e+k/n``);
* **evaluation lines** (a separate series): a line with the word ``valid``/``val``/``eval``/
  ``test``/``validation`` (fairseq ``| valid |``, nanoGPT ``step N: train loss, val loss``,
  Megatron ``validation loss at iteration``), or whose only losses are evaluation keys;
* **signals**: fp16 overflow skips (DeepSpeed ``OVERFLOW! ... Skipping step``, fairseq ``overflow
  detected, setting loss scale to``, apex ``Gradient overflow``), saved checkpoints (Megatron,
  DeepSpeed ``global_stepN``, Hugging Face ``checkpoint-N``, fairseq ``@ N updates``, mmengine,
  Keras, Lightning, nanoGPT) and non-finite losses in prose (``NaN loss detected``).

Every pattern is anchored or possessive, so no line makes the parser backtrack quadratically.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from datacheck.history._table import Columns, Table, is_eval_key, norm_key, role_of, to_float

__all__ = ["parse_line", "read_text"]

_NUM = r"(?>[-+]?+(?:\d++(?:\.\d*+)?+|\.\d++)(?:[eE][-+]?+\d++)?+|nan|inf(?:inity)?+)(?!\w|\.\w)"
_QUAL = r"(?:(?:train|training|val|valid|validation|eval|test|lm)\s++)?+"
_PAIR = re.compile(
    rf"(?<![\w./-])({_QUAL}[A-Za-z_][\w./-]*+)(?:\s++is\s++|\s*+[:=]\s*+|\s++)({_NUM})",
    re.IGNORECASE,
)
_NUM_AT = re.compile(rf"\s*+({_NUM})", re.IGNORECASE)
_WORDY_KEY = re.compile(r"\s*+[A-Za-z_(][\w./()-]*+(?:\s++[A-Za-z_(][\w./()-]*+)*+\s*+")
_QUOTED_PAIR = re.compile(rf"['\"]([A-Za-z_][^'\"]*+)['\"]\s*+:\s*+'?({_NUM})", re.IGNORECASE)
_SEGMENTS = re.compile(r"\s[|,]\s?|,\s|\t|\.\s")
_EVAL_WORD = re.compile(
    r"(?<![\w/.-])(?:valid|validation|val|eval|evaluation|evaluating|test|testing)(?![\w/.-])",
    re.IGNORECASE,
)
_MMENGINE = re.compile(r"\b(Epoch|Iter)\((\w++)\)\s*+\[\s*+(\d++)\s*+\](?:\[\s*+(\d++)/(\d++)\])?")
_KERAS_HEADER = re.compile(r"\s*+Epoch\s++(\d++)/(\d++)\s*+$")
_KERAS_BATCH = re.compile(r"\s*+(\d++)/(\d++)\s++(?:\[|\u2501)")
_LIGHTNING = re.compile(r"Epoch\s++(\d++):\s*+\d++%\|[^|]*+\|\s*+(\d++)/(\d++)\s*+\[")
_PROSE_NONFINITE = re.compile(
    r"\bloss\W++(?:\w++\W++)?(?:nan|inf|infinity)\b"
    r"|\b(?:nan|inf|infinity|non-finite|nonfinite)\W++(?:\w++\W++)?loss\b",
    re.IGNORECASE,
)
_SCALE_TO = re.compile(rf"\bto:?\s*+({_NUM})", re.IGNORECASE)
_SAVE = re.compile(r"\bsav(?:e|ed|ing)\b", re.IGNORECASE)
_CKPT_STEP = (
    (re.compile(r"global_step(\d++)"), "step"),
    (re.compile(r"checkpoint-(\d++)"), "step"),
    (re.compile(r"at iteration\s++(\d++)", re.IGNORECASE), "step"),
    (re.compile(r"@\s*+(\d++)\s++updates"), "step"),
    (re.compile(r"\bat\s++(\d++)\s++iter", re.IGNORECASE), "step"),
    (re.compile(r"global[ _]step\s*+(\d++)", re.IGNORECASE), "step"),
    (re.compile(r"\bat\s++(\d++)\s++epoch", re.IGNORECASE), "epoch"),
    (re.compile(r"^\s*+Epoch\s++(\d++)", re.IGNORECASE), "epoch"),
)


def _wordy(segment: str) -> tuple[str, str] | None:
    """``lm loss: 2.3`` / ``Current learning rate is 0.04``: a key of several words."""
    for sep in (":", " is "):
        at = segment.find(sep)
        if at <= 0:
            continue
        key = segment[:at]
        if " " in key.strip() and _WORDY_KEY.fullmatch(key):
            num = _NUM_AT.match(segment, at + len(sep))
            if num is not None:
                return key.strip(), num.group(1)
    return None


def _dict_line(text: str) -> dict[str, Any] | None:
    """A printed dict (Hugging Face Trainer: ``{'loss': 2.41, 'grad_norm': nan, ...}``)."""
    try:
        rec = ast.literal_eval(text)  # literals only, never eval
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pairs = _QUOTED_PAIR.findall(text)  # bare nan/inf are no Python literals
        return {k: v for k, v in pairs} or None
    return rec if isinstance(rec, dict) else None


def _pairs(line: str) -> dict[str, float]:
    row: dict[str, float] = {}
    text = line.strip()
    if text.startswith("{") and text.endswith("}") and (rec := _dict_line(text)) is not None:
        for key, value in rec.items():
            num = to_float(value)
            if num is not None:
                row.setdefault(norm_key(str(key)), num)
        return row
    for segment in _SEGMENTS.split(line):
        wordy = _wordy(segment)
        found = [wordy] if wordy else _PAIR.findall(segment)
        for key, value in found:
            row.setdefault(norm_key(key), float(value))
    return row


class _Context:
    """State carried from line to line: the Keras epoch header."""

    def __init__(self) -> None:
        self.keras_epoch: int | None = None


def _counters(line: str, row: dict[str, float], ctx: _Context) -> str | None:
    """Set counters from the trainer's own shapes; return the mode (``train``/``val``) if said."""
    if (m := _MMENGINE.search(line)) is not None:
        kind, mode, first, i, n = m.groups()
        if kind == "Iter":
            row["iteration"] = float(first)
        elif i is not None:
            row["iteration"] = (int(first) - 1) * int(n) + float(i)
        return mode.lower()
    if (m := _LIGHTNING.search(line)) is not None:
        row["epoch"] = int(m.group(1)) + int(m.group(2)) / int(m.group(3))
    elif ctx.keras_epoch is not None and (m := _KERAS_BATCH.match(line)) is not None:
        row["epoch"] = ctx.keras_epoch - 1 + int(m.group(1)) / int(m.group(2))
    return None


def _checkpoint(line: str, row: dict[str, float]) -> dict[str, Any]:
    event: dict[str, Any] = {"kind": "checkpoint", "text": line.strip()[:200]}
    for pattern, unit in _CKPT_STEP:
        if (m := pattern.search(line)) is not None:
            event.update(at=float(m.group(1)), unit=unit)
            break
    return event


def parse_line(line: str, ctx: _Context | None = None) -> tuple[dict[str, float], str, list[dict]]:
    """One line: ``(values by normalised key, 'train'|'eval', signal events)``."""
    ctx = ctx or _Context()
    low = line.lower()
    events: list[dict[str, Any]] = []
    if (m := _KERAS_HEADER.match(line)) is not None:
        ctx.keras_epoch = int(m.group(1))
        return {}, "train", events
    if "overflow" in low and ("skip" in low or "scale" in low):
        scale = _SCALE_TO.search(line)
        events.append({"kind": "overflow", "scale": float(scale.group(1)) if scale else None})
        return {}, "train", events
    if ("checkpoint" in low or "model" in low or "ckpt" in low) and _SAVE.search(line):
        events.append(_checkpoint(line, {}))
        return {}, "train", events
    row = _pairs(line)
    mode = _counters(line, row, ctx)
    losses = [k for k in row if role_of(k) == "loss"]
    is_eval = mode in ("val", "test") or (
        mode is None
        and (_EVAL_WORD.search(line) is not None or (losses and all(map(is_eval_key, losses))))
    )
    if (
        not any(role_of(k) == "loss" and not is_eval_key(k) for k in row)
        and ("nan" in low or "inf" in low or "finite" in low)
        and _PROSE_NONFINITE.search(line)
    ):
        events.append({"kind": "nonfinite", "text": line.strip()[:200]})
    return row, "eval" if is_eval else "train", events


def read_text(path: Path, keep: set[str]) -> Table:
    """Read a text log line by line (bounded memory: only keys with a role are kept)."""
    table = Table("text", Columns(keep), Columns(keep))
    ctx = _Context()
    pending: list[dict[str, Any]] = []
    with path.open(encoding="utf-8", errors="replace", newline="") as fh:
        for physical in fh:
            for line in physical.split("\r"):  # progress bars redraw with carriage returns
                if not line.strip():
                    continue
                row, tag, events = parse_line(line, ctx)
                for ev in events:
                    ev["prev_row"] = table.train.n - 1 if table.train.n else None
                pending.extend(events)
                cols = table.eval if tag == "eval" else table.train
                kept = {k: v for k, v in row.items() if cols.wanted(k)}
                if any(role_of(k) != "step" or k in cols.keep for k in kept):
                    index = cols.add(kept)
                    if tag == "train":
                        for ev in pending:
                            ev["row"] = index
                        table.events.extend(pending)
                        pending = []
    for ev in pending:
        ev["row"] = table.train.n - 1 if table.train.n else None
    table.events.extend(pending)
    return table
