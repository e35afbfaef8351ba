"""The training guard's event log (JSON Lines, TensorBoard), and naming the samples behind an event."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from datacheck.errors import UsageError
from datacheck.torch._quarantine import QuarantineWriter, rank_file

__all__ = ["EventLog", "bad_steps", "guard_quarantine", "name_samples", "quarantine_records"]


class EventLog:
    """Append-only JSON Lines file (each line flushed as written) and/or TensorBoard scalars."""

    def __init__(self, path: Path | None, tensorboard_dir: Path | None = None) -> None:
        self.path = path
        self._fh: Any = None
        self._tb: Any = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            _end_torn_line(path)
            self._fh = path.open("a", encoding="utf-8")
        if tensorboard_dir is not None:
            self._tb = _summary_writer(tensorboard_dir)

    def write(self, record: dict[str, Any]) -> None:
        """Write one record (NaN/Inf become the strings "nan"/"inf" so lines stay strict JSON)."""
        if self._fh is not None:
            line = json.dumps(
                _json_safe({"time": round(time.time(), 3), **record}), allow_nan=False
            )
            self._fh.write(line + "\n")
            self._fh.flush()
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
        text = json.dumps(_json_safe({k: v for k, v in record.items() if k != "hosts"}))
        self._tb.add_text("guard/events", text, step)
        self._tb.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def _end_torn_line(path: Path) -> None:
    """Before appending: a crash mid-write left a last line without its newline.

    A torn record (starts with ``{``, is not JSON) is cut off, so readers see only whole
    records; any other unterminated line is kept and ended with a newline.
    """
    if not path.is_file():
        return
    with path.open("rb+") as fh:
        size = fh.seek(0, 2)
        if size == 0:
            return
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        start = _last_line_start(fh, size)
        fh.seek(start)
        tail = fh.read(size - start)
        try:
            json.loads(tail)
        except ValueError:
            if tail.lstrip().startswith(b"{"):
                fh.truncate(start)
                return
        fh.seek(size)
        fh.write(b"\n")


def _last_line_start(fh: Any, size: int) -> int:
    pos = size
    while pos > 0:
        n = min(1 << 16, pos)
        pos -= n
        fh.seek(pos)
        cut = fh.read(n).rfind(b"\n")
        if cut >= 0:
            return pos + cut + 1
    return 0


def _summary_writer(log_dir: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise UsageError(
            f"TrainingGuard(tensorboard='{log_dir}') needs the tensorboard package "
            "(pip install tensorboard), or leave tensorboard=None"
        ) from exc
    return SummaryWriter(log_dir=str(log_dir))


def name_samples(
    indices: Sequence[int] | None,
    sample_losses: torch.Tensor | None,
    level: float | None,
    factor: float,
) -> dict[str, Any]:
    """Dataset indices behind a bad step: non-finite or spiking per-sample losses."""
    out: dict[str, Any] = {}
    idx = list(indices) if indices is not None else None
    if idx is not None:
        out["indices"] = idx[:1000]
    if sample_losses is None:
        return out
    values = sample_losses.detach().float().reshape(-1).tolist()
    names = idx if idx is not None and len(idx) == len(values) else list(range(len(values)))
    samples = [
        {"index": names[i], "check": "nonfinite_loss", "loss": v}
        for i, v in enumerate(values)
        if not math.isfinite(v)
    ]
    if not samples and level:
        samples = [
            {"index": names[i], "check": "loss_spike", "loss": v}
            for i, v in enumerate(values)
            if v >= factor * level
        ]
    out["samples"] = samples[:1000]
    return out


def _json_safe(obj: Any) -> Any:
    """NaN/Inf become strings so every line is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def bad_steps(log: str | Path) -> set[int]:
    """Steps a guard log recorded as skipped, so a restarted job can skip them too."""
    steps: set[int] = set()
    with Path(log).open(encoding="utf-8") as fh:
        lines = [line for line in fh if line.strip()]
    for n, line in enumerate(lines):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines) - 1:  # torn by a crash mid-write
                break
            raise
        if rec.get("kind") in ("nonfinite", "loss_spike") and not rec.get("dropped"):
            steps.add(int(rec["step"]))
    return steps


def guard_quarantine(folder: str, rank: int) -> QuarantineWriter:
    """A writer for the guard's own file in a runtime quarantine folder.

    ``quarantine-rank00002-guard.jsonl`` sits beside the loader's ``quarantine-rank00002.jsonl``
    (the loader and ``read_quarantine`` read both) without two handles appending to one file.
    """
    writer = QuarantineWriter(folder, rank)
    loader_file = rank_file(folder, rank)
    writer.path = loader_file.with_name(f"{loader_file.stem}-guard.jsonl")
    return writer


def quarantine_records(samples: list[dict[str, Any]], step: int, rank: int) -> list[dict[str, Any]]:
    """Quarantine manifest rows for samples named by :func:`name_samples`."""
    now = datetime.now(timezone.utc).isoformat()
    return [
        {
            "index": int(s["index"]),
            "check": s["check"],
            "severity": "error",
            "key": "loss",
            "value": _json_safe(s["loss"]) if not math.isfinite(s["loss"]) else f"{s['loss']:.6g}",
            "count": 1,
            "rank": rank,
            "epoch": 0,
            "step": step,
            "time": now,
        }
        for s in samples
    ]
