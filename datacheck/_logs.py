"""``datacheck logs``: read a training history and find where it started to go wrong.

The readers (text logs as trainers print them, JSON Lines and the guard's own log, CSV,
TensorBoard files and run folders, ``trainer_state.json``) are in :mod:`datacheck.history`; the
analysis uses the spike detector ``TrainingGuard`` uses (:mod:`datacheck.checks._spike`), so
offline and online agree.  This module is the command's library entry and its text output.
No torch here.
"""

from __future__ import annotations

from datacheck.history import History, Overrides, read_history
from datacheck.history._timeline import Timeline, analyze

__all__ = ["History", "Overrides", "Timeline", "analyze", "read_history", "render_text"]


def _s(step: float | None) -> str:
    return "-" if step is None else f"{step:g}"


_ROLES = (("step", "step"), ("loss", "loss"), ("grad_norm", "grad norm"), ("lr", "lr"))


def _header(hist: History, tl: Timeline) -> list[str]:
    keys = ", ".join(f"{k}={v}" for k, v in hist.keys.items() if v)
    evals = f", {len(hist.eval_steps)} eval readings" if hist.eval_steps else ""
    more = f", {tl.readings} readings" if tl.readings != tl.steps else ""
    lines = [f"{hist.source}: {hist.format}, {tl.steps} steps{more}{evals} ({keys})"]
    for role, name in _ROLES:
        if hist.reasons.get(role):
            lines.append(f"  read {name:<9} {hist.reasons[role]}")
    lines += [f"note: {n}" for n in tl.notes]
    lines.append(f"status: {tl.status}")
    if tl.level is not None:
        lines.append(f"  stable     loss level {tl.level:.4g} (running median)")
    if tl.blips:
        shown = ", ".join(_s(b) for b in tl.blips[:5]) + (" ..." if len(tl.blips) > 5 else "")
        lines.append(
            f"  blips      {len(tl.blips)} one-reading loss spike(s), back at once: {shown}"
        )
    return lines


def _signs(tl: Timeline) -> list[str]:
    lines = []
    if tl.grad_warning_step is not None:
        lines.append(
            f"  grad norm  step {_s(tl.grad_warning_step)}: {tl.grad_warning_norm:.4g}, "
            "a sustained grad-norm spike (early warning)"
        )
    if tl.scale_warning_step is not None:
        lines.append(f"  fp16 scale step {_s(tl.scale_warning_step)}: {tl.scale_warning}")
    if tl.precursor_step is not None:
        lines.append(
            f"  precursor  step {_s(tl.precursor_step)}: grad norm {tl.precursor_grad_norm:.4g}, "
            f"{_s(tl.precursor_lead)} steps before the loss"
        )
    if tl.warning_step is not None:
        jump = (
            f" ({tl.warning_loss / tl.level:.1f}x the level {tl.level:.4g})"
            if tl.warning_loss is not None and tl.level
            else ""
        )
        loss = f": loss {tl.warning_loss:.4g}" if tl.warning_loss is not None else ""
        lines.append(f"  warning    step {_s(tl.warning_step)}{loss}{jump}")
    if tl.danger_step is not None:
        lines.append(f"  danger     step {_s(tl.danger_step)}: the jump persists")
    if tl.nan_step is not None:
        lines.append(f"  NaN        step {_s(tl.nan_step)} ({tl.nan_signal})")
    return lines


def render_text(hist: History, tl: Timeline) -> str:
    """The timeline as a few readable lines."""
    lines = _header(hist, tl) + _signs(tl)
    if tl.restart_step is not None:
        lr = ""
        if tl.suggested_lr and tl.restart_lr:
            raised = (
                f", the LR before it was raised at step {_s(tl.lr_raised_step)}"
                if tl.lr_raised_step is not None
                else ""
            )
            lr = f"; suggested LR {tl.suggested_lr:.3g} (half of {tl.restart_lr:.3g}{raised})"
        lines.append(
            f"restart from step {_s(tl.restart_step)} ({tl.restart_from} before trouble){lr}"
        )
    for ev in hist.events:
        if ev.get("kind") == "fallback" and "rank" in ev:
            lines.append(
                f"guard      fell back to skip-and-clip at step {_s(ev.get('step'))}: "
                f"{ev.get('message', '')}"
            )
    if tl.guard_events:
        lines.append(
            "guard events: " + ", ".join(f"{k} {n}" for k, n in sorted(tl.guard_events.items()))
        )
    return "\n".join(lines)
