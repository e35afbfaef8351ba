"""``Report.clean_copy``: the scanned files without their flagged rows, in the same format.

Clean files are copied byte for byte; flagged files are rewritten one row group / chunk at a
time; files the gate fails whole (corrupt, or a file- or column-level finding such as
``drift``, ``schema`` or ``unnormalized``) are left out, with the reason.  Which rows and files
go is ``severity`` (see :mod:`._explore`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datacheck.errors import UsageError
from datacheck.formats import get_format
from datacheck.report._explore import gate_reason, gated_files, reader_options, row_sites

if TYPE_CHECKING:
    import pandas as pd

    from datacheck.report._data import ReportData

__all__ = ["clean_copy"]


def _common_root(report: ReportData) -> str:
    """The folder the copy mirrors: the scanned folder, else the files' common parent."""
    paths = [os.path.abspath(e["path"]) for e in report.data["files"]]
    dirs = [os.path.dirname(p) for p in paths]
    root = os.path.commonpath(dirs) if dirs else os.getcwd()
    inputs = [os.path.abspath(i) for i in report.settings.get("inputs", []) if os.path.isdir(i)]
    if len(inputs) == 1 and os.path.commonpath([inputs[0], root]) == inputs[0]:
        return inputs[0]
    return root


def _check_dest(dest: Path, root: str, overwrite: bool) -> None:
    real = os.path.realpath(dest)
    if real == os.path.realpath(root):
        raise UsageError(
            f"clean_copy dest {str(dest)!r} is the scanned folder itself; pass a new folder"
        )
    if dest.exists() and any(dest.iterdir()) and not overwrite:
        raise UsageError(
            f"clean_copy dest {str(dest)!r} is not empty; pass an empty folder or overwrite=True"
        )


def _copy_one(
    report: ReportData,
    entry: dict[str, Any],
    target: Path,
    drop: np.ndarray,
    options: dict[str, Any],
    whole: str | None = None,
) -> dict[str, Any]:
    row = {
        "path": entry["path"],
        "dest": str(target),
        "status": "skipped",
        "rows_in": int(entry.get("rows") or 0),
        "rows_out": 0,
        "reason": "",
    }
    if whole is not None:  # the gate fails the whole file: none of it is copied
        return {**row, "dest": "", "reason": whole}
    entry = {**entry, "path": report.local_path(entry)}
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    if not len(drop):
        shutil.copyfile(entry["path"], tmp)
        os.replace(tmp, target)
        return {**row, "status": "copied", "rows_out": row["rows_in"]}
    try:
        rows_in, rows_out = get_format(entry["format"]).write_without(
            entry["path"], str(tmp), drop, options
        )
    except NotImplementedError as exc:
        tmp.unlink(missing_ok=True)
        return {**row, "dest": "", "reason": str(exc)}
    os.replace(tmp, target)
    rows_in = max(rows_in, row["rows_in"])  # a CSV line that did not parse: a row, not read
    return {**row, "status": "cleaned", "rows_in": rows_in, "rows_out": rows_out}


def _dropped(sites: pa.Table, drop: np.ndarray) -> str:
    """``"x0: nan 2, x2: inf 1"``: the findings behind the dropped rows of one file."""
    if not len(drop):
        return ""
    counts: dict[str, int] = {}
    for col, check in zip(sites["column"].to_pylist(), sites["check"].to_pylist(), strict=True):
        key = f"{col}: {check}" if col else check
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} {n:,}" for k, n in sorted(counts.items()))


def clean_copy(
    report: ReportData,
    dest: str | os.PathLike[str],
    *,
    severity: str = "error",
    overwrite: bool = False,
) -> pd.DataFrame:
    """Write every readable scanned file into ``dest`` without its flagged rows.

    Files keep their format and their path relative to the scanned folder. Clean files are
    copied byte for byte; flagged files are rewritten one row group / chunk at a time; files
    the gate fails whole are left out (``skipped``, with the reason): corrupt ones, and those
    with a file- or column-level finding (``drift``, ``schema``, ``unnormalized``, ...) at or
    above ``severity``. A rescan of the copy with the same schema and gate passes. Each file
    is written under a temporary name and renamed when complete.

    Args:
        report: the scan's report.
        dest: a new or empty folder (not the scanned one).
        severity: ``"error"`` (default: drop the rows and files the gate fails on, keep
            those that have only warnings) or ``"warning"`` (drop those with warnings too).
        overwrite: allow a non-empty ``dest`` (files with the same names are replaced).

    Returns:
        One row per scanned file: ``path``, ``dest``, ``status`` (``copied`` | ``cleaned`` |
        ``skipped``), ``rows_in``, ``rows_out``, ``rows_dropped``, ``dropped`` (the findings
        behind the dropped rows, ``"x0: nan 2, x2: inf 1"``), ``rows_kept_flagged`` (rows kept
        that have findings below ``severity``) and ``reason`` (why a file was skipped: its
        whole-file findings, ``"x0: drift (mean 1500 is ...)"``, or ``"corrupt: ..."``).
    """
    import pandas as pd

    entries = report.data["files"]
    root = _common_root(report)
    dest = Path(dest)
    _check_dest(dest, root, overwrite)
    sites = row_sites(report, severity=severity)
    every = row_sites(report)
    whole = {p: gate_reason(found) for p, found in gated_files(report, severity).items()}
    dest.mkdir(parents=True, exist_ok=True)
    options = reader_options(report)
    rows = []
    for e in entries:
        mine = sites.filter(pc.equal(sites["path"], e["path"]))
        drop = np.unique(mine["row"].to_numpy()).astype(np.int64)
        flagged = every.filter(pc.equal(every["path"], e["path"]))["row"].to_numpy()
        target = dest / os.path.relpath(os.path.abspath(e["path"]), root)
        row = _copy_one(report, e, target, drop, options, whole.get(e["path"]))
        row["rows_dropped"] = row["rows_in"] - row["rows_out"] if row["status"] != "skipped" else 0
        row["dropped"] = _dropped(mine, drop) if row["status"] == "cleaned" else ""
        kept = np.setdiff1d(np.unique(flagged), drop) if row["status"] != "skipped" else ()
        row["rows_kept_flagged"] = len(kept)
        rows.append(row)
    columns = ["path", "dest", "status", "rows_in", "rows_out", "rows_dropped", "dropped"]
    return pd.DataFrame(rows, columns=[*columns, "rows_kept_flagged", "reason"])
