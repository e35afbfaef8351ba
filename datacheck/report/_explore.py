"""After a scan: the flagged rows themselves, an exclusion list, and a cleaned copy.

Everything here starts from a :class:`~datacheck.report.Report` (``report.json`` plus the
quarantine manifest) and goes back to the scanned shards only for the rows it needs:

* :func:`flagged_rows` reads a Parquet shard's row groups that hold flagged rows and no
  others; text and Arrow shards are streamed, skipping chunks before the first wanted row and
  stopping after the last.
* :func:`exclusion_list` lists the (path, row) pairs, with their dataset index when the shards
  are concatenated in the report's order, ready for ``GuardedLoader(exclude=...)``.
* :func:`~datacheck.report._explore_copy.clean_copy` (in :mod:`._explore_copy`) rewrites
  every readable shard without its flagged rows, in the same format, one chunk at a time.

Which rows count as flagged is the ``severity`` argument: ``"error"`` (the default, what the
gate fails on) or ``"warning"`` (errors and warnings).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from datacheck.errors import InputError, UsageError

if TYPE_CHECKING:
    import pandas as pd

    from datacheck.report._data import ReportData

__all__ = [
    "SEVERITIES",
    "exclusion_list",
    "flagged_rows",
    "gate_reason",
    "gated_files",
    "reader_options",
    "resolve_path",
    "row_sites",
]

FLAG_COLUMN = "_flagged"
CHECKS_COLUMN = "_checks"
SEVERITIES = {"error": ("error",), "warning": ("error", "warning")}
"""``severity=`` -> the finding severities whose rows are dropped / excluded."""


# -- which file ------------------------------------------------------------------------------


def resolve_path(report: ReportData, path: str | os.PathLike[str]) -> dict[str, Any]:
    """The report's entry for ``path``: the path as the report has it, or a unique suffix.

    Raises:
        InputError: no file, or more than one file, of the report matches.
    """
    entries = report.data["files"]
    query = os.fspath(path)
    exact = [e for e in entries if e["path"] == query]
    if exact:
        return exact[0]
    if os.path.exists(query):
        real = os.path.realpath(query)
        same = [e for e in entries if os.path.realpath(e["path"]) == real]
        if same:
            return same[0]
    tail = query.replace(os.sep, "/").removeprefix("./").lstrip("/")
    hits = [e for e in entries if e["path"].replace(os.sep, "/").endswith("/" + tail)]
    if len(hits) == 1:
        return hits[0]
    if hits:
        names = ", ".join(repr(e["path"]) for e in hits[:5])
        raise InputError(
            f"report {str(report.dir)!r}: {query!r} matches {len(hits)} files "
            f"({names}); pass more of the path"
        )
    raise InputError(_no_match(report, query))


def _no_match(report: ReportData, query: str) -> str:
    names = [os.path.basename(e["path"]) for e in report.data["files"]]
    close = difflib.get_close_matches(os.path.basename(query), names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"report {str(report.dir)!r}: no scanned file matches {query!r}{hint}; "
        f"see report.files for the {len(names)} scanned files"
    )


# -- the manifest, per file ------------------------------------------------------------------


def _severities(severity: str) -> tuple[str, ...]:
    if severity not in SEVERITIES:
        raise UsageError(
            f"severity={severity!r} is not one of: {', '.join(SEVERITIES)} "
            "('error': what the gate fails on; 'warning': errors and warnings)"
        )
    return SEVERITIES[severity]


def row_sites(report: ReportData, path: str | None = None, severity: str | None = None) -> pa.Table:
    """Row-level findings (row not null): path, row, column, check, severity; optionally of
    one file, and only those at or above ``severity`` (None: all)."""
    cols = ["path", "row", "column", "check", "severity"]
    if not report.manifest_path.exists():
        return pa.table({c: pa.array([], pa.int64() if c == "row" else pa.string()) for c in cols})
    filters: list[Any] = [("path", "==", path)] if path is not None else []
    if severity is not None:
        filters.append(("severity", "in", list(_severities(severity))))
    table = pq.read_table(report.manifest_path, columns=cols, filters=filters or None)
    table = table.cast(pa.schema([(c, pa.int64() if c == "row" else pa.string()) for c in cols]))
    return table.filter(pc.is_valid(table["row"]))


def _whole_file_sites(report: ReportData, severities: tuple[str, ...]) -> pa.Table:
    """File- and column-level findings (row null) at one of ``severities``: path, column,
    check, value."""
    cols = ["path", "column", "check", "value"]
    if not report.manifest_path.exists():
        return pa.table({c: pa.array([], pa.string()) for c in cols})
    where = pc.field("row").is_null() & pc.field("severity").isin(list(severities))
    table = pq.read_table(report.manifest_path, columns=cols, filters=where)
    return table.cast(pa.schema([(c, pa.string()) for c in cols]))


REASON_CHARS = 120
"""A whole-file finding's message is cut to this many characters in a reason."""


def gated_files(report: ReportData, severity: str = "error") -> dict[str, list[tuple[str, str]]]:
    """The files the gate fails whole: ``corrupt`` files and files with a file- or
    column-level finding (``schema``, ``drift``, ``unnormalized``, ...) at or above
    ``severity``; no row of them may be trained on.

    Returns:
        path -> its whole-file findings as (label, message): ``("x0: drift", "mean 1500 is
        ...")``; a corrupt file's one entry is ``("corrupt", <the reader's error>)``.
    """
    severities = _severities(severity)
    out: dict[str, list[tuple[str, str]]] = {}
    corrupt = {e["path"] for e in report.data["files"] if e["status"] == "corrupt"}
    for e in report.data["files"]:
        if e["path"] in corrupt:
            out[e["path"]] = [("corrupt", str(e.get("error") or ""))]
    sites = _whole_file_sites(report, severities)
    columns = (sites[c].to_pylist() for c in sites.column_names)
    for path, col, check, value in zip(*columns, strict=True):
        if path not in corrupt:  # a corrupt file's reader error says it all
            out.setdefault(path, []).append((f"{col}: {check}" if col else check, value or ""))
    return {p: list(dict.fromkeys(v)) for p, v in out.items()}


def gate_reason(found: list[tuple[str, str]]) -> str:
    """``"x0: drift (mean 1500 is ...); embedding: schema (column missing)"``: why a file
    goes whole, each message cut to :data:`REASON_CHARS`."""

    def one(label: str, message: str) -> str:
        if len(message) > REASON_CHARS:
            message = message[: REASON_CHARS - 3] + "..."
        return f"{label}: {message}" if label == "corrupt" else f"{label} ({message})"

    return "; ".join(one(label, message) if message else label for label, message in found)


def _checks_by_row(sites: pa.Table) -> dict[int, str]:
    """Row -> ``"x1: nan; x2: inf"`` (the findings at that row, for display)."""
    out: dict[int, list[str]] = {}
    for row, col, check in zip(
        sites["row"].to_pylist(),
        sites["column"].to_pylist(),
        sites["check"].to_pylist(),
        strict=True,
    ):
        out.setdefault(int(row), []).append(f"{col}: {check}" if col else check)
    return {r: "; ".join(dict.fromkeys(v)) for r, v in out.items()}


def _unparsed_rows(sites: pa.Table) -> set[int]:
    """Rows whose record did not parse (a row-level ``corrupt`` finding): no values to read."""
    mask = pc.equal(sites["check"], "corrupt")
    return set(sites.filter(mask)["row"].to_pylist())


def _wanted(flagged: np.ndarray, context: int, n_rows: int | None) -> np.ndarray:
    """Flagged rows widened by ``context`` neighbours each side, sorted, clipped to the file."""
    if not len(flagged):
        return flagged
    offsets = np.arange(-context, context + 1, dtype=np.int64)
    rows = np.unique((flagged[:, None] + offsets[None, :]).reshape(-1))
    rows = rows[rows >= 0]
    return rows[rows < n_rows] if n_rows else rows


# -- reading rows ----------------------------------------------------------------------------


def reader_options(report: ReportData) -> dict[str, Any]:
    """The column types the scan read with (from its schema), so values look the same; with
    no schema, or one that moved since the scan, types are inferred."""
    compiled = report.schema
    return {"arrow_types": compiled.arrow_types} if compiled is not None else {}


def _take_rows(
    entry: dict[str, Any], rows: np.ndarray, options: dict[str, Any]
) -> tuple[pa.Table, np.ndarray]:
    """The given file rows (sorted) as one table, reading as little of the file as it can,
    and the rows it holds (a CSV line that did not parse holds none)."""
    from datacheck.formats import get_format

    fmt = get_format(entry["format"])
    return fmt.exact(lambda opts: _take_rows_with(fmt, entry["path"], rows, opts), options)


def _take_rows_with(
    fmt: Any, path: str, rows: np.ndarray, options: Any
) -> tuple[pa.Table, np.ndarray]:
    parts, got, last = [], [], int(rows[-1])
    for start, table in fmt.tables(path, options, rows=rows):
        if start > last:
            break
        lo, hi = np.searchsorted(rows, [start, start + table.num_rows])
        if hi > lo:
            parts.append(fmt.restore(table.take(pa.array(rows[lo:hi] - start)), options))
            got.append(rows[lo:hi])
    if not parts:
        return pa.table({}), np.zeros(0, np.int64)
    table = pa.concat_tables(parts, promote_options="permissive")
    return table, np.concatenate(got)


def flagged_rows(
    report: ReportData, path: str | os.PathLike[str], context: int = 0
) -> pd.DataFrame:
    """The flagged rows of one scanned file (plus ``context`` neighbours each side).

    Returns:
        A DataFrame indexed by row number in the file (index name ``row``), with the file's
        columns plus ``_flagged`` (False for context rows) and ``_checks`` (``"x1: nan"``).

    Raises:
        UsageError: ``context`` is negative.
        InputError: ``path`` matches no file or several, or the file cannot be read.
    """
    import pandas as pd

    if context < 0:
        raise UsageError(f"context={context!r} must be >= 0 (rows shown each side)")
    entry = resolve_path(report, path)
    sites = row_sites(report, entry["path"])
    checks = _checks_by_row(sites)
    flagged = np.array(sorted(checks), dtype=np.int64)
    rows = _wanted(flagged, context, entry.get("rows"))
    table, got = pa.table({}), np.zeros(0, np.int64)
    if len(rows):
        local = {**entry, "path": report.local_path(entry)}
        try:
            table, got = _take_rows(local, rows, reader_options(report))
        except (OSError, pa.ArrowException) as exc:
            raise InputError(
                f"{entry['path']!r}: cannot read the flagged rows back "
                f"({type(exc).__name__}: {exc}); was the file changed since the scan?"
            ) from exc
    frame = table.to_pandas() if table.num_columns else pd.DataFrame()
    unparsed = _unparsed_rows(sites)  # lines that did not parse: rows without values
    if len(got) != len(rows) and set(np.setdiff1d(rows, got).tolist()) - unparsed:
        raise InputError(
            f"{entry['path']!r}: {len(got)} of the {len(rows)} wanted rows could be "
            "read; was the file changed since the scan? Rescan it"
        )
    frame.index = pd.Index(got, name="row")
    frame = frame.reindex(pd.Index(rows, name="row"))
    frame[FLAG_COLUMN] = [int(r) in checks for r in frame.index]
    frame[CHECKS_COLUMN] = [checks.get(int(r), "") for r in frame.index]
    return frame


# -- exclusion list --------------------------------------------------------------------------


def exclusion_list(
    report: ReportData, order: Sequence[str] | None = None, *, severity: str = "error"
) -> pd.DataFrame:
    """The (path, row) pairs a loader should skip, with their dataset index.

    Args:
        report: the scan's report.
        order: the files in the order the training dataset concatenates them (paths as the
            report has them, or unique suffixes). Default: the report's order (sorted paths)
            without corrupt files.
        severity: ``"error"`` (default: the rows the gate fails on) or ``"warning"`` (rows
            with warnings too).  Rows that have only findings below it are kept.

    Returns:
        A DataFrame with ``path``, ``row``, ``index`` (row offset of the file in ``order``
        plus ``row``; null for files outside ``order``) and ``checks``, one row per excluded
        row. A file the gate fails whole (see :func:`gated_files`: a ``drift``, ``schema``
        or ``unnormalized`` finding at or above ``severity``) is listed whole, every one of
        its rows, ``checks`` naming the whole-file findings first; a ``corrupt`` file, whose
        rows are unknown, is one row with ``row`` and ``index`` null and ``checks``
        ``"corrupt: ..."``. Pass it to ``GuardedLoader(exclude=df)`` (its indices, and the
        files of its null rows when the dataset lists its files), or use
        ``set(df["index"].dropna())``. Rows per file: ``df.groupby("path").size()``.
    """
    import pandas as pd

    sites = row_sites(report, severity=severity)
    whole = gated_files(report, severity)
    if order is None:
        files = [e for e in report.data["files"] if e["status"] != "corrupt"]
    else:
        files = [resolve_path(report, p) for p in order]
    offsets, start = {}, 0
    for e in files:
        offsets[e["path"]] = start
        start += int(e["rows"])
    listed = dict.fromkeys(sites["path"].to_pylist())
    frames = []
    for e in report.data["files"]:
        path = e["path"]
        if path not in listed and path not in whole:
            continue
        checks = _checks_by_row(sites.filter(pc.equal(sites["path"], path)))
        found = whole.get(path)
        if found is not None and e["status"] == "corrupt":
            frames.append(_excluded(path, None, None, {}, gate_reason(found)))
            continue
        rows = np.array(sorted(checks), dtype=np.int64)
        label = None
        if found is not None:
            rows = np.arange(int(e.get("rows") or 0), dtype=np.int64)
            label = "; ".join(dict.fromkeys(lab for lab, _ in found))
        frames.append(_excluded(path, rows, offsets.get(path), checks, label))
    return pd.concat(frames, ignore_index=True) if frames else _excluded("", np.zeros(0, np.int64))


def _excluded(
    path: str,
    rows: np.ndarray | None,
    base: int | None = None,
    checks: dict[int, str] | None = None,
    whole: str | None = None,
) -> pd.DataFrame:
    """One file's rows of the exclusion list. ``whole``: the findings that exclude the whole
    file, named before each row's own; ``rows`` None: a corrupt file, one row with ``row``
    and ``index`` null."""
    import pandas as pd

    checks = checks or {}
    rows_col: Any
    index: Any
    text: list[str | None]
    if rows is None:
        rows_col, index, text = [None], [None], [whole]
    else:
        own = [checks.get(int(r), "") for r in rows] if checks else [""] * len(rows)
        text = [f"{whole}; {c}" if whole and c else (whole or c) for c in own]
        rows_col = rows
        index = rows + base if base is not None else [None] * len(rows)
    return pd.DataFrame(
        {
            "path": pd.array([path] * len(text), dtype="string"),
            "row": pd.array(rows_col, dtype="Int64"),
            "index": pd.array(index, dtype="Int64"),
            "checks": pd.array(text, dtype="string"),
        }
    )
