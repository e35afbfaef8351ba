"""The training guard's event log (JSON Lines, TensorBoard), and naming the samples behind an event."""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from datacheck._jsonl import JsonlWriter, json_safe, read_records
from datacheck.errors import UsageError
from datacheck.torch._identity import SampleKey, as_sample_key, as_sample_keys, record_fields
from datacheck.torch._quarantine import QuarantineWriter

__all__ = [
    "EventLog",
    "bad_steps",
    "guard_quarantine",
    "name_samples",
    "quarantine_records",
]


class EventLog:
    """Append-only JSON Lines file (each line flushed as written) and/or TensorBoard scalars."""

    def __init__(self, path: Path | None, tensorboard_dir: Path | None = None) -> None:
        self.path = path
        self._fh: Any = None
        self._tb: Any = None
        if path is not None:
            self._fh = JsonlWriter(path)
        if tensorboard_dir is not None:
            self._tb = _summary_writer(tensorboard_dir)

    def write(self, record: dict[str, Any]) -> None:
        """Write one record (NaN/Inf become the strings "nan"/"inf" so lines stay strict JSON)."""
        if self._fh is not None:
            self._fh.write([{"time": round(time.time(), 3), **record}])
        if self._tb is not None:
            self._write_tb(record)

    def _write_tb(self, record: dict[str, Any]) -> None:
        step, kind = int(record["step"]), record["kind"]
        if kind == "step":
            for name in ("loss", "grad_norm", "lr"):
                if isinstance(record.get(name), float) and math.isfinite(record[name]):
                    self._tb.add_scalar(f"guard/{name}", record[name], step)
            return
        self._tb.add_scalar(f"guard/event/{kind}", 1.0, step)
        text = json.dumps(json_safe({k: v for k, v in record.items() if k != "hosts"}))
        self._tb.add_text("guard/events", text, step)
        self._tb.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def _summary_writer(log_dir: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise UsageError(
            f"TrainingGuard(tensorboard='{log_dir}') needs the tensorboard package "
            "(pip install tensorboard), or leave tensorboard=None"
        ) from exc
    return SummaryWriter(log_dir=str(log_dir))


MAD_TO_SIGMA = 1.4826
OUTLIER_SIGMAS = 6.0
"""A per-sample loss this many robust standard deviations above its batch's median ..."""
OUTLIER_RATIO = 4.0
"""... and at least this many times that median is an outlier within its batch."""
OUTLIER_GAP = 10.0
"""Outliers are named only when the smallest named loss is this many times the largest one
left: a poisoned sample's loss (1e27 after a 1e30 feature) stands apart; a hard clean sample's
(a few times the rest) does not."""


def name_samples(
    indices: Sequence[SampleKey] | None,
    sample_losses: torch.Tensor | None,
    *,
    outliers: bool,
    threshold: float | None = None,
    floor: float | None = None,
) -> list[dict[str, Any]]:
    """The samples behind a bad step, named only on per-sample evidence.

    Evidence is a non-finite per-sample loss; or, when ``outliers``, losses that are outliers
    within their batch (robust z and ratio to the batch median), a few of them, whose removal
    brings this batch's mean under the spike ``threshold`` (when given), each at or above
    ``floor`` (the run's start level, when known: an untrained model's guess).  On a model near
    zero loss a hard clean sample stands 100x above its batch (0.1 against 0.001) but is no
    worse than a guess; a poisoned or mislabelled one is.  A batch whose loss is high as a
    whole names nothing (its samples are not to blame one by one), nor does a batch whose mean
    is under the threshold (another rank's spike).
    """
    if sample_losses is None or sample_losses.numel() == 0:
        return []
    values = sample_losses.detach().float().reshape(-1).tolist()
    idx = as_sample_keys(indices) if indices is not None else []
    names: list[Any] = idx if len(idx) == len(values) else list(range(len(values)))
    bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
    if bad:
        return [{"index": names[i], "check": "nonfinite_loss", "loss": values[i]} for i in bad]
    if not outliers or (threshold is not None and not sum(values) / len(values) >= threshold):
        return []
    out = _outliers(values, threshold)
    if floor is not None and any(values[i] < floor for i in out):
        return []  # no worse than the untrained model did on average: no evidence
    return [{"index": names[i], "check": "loss_outlier", "loss": values[i]} for i in out]


def _outliers(values: list[float], threshold: float | None) -> list[int]:
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    bound = max(med + OUTLIER_SIGMAS * MAD_TO_SIGMA * mad, OUTLIER_RATIO * med if med > 0 else med)
    order = sorted((i for i, v in enumerate(values) if v > bound), key=lambda i: -values[i])
    if len(order) > len(values) // 4:  # not a few samples: the batch as a whole
        return []
    rest = sorted(values, reverse=True)
    rest_sum, rest_n = sum(values), len(values)
    for k, i in enumerate(order, 1):
        rest_sum, rest_n = rest_sum - values[i], rest_n - 1
        # named only when far apart from every sample left (a hard clean sample is not)
        apart = values[i] >= OUTLIER_GAP * max(rest[k], 1e-12)
        if apart and (threshold is None or (rest_n and rest_sum / rest_n < threshold)):
            return order[:k]
    return []


SKIPPED_KINDS = frozenset({"nonfinite", "loss_spike"})
"""Event kinds whose step was skipped (the batch did not reach the weights)."""


def bad_steps(log: str | Path, *, name: str | None = None) -> set[int]:
    """Steps a guard log recorded as skipped, so a restarted job can skip them too.

    A ``resume`` record (written by ``TrainingGuard.load_state_dict``) at step ``R`` drops the
    earlier records of steps ``>= R``: the resumed run replays those steps.

    Args:
        log: the guard's JSON Lines log (one rank's file).
        name: only the guard of this ``name`` (two guards may share one log).
    """
    steps: set[int] = set()
    for rec in read_records(log):
        if name is not None and rec.get("guard") != name:
            continue
        if rec.get("kind") == "resume":
            at = int(rec["step"])
            steps = {s for s in steps if s < at}
        elif (
            rec.get("kind") in SKIPPED_KINDS
            and not rec.get("dropped")
            and rec.get("action", "skip") == "skip"  # a loss spike is stepped (skip-and-clip)
        ):
            steps.add(int(rec["step"]))
    return steps


def guard_quarantine(folder: str, rank: int) -> QuarantineWriter:
    """A writer for the guard's own file in a runtime quarantine folder.

    ``quarantine-rank00002-guard.jsonl`` sits beside the loader's ``quarantine-rank00002.jsonl``
    (the loader and ``read_quarantine`` read both) without two handles appending to one file.
    """
    return QuarantineWriter(folder, rank, suffix="-guard")


def quarantine_records(
    samples: list[dict[str, Any]], epoch: int, step: int, rank: int
) -> list[dict[str, Any]]:
    """Quarantine manifest rows for samples named by :func:`name_samples`.

    ``epoch`` and ``step`` mean what they mean in the loader's rows: the loader's epoch and the
    batch's position in it.
    """
    now = datetime.now(timezone.utc).isoformat()
    return [
        {
            **record_fields(as_sample_key(s["index"])),
            "check": s["check"],
            "severity": "error",
            "key": "loss",
            "value": json_safe(s["loss"]) if not math.isfinite(s["loss"]) else f"{s['loss']:.6g}",
            "count": 1,
            "rank": rank,
            "epoch": epoch,
            "step": step,
            "time": now,
        }
        for s in samples
    ]
