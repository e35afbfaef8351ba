"""Hugging Face ``trainer_state.json``: the Trainer's ``log_history``, one record per log.

Training records hold ``loss``, ``grad_norm``, ``learning_rate``, ``epoch`` and ``step``;
evaluation records hold ``eval_*`` keys (``eval_loss``, or one set per dataset such as
``eval_g0_loss``); the final summary (``train_runtime``, ``train_loss``) is neither.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from datacheck.errors import InputError
from datacheck.history._jsonl import flatten
from datacheck.history._table import Columns, Table, fields_of

__all__ = ["is_trainer_state", "read_trainer_state"]


def is_trainer_state(path: Path) -> bool:
    """A ``.json`` file that is one object with a ``log_history`` list."""
    if not path.name.lower().endswith(".json"):
        return False
    with path.open("rb") as fh:
        head = fh.read(1 << 16)
    return head.lstrip().startswith(b"{") and b'"log_history"' in head


def read_trainer_state(path: Path, keep: set[str]) -> Table:
    """Read ``log_history`` by its ``step`` key."""
    try:
        state: Any = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise InputError(f"'{path}': not JSON ({exc}); is it a trainer_state.json?") from exc
    except RecursionError as exc:
        raise InputError(
            f"'{path}': nested deeper than Python's recursion limit lets json decode; "
            "is it a trainer_state.json?"
        ) from exc
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise InputError(f"'{path}': no log_history list (is it a trainer_state.json?)")
    table = Table("trainer_state.json", Columns(keep), Columns(keep), counter="step")
    for rec in history:
        if not isinstance(rec, dict) or "train_runtime" in rec:
            continue
        row = {
            k: num
            for key, value in flatten(rec).items()
            for k, num in fields_of(key, value)
            if table.train.wanted(k)
        }
        table.add_row(row)
    return table
