"""``datacheck logs``: read a training history and find where it started to go wrong.

Reads loss, grad norm and learning rate per step from text logs (``step 10 loss 2.3``,
``key=value``, Megatron-style ``key: value |`` lines), JSON Lines (including the training
guard's own log), CSV, and TensorBoard event files (through the ``tensorboard`` package).  The
keys are discovered, not assumed.  The analysis walks the history once:

    stable -> precursor (grad-norm spike) -> warning (loss >= factor x recent median)
           -> danger (the jump persists, or reaches factor**2) -> NaN

and names the last step before trouble (where to restart) and a suggested LR.  No torch here.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datacheck._jsonl import read_records
from datacheck.checks._spike import GRAD_NORM, LOSS, SpikeConfig, SpikeDetector, Verdict
from datacheck.errors import InputError

__all__ = ["History", "Timeline", "analyze", "read_history", "render_text"]

_NUM = r"[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)(?![\w.])"
_PAIR = re.compile(rf"([A-Za-z_][\w./-]*)\s*[:=]?\s*({_NUM})", re.IGNORECASE)
_QUOTED_PAIR = re.compile(rf"[\'\"]([A-Za-z_][^\'\"]*)[\'\"]\s*:\s*({_NUM})", re.IGNORECASE)
_WORDY = re.compile(rf"^\s*([A-Za-z_][\w ./()-]*?)\s*:\s*({_NUM})", re.IGNORECASE)  # "lm loss: 2.3"
_STEP_KEYS = (
    "step",
    "global_step",
    "iteration",
    "iter",
    "it",
    "_step",
    "trainer_global_step",
    "steps",
)
_LOSS_PREF = ("loss", "train_loss", "lm_loss", "training_loss", "train_lm_loss")
_NOT_TRAIN_LOSS = ("val", "eval", "test", "scale", "valid", "dev")


@dataclass
class History:
    """A training history: per-step values under discovered keys, plus guard events."""

    source: str
    format: str
    steps: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    grad_norm: list[float | None] = field(default_factory=list)
    lr: list[float | None] = field(default_factory=list)
    keys: dict[str, str | None] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Timeline:
    """What the analysis found; steps are ``None`` where nothing was found."""

    status: str
    """``healthy``, ``warning`` (grad norm only), ``spike``, ``diverging`` or ``nan``."""
    steps: int
    level: float | None = None
    """The loss level: the baseline median at the warning, else at the end."""
    threshold: float | None = None
    """The loss a spike had to reach against that level (the ratio test)."""
    warning_step: float | None = None
    warning_loss: float | None = None
    danger_step: float | None = None
    nan_step: float | None = None
    precursor_step: float | None = None
    precursor_grad_norm: float | None = None
    precursor_lead: float | None = None
    """Steps between the grad-norm precursor and the loss warning (or NaN)."""
    grad_warning_step: float | None = None
    """Onset of the first sustained grad-norm spike (an early warning on its own)."""
    grad_warning_norm: float | None = None
    blips: tuple[float, ...] = ()
    """Loss spikes of one reading that returned to the level at once (not divergence)."""
    grad_blips: tuple[float, ...] = ()
    restart_step: float | None = None
    restart_from: str | None = None
    """``checkpoint`` (named in the log) or ``last healthy step``."""
    restart_lr: float | None = None
    suggested_lr: float | None = None
    guard_events: dict[str, int] = field(default_factory=dict)


# -- reading -------------------------------------------------------------------------------


def _to_float(value: Any) -> float | None:
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


def _norm_key(key: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_") or key


def _flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}/"))
        else:
            out[name] = value
    return out


def _parse_text_line(line: str) -> dict[str, Any]:
    if (rec := _parse_dict_line(line)) is not None:
        return rec
    row: dict[str, Any] = {}
    for segment in re.split(r"\s[|,]\s?|,\s|\t", line):
        wordy = _WORDY.match(segment)
        pairs = [wordy.groups()] if wordy and " " in wordy.group(1) else _PAIR.findall(segment)
        for key, value in pairs:
            row.setdefault(_norm_key(key), float(value))
    return row


def _rows_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows, events = [], []
    try:
        records = read_records(path)  # a torn last line (a crash mid-write) is dropped
    except InputError as exc:
        raise InputError(f"{exc}; is it a text log?") from exc
    for rec in records:
        if rec.get("kind") not in (None, "step"):
            events.append(rec)
        rows.append(_drop_overflow({_norm_key(k): v for k, v in _flatten(rec).items()}))
    return rows, events


def _rows_jsonl_or_text(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """JSON Lines; a log sniffed as JSON (no .jsonl name) that is not all JSON is read as text."""
    try:
        return (*_rows_jsonl(path), "jsonl")
    except InputError:
        if path.name.lower().endswith((".jsonl", ".ndjson")):
            raise
        return _rows_text(path), [], "text"


def _drop_overflow(row: dict[str, Any]) -> dict[str, Any]:
    """A GradScaler overflow row's Inf/NaN is fp16 overflow (skipped, info), not divergence."""
    if row.get("kind") != "scaler_overflow" and row.get("action") != "scaler_skip":
        return row
    return {k: v for k, v in row.items() if (f := _to_float(v)) is None or math.isfinite(f)}


def _rows_csv(path: Path) -> list[dict[str, Any]]:
    delimiter = "\t" if path.name.lower().endswith(".tsv") else ","
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh, delimiter=delimiter)
        return [{_norm_key(k): v for k, v in rec.items() if k} for rec in reader]


def _rows_text(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8", errors="replace") as fh:
        return [row for line in fh if (row := _parse_text_line(line))]


def _parse_dict_line(line: str) -> dict[str, Any] | None:
    """A printed dict (Hugging Face Trainer: ``{'loss': 2.41, 'grad_norm': nan, ...}``)."""
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        rec = ast.literal_eval(text)  # literals only, never eval
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pairs = _QUOTED_PAIR.findall(text)  # bare nan/inf are no Python literals
        return {_norm_key(k): float(v) for k, v in pairs} or None
    if not isinstance(rec, dict):
        return None
    return {_norm_key(str(k)): v for k, v in _flatten(rec).items()}


def _rows_tensorboard(path: Path) -> list[dict[str, Any]]:
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError as exc:
        raise InputError(
            f"'{path}' is a TensorBoard event file: reading it needs the tensorboard package "
            "(pip install tensorboard)"
        ) from exc
    acc = event_accumulator.EventAccumulator(
        str(path), size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    by_step: dict[int, dict[str, Any]] = {}
    for tag in acc.Tags().get("scalars", []):
        for ev in acc.Scalars(tag):
            by_step.setdefault(ev.step, {"step": ev.step})[_norm_key(tag)] = ev.value
    return [by_step[s] for s in sorted(by_step)]


def _pick(keys: set[str], exact: tuple[str, ...], test: Any) -> str | None:
    for key in exact:
        if key in keys:
            return key
    found = sorted((k for k in keys if test(k)), key=len)
    return found[0] if found else None


def _discover(rows: list[dict[str, Any]]) -> dict[str, str | None]:
    keys = {k for row in rows for k, v in row.items() if _to_float(v) is not None}

    def is_loss(k: str) -> bool:
        return "loss" in k and not any(
            bad in k.split("_") or k.startswith(bad) for bad in _NOT_TRAIN_LOSS
        )

    return {
        "step": _pick(keys, _STEP_KEYS, lambda k: k.endswith("_step") or k.endswith("iteration")),
        "loss": _pick(keys, _LOSS_PREF, is_loss),
        "grad_norm": _pick(
            keys, ("grad_norm", "gnorm", "total_norm"), lambda k: "grad" in k and "norm" in k
        ),
        "lr": _pick(
            keys, ("lr", "learning_rate"), lambda k: k.endswith("_lr") or "learning_rate" in k
        ),
    }


def _sniff(path: Path) -> str:
    name = path.name.lower()
    if "tfevents" in name:
        return "tensorboard"
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith((".csv", ".tsv")):
        return "csv"
    with path.open("rb") as fh:
        first = next((line for line in fh if line.strip()), b"")
    try:  # a printed config or a Hugging Face Trainer dict starts with "{" too
        return "jsonl" if isinstance(json.loads(first), dict) else "text"
    except ValueError:
        return "text"


def read_history(path: str | Path) -> History:
    """Read a training history file; the format and the keys are discovered.

    Raises:
        InputError: if the file is missing, unreadable, or has no loss values.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(
            f"'{path}': no such file (give a train log, metrics.jsonl/.csv or a tfevents file)"
        )
    fmt, events = _sniff(path), []
    try:
        if fmt == "jsonl":
            rows, events, fmt = _rows_jsonl_or_text(path)
        else:
            rows = {"csv": _rows_csv, "text": _rows_text, "tensorboard": _rows_tensorboard}[fmt](
                path
            )
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"'{path}': cannot read it as {fmt} ({exc})") from exc
    keys = _discover(rows)
    if keys["loss"] is None:
        seen = sorted({k for row in rows for k in row})[:20]
        raise InputError(f"'{path}': no training loss found ({fmt}; keys seen: {seen or 'none'})")
    return _build(path, fmt, rows, keys, events)


def _build(
    path: Path,
    fmt: str,
    rows: list[dict[str, Any]],
    keys: dict[str, str | None],
    events: list[dict[str, Any]],
) -> History:
    hist = History(str(path), fmt, keys=keys, events=events)
    merged: dict[float, dict[str, Any]] = {}
    for n, row in enumerate(rows):
        loss = _to_float(row.get(keys["loss"]))
        if loss is None:
            continue
        step = _to_float(row.get(keys["step"])) if keys["step"] else None
        step = float(n) if step is None else step
        merged.setdefault(step, {"loss": loss, "grad_norm": None, "lr": None})
        for name in ("grad_norm", "lr"):
            if keys[name] and merged[step][name] is None:
                merged[step][name] = _to_float(row.get(keys[name]))
    for step in sorted(merged):
        hist.steps.append(step)
        hist.loss.append(merged[step]["loss"])
        hist.grad_norm.append(merged[step]["grad_norm"])
        hist.lr.append(merged[step]["lr"])
    return hist


# -- analysis ------------------------------------------------------------------------------


@dataclass
class _Scan:
    """What one pass over the history found (mutable; becomes a :class:`Timeline`)."""

    pending: tuple[float, float, float] | None = None  # (step, loss, level) of an open spike
    warning: tuple[float, float, float] | None = None
    danger_step: float | None = None
    nan_step: float | None = None
    blips: list[float] = field(default_factory=list)
    grad_spikes: list[tuple[float, float]] = field(default_factory=list)
    grad_blips: list[float] = field(default_factory=list)
    grad_warning: tuple[float, float] | None = None
    grad_open: tuple[float, float] | None = None

    def loss(self, step: float, loss: float, v: Verdict) -> None:
        if v.kind == "spike" and self.warning is None:
            assert v.level is not None
            self.pending = (step, loss, v.level)
        elif v.kind == "sustained" and self.pending is not None:
            self.warning, self.pending, self.danger_step = self.pending, None, step
        elif v.kind == "sustained" and self.warning is not None and self.danger_step is None:
            self.danger_step = step
        elif v.recovered and self.pending is not None:
            if v.blip_step is not None:
                self.blips.append(v.blip_step)
            else:
                self.warning = self.pending
            self.pending = None

    def grad(self, step: float, gnorm: float, v: Verdict) -> None:
        if v.kind == "spike":
            self.grad_spikes.append((step, gnorm))
            self.grad_open = (step, gnorm)
        elif v.kind == "sustained":
            self.grad_spikes.append((step, gnorm))
            if self.grad_warning is None and self.grad_open is not None:
                self.grad_warning = self.grad_open
        elif v.blip_step is not None:
            self.grad_blips.append(v.blip_step)

    def close(self) -> None:
        """The log ended (or hit NaN) with a spike still open: it counts as the warning."""
        if self.pending is not None and self.warning is None:
            self.warning, self.pending = self.pending, None


def analyze(
    hist: History,
    *,
    loss: SpikeConfig = LOSS,
    grad_norm: SpikeConfig = GRAD_NORM,
    lookback: int = 200,
) -> Timeline:
    """Walk the history once with the shared spike detector (:mod:`datacheck.checks._spike`).

    Finds the loss warning (the first spike that is not a one-reading blip), the danger step
    (the spike persists), the first NaN, the grad-norm early warning and precursor, and where
    to restart.
    """
    loss_det, grad_det = SpikeDetector(loss), SpikeDetector(grad_norm)
    scan = _Scan()
    for i, (step, value) in enumerate(zip(hist.steps, hist.loss, strict=True)):
        gnorm = hist.grad_norm[i]
        if not math.isfinite(value) or (gnorm is not None and not math.isfinite(gnorm)):
            scan.nan_step = step
            break
        if gnorm is not None:
            scan.grad(step, gnorm, grad_det.update(gnorm, step))
        scan.loss(step, value, loss_det.update(value, step))
    scan.close()
    return _conclude(hist, scan, loss_det, loss, lookback)


def _conclude(
    hist: History, scan: _Scan, det: SpikeDetector, cfg: SpikeConfig, lookback: int
) -> Timeline:
    found: dict[str, Any] = {"level": det.level}
    if scan.warning is not None:
        step, value, level = scan.warning
        found.update(warning_step=step, warning_loss=value, level=level)
    if scan.grad_warning is not None:
        found.update(grad_warning_step=scan.grad_warning[0], grad_warning_norm=scan.grad_warning[1])
    trouble = found.get("warning_step", scan.nan_step)
    if trouble is not None:
        onset = _precursor(scan.grad_spikes, trouble, lookback)
        if onset is not None:
            found.update(
                precursor_step=onset[0],
                precursor_grad_norm=onset[1],
                precursor_lead=trouble - onset[0],
            )
    first_sign = min(
        (
            s
            for s in (trouble, found.get("precursor_step"), found.get("grad_warning_step"))
            if s is not None
        ),
        default=None,
    )
    if first_sign is not None:
        _restart(hist, found, first_sign)
    status = (
        "nan"
        if scan.nan_step is not None
        else "diverging"
        if scan.danger_step is not None
        else "spike"
        if scan.warning is not None
        else "warning"
        if scan.grad_warning is not None
        else "healthy"
    )
    counts: dict[str, int] = {}
    for ev in hist.events:
        counts[str(ev.get("kind"))] = counts.get(str(ev.get("kind")), 0) + 1
    level = found["level"]
    return Timeline(
        status=status,
        steps=len(hist.steps),
        threshold=None if level is None or level <= 0 else cfg.ratio * level,
        danger_step=scan.danger_step,
        nan_step=scan.nan_step,
        blips=tuple(scan.blips),
        grad_blips=tuple(scan.grad_blips),
        guard_events=counts,
        **found,
    )


def _precursor(
    spikes: list[tuple[float, float]], trouble: float, gap: int
) -> tuple[float, float] | None:
    """Onset of the run of grad-norm spikes leading into the trouble (no gap over ``gap`` steps)."""
    onset = None
    for step, gnorm in reversed(spikes):
        if step >= trouble:  # the same step is no early warning
            continue
        if step < (trouble if onset is None else onset[0]) - gap:
            break
        onset = (step, gnorm)
    return onset


def _restart(hist: History, found: dict[str, Any], first_sign: float) -> None:
    before = [i for i, s in enumerate(hist.steps) if s < first_sign]
    if not before:
        return
    checkpoints = [
        float(e["at_step"]) for e in hist.events if e.get("kind") == "checkpoint" and "at_step" in e
    ]
    good = [c for c in checkpoints if c < first_sign]
    # A guard checkpoint "at step N" holds the state before step N ran: its LR is step N-1's.
    restart = max(good) if good else hist.steps[before[-1]]
    found["restart_step"] = restart
    found["restart_from"] = "checkpoint" if good else "last healthy step"
    lrs = [
        lr
        for s, lr in zip(hist.steps, hist.lr, strict=True)
        if lr is not None and (s < restart or (s == restart and not good))
    ]
    if lrs:
        found.update(restart_lr=lrs[-1], suggested_lr=lrs[-1] / 2)


# -- output and the CLI --------------------------------------------------------------------


def _s(step: float | None) -> str:
    return "-" if step is None else f"{step:g}"


def render_text(hist: History, tl: Timeline) -> str:
    """The timeline as a few readable lines."""
    keys = ", ".join(f"{k}={v}" for k, v in hist.keys.items() if v)
    lines = [f"{hist.source}: {hist.format}, {tl.steps} steps ({keys})", f"status: {tl.status}"]
    if tl.level is not None:
        lines.append(f"  stable     loss level {tl.level:.4g} (running median)")
    if tl.blips:
        shown = ", ".join(_s(b) for b in tl.blips[:5]) + (" ..." if len(tl.blips) > 5 else "")
        lines.append(
            f"  blips      {len(tl.blips)} one-reading loss spike(s), back at once: {shown}"
        )
    if tl.grad_warning_step is not None:
        lines.append(
            f"  grad norm  step {_s(tl.grad_warning_step)}: {tl.grad_warning_norm:.4g}, "
            "a sustained grad-norm spike (early warning)"
        )
    if tl.precursor_step is not None:
        lines.append(
            f"  precursor  step {_s(tl.precursor_step)}: grad norm {tl.precursor_grad_norm:.4g}, "
            f"{_s(tl.precursor_lead)} steps before the loss"
        )
    if tl.warning_step is not None:
        lines.append(
            f"  warning    step {_s(tl.warning_step)}: loss {tl.warning_loss:.4g} "
            f"({tl.warning_loss / tl.level:.1f}x the level {tl.level:.4g})"
        )
    if tl.danger_step is not None:
        lines.append(f"  danger     step {_s(tl.danger_step)}: the jump persists")
    if tl.nan_step is not None:
        lines.append(f"  NaN        step {_s(tl.nan_step)}")
    if tl.restart_step is not None:
        lr = (
            f"; suggested LR {tl.suggested_lr:.3g} (half of {tl.restart_lr:.3g})"
            if tl.suggested_lr
            else ""
        )
        lines.append(
            f"restart from step {_s(tl.restart_step)} ({tl.restart_from} before trouble){lr}"
        )
    if tl.guard_events:
        lines.append(
            "guard events: " + ", ".join(f"{k} {n}" for k, n in sorted(tl.guard_events.items()))
        )
    return "\n".join(lines)
