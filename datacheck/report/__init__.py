"""A finished scan: its data at the bottom (:mod:`._data`), its views above it.

``report.json`` (format version 1) holds the command's settings, summary counts and ``files``:
one entry per input file, every file exactly once, with ``path``, ``format``, ``status``
(``ok`` | ``flagged`` | ``corrupt``), ``rows``, ``bytes``, ``counts`` (bad values per check),
``sites`` (findings, the quarantine's rows, per check and severity), ``columns`` (dtype per column) and ``error``.
"""

from __future__ import annotations

from datacheck.report._data import (
    FAIL_ON,
    FORMAT_VERSION,
    MANIFEST,
    QUARANTINE,
    REPORT_JSON,
    ReportData,
    exit_code_for,
    write_report_json,
)
from datacheck.report._report import Report, load_report

__all__ = [
    "FAIL_ON",
    "FORMAT_VERSION",
    "MANIFEST",
    "QUARANTINE",
    "REPORT_JSON",
    "Report",
    "ReportData",
    "exit_code_for",
    "load_report",
    "write_report_json",
]
