"""Sample findings: the first few per check and per file, for the terminal and the HTML page.

Like pandera's failure cases and Great Expectations' sample values: enough to see what went
wrong without opening ``quarantine.parquet``.  Picked with NumPy over each batch's dictionary
codes (no Python object per finding), errors before warnings, in manifest (file, row) order.
The manifest is streamed (:mod:`datacheck.report._manifest`) and reading stops as soon as
``report.json``'s counts say every key has what it can get: memory is bounded by a batch and
``k`` findings per key, however many findings the scan made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from datacheck.report._data import ReportData

__all__ = ["COLUMNS", "first_per", "sample_findings"]

COLUMNS = ["path", "row", "column", "check", "severity", "value", "count"]


def first_per(table: pa.Table, key: str, k: int) -> pa.Table:
    """The first ``k`` rows of ``table`` for each value of ``key``, errors before warnings,
    otherwise in table order."""
    if not table.num_rows or k < 1:
        return table.slice(0, 0)
    from datacheck.findings import _numeric
    from datacheck.report._manifest import codes as dict_codes

    codes, _ = dict_codes(table[key])
    severity, labels = dict_codes(table["severity"])
    warn = severity == (labels.index("warning") if "warning" in labels else -1)
    order = np.lexsort((warn, codes))  # stable: by key, errors first, then table order
    ranked = codes[order]
    new = np.r_[True, ranked[1:] != ranked[:-1]]
    starts = np.flatnonzero(new)
    position = np.arange(len(ranked)) - starts[np.cumsum(new) - 1]
    return table.take(_numeric(np.sort(order[position < k]).astype(np.int64)))


def _wanted(report: ReportData, per: str, k: int, exclude: tuple[str, ...]) -> dict[str, Any]:
    """key -> (errors, findings) the manifest holds for it, from ``report.json`` (no read)."""
    if per == "check":
        by_key = {c: sev for c, sev in report.summary["sites"].items() if c not in exclude}
    else:
        by_key = {}
        for f in report.data["files"]:
            sev: dict[str, int] = {}
            for check, n in f["sites"].items():
                if check not in exclude:
                    for s, m in n.items():
                        sev[s] = sev.get(s, 0) + m
            if sev:
                by_key[f["path"]] = sev
    return {
        key: (min(k, sev.get("error", 0)), min(k, sum(sev.values()))) for key, sev in by_key.items()
    }


def _done(picked: dict[str, list[dict[str, Any]]], wanted: dict[str, Any]) -> bool:
    for key, (errors, total) in wanted.items():
        got = picked.get(key, [])
        if len(got) < total or sum(r["severity"] == "error" for r in got) < errors:
            return False
    return True


def sample_findings(
    report: ReportData, per: str = "check", k: int = 5, exclude: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Up to ``k`` findings for each ``per`` (``"check"`` or ``"path"``), errors first.

    Returns:
        Dicts with ``path``, ``row`` (None for file- and column-level findings), ``column``,
        ``check``, ``severity``, ``value`` (the bad value, or the message) and ``count``,
        sorted by ``per`` then as picked.
    """
    from datacheck.report._manifest import iter_manifest, string_array

    wanted = _wanted(report, per, k, exclude)
    picked: dict[str, list[dict[str, Any]]] = {}
    if not wanted:
        return []
    for table in iter_manifest(report.manifest_path, COLUMNS):
        if exclude:
            keep = pc.invert(pc.is_in(table["check"], string_array(exclude)))
            table = table.filter(keep)
        for row in first_per(table, per, k).to_pylist():
            picked.setdefault(str(row[per]), []).append(row)
        for rows in picked.values():  # errors first, then manifest order; k at most
            if len(rows) > k:
                rows.sort(key=lambda r: r["severity"] != "error")
                del rows[k:]
        if _done(picked, wanted):
            break
    rows = [r for key in sorted(picked) for r in picked[key]]
    rows.sort(key=lambda r: (str(r[per]), r["severity"] != "error"))
    return rows
