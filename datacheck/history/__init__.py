"""Training histories: readers for every log shape, one per family, and the chosen series.

    text (_text)  jsonl + guard log (_jsonl)  csv/tsv (_csv)  TensorBoard (_tensorboard)
    trainer_state.json (_hf)  ->  Table (_table)  ->  keys (_keys)  ->  History (_build)

``datacheck._logs`` is the ``datacheck logs`` command's entry; the timeline analysis over a
:class:`History` is in :mod:`datacheck.history._timeline`.  No torch, no pandas here.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from datacheck.errors import InputError
from datacheck.history._build import History, build
from datacheck.history._csv import read_csv
from datacheck.history._hf import is_trainer_state, read_trainer_state
from datacheck.history._jsonl import read_jsonl
from datacheck.history._keys import Overrides
from datacheck.history._table import Table
from datacheck.history._tensorboard import read_tensorboard
from datacheck.history._text import read_text

__all__ = ["History", "Overrides", "read_history", "sniff"]


def sniff(path: Path) -> str:
    """``tensorboard``, ``trainer_state``, ``jsonl``, ``csv`` or ``text``."""
    name = path.name.lower()
    if path.is_dir() or "tfevents" in name:
        return "tensorboard"
    if is_trainer_state(path):
        return "trainer_state"
    if name.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if name.endswith((".csv", ".tsv")):
        return "csv"
    with path.open("rb") as fh:
        first = next((line for line in fh if line.strip()), b"")
    try:  # a printed config or a Hugging Face Trainer dict starts with "{" too
        return "jsonl" if isinstance(json.loads(first), dict) else "text"
    except RecursionError:
        return "jsonl"  # an object nested too deep to decode: the reader says so per record
    except ValueError:
        return "text"


def _read(path: Path, fmt: str, keep: set[str]) -> Table:
    if fmt == "jsonl":
        try:
            return read_jsonl(path, keep)
        except InputError:
            if path.name.lower().endswith((".jsonl", ".ndjson")):
                raise
            return read_text(path, keep)  # sniffed as JSON, but not all JSON: a text log
    readers = {
        "csv": read_csv,
        "text": read_text,
        "tensorboard": read_tensorboard,
        "trainer_state": read_trainer_state,
    }
    return readers[fmt](path, keep)


def read_history(path: str | Path, overrides: Overrides | None = None) -> History:
    """Read a training history (a file, or a TensorBoard run folder); format and keys discovered.

    Raises:
        InputError: the path is missing or unreadable, a key named in ``overrides`` is absent,
            or the log holds neither a loss nor a grad norm nor a NaN signal.
    """
    path = Path(path)
    overrides = overrides or Overrides()
    if not path.exists():
        raise InputError(
            f"'{path}': no such file (give a train log, metrics.jsonl/.csv, trainer_state.json, "
            "a tfevents file or a TensorBoard run folder)"
        )
    fmt = sniff(path)
    try:
        table = _read(path, fmt, overrides.names())
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"'{path}': cannot read it as {fmt} ({exc})") from exc
    return build(table, overrides, str(path))
