"""The signals of a text-log line that are no ``key value`` readings: fp16 overflows and the
loss scale they name, saved checkpoints, and non-finite losses said in words.

* **overflows**: DeepSpeed's ``OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536,
  reducing to 32768`` (and, with hysteresis, ``... but hysteresis is 2. Reducing hysteresis to
  1``: no fall), fairseq's ``overflow detected, setting loss scale to: 64.0``, apex's ``Gradient
  overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0``; a scale that cannot
  fall (``reducing to 1`` from 1: DeepSpeed's default ``min_loss_scale``, or the same scale
  on more overflows in a row than a delayed shift allows) is the floor, where every overflowing
  step is skipped and the run learns nothing;
* **checkpoints**: Megatron, DeepSpeed ``global_stepN``, Hugging Face ``checkpoint-N``, fairseq
  ``@ N updates``, mmengine, Keras, Lightning, nanoGPT;
* **non-finite losses in words**: ``NaN loss detected``, detectron2's ``Loss became infinite or
  NaN at iteration=2137!``, ``loss is not finite``.
"""

from __future__ import annotations

import re
from typing import Any

from datacheck.history._fields import NUM

__all__ = ["PROSE_NONFINITE", "signal"]

PROSE_NONFINITE = re.compile(
    r"\bloss\W++(?:\w++\W++){0,3}?(?:nan|inf|infinity|infinite|non-finite|not\W++finite)\b"
    r"|\b(?:nan|inf|infinity|non-finite|nonfinite|invalid)\W++(?:\w++\W++)?loss\b",
    re.IGNORECASE,
)
"""A non-finite loss in words: ``NaN loss detected``, detectron2's ``Loss became infinite or NaN
at iteration=2137!``, ``loss is not finite``."""
_ATTEMPTED = re.compile(rf"attempted loss scale:?\s*+({NUM}),\s*+reducing to:?\s*+({NUM})", re.I)
_SCALE_FROM = re.compile(rf"loss scale from\s*+({NUM})\s*+to:?\s*+({NUM})", re.IGNORECASE)
_SCALE_TO = re.compile(
    rf"(?:setting|reducing)(?:\s++loss)?+\s++scale\s++to:?\s*+(?:to\s++)?+({NUM})", re.I
)
_MIN_SCALE = re.compile(rf"minimum loss scale reached\s*+\(?\s*+({NUM})", re.IGNORECASE)
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


def _checkpoint(line: str) -> dict[str, Any]:
    event: dict[str, Any] = {"kind": "checkpoint", "text": line.strip()[:200]}
    for pattern, unit in _CKPT_STEP:
        if (m := pattern.search(line)) is not None:
            event.update(at=float(m.group(1)), unit=unit)
            break
    return event


def _scale_fall(line: str) -> dict[str, Any]:
    """The loss scale an overflow line names, whether it fell, and whether it stayed (DeepSpeed's
    first overflow with hysteresis only lowers the hysteresis: no fall; ``reducing to`` the same
    scale is a delayed shift (older DeepSpeed) or the floor, ``max(scale / factor,
    min_loss_scale)``: the timeline tells them apart)."""
    if (m := _ATTEMPTED.search(line)) is not None or (m := _SCALE_FROM.search(line)) is not None:
        before, after = float(m.group(1)), float(m.group(2))
        if after < before:
            return {"scale": after, "fell": True}
        return {"scale": after, "fell": False, "same": True} if after == before else _NONE
    if (m := _SCALE_TO.search(line)) is not None or (m := _MIN_SCALE.search(line)) is not None:
        return {"scale": float(m.group(1)), "fell": True}
    return _NONE


_NONE: dict[str, Any] = {"scale": None, "fell": False}


def signal(line: str, low: str) -> dict[str, Any] | None:
    """The signal event of a line (``overflow``, ``checkpoint``), or ``None``."""
    if "scale already at minimum" in low:  # DeepSpeed's raise_error_at_min_scale
        return {"kind": "overflow", "scale": None, "fell": False, "floor": True}
    if (
        ("overflow" in low and ("skip" in low or "scale" in low))
        or "minimum loss scale" in low
        or "loss scale from" in low
    ):
        return {"kind": "overflow", **_scale_fall(line)}
    if ("checkpoint" in low or "model" in low or "ckpt" in low) and _SAVE.search(line):
        return _checkpoint(line)
    return None
