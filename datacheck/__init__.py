"""datacheck: keep bad data and numerical blow-ups from killing long training runs.

Before training, :func:`scan` checks datasets (NaN, Inf, fp16-overflowing values, nulls,
schema violations, corrupt files) and writes a report plus a quarantine of findings; after,
:func:`load_report` reads them back for exploration.  The runtime guards live in
``datacheck.torch`` (imported separately: ``import datacheck`` never imports torch or dask).
"""

from __future__ import annotations

from datacheck._scan import ScanConfig, scan
from datacheck._version import __version__
from datacheck.checks import CHECKS, FP16_MAX, CheckSpec, Severity
from datacheck.errors import DatacheckError, InputError, SchemaError, UsageError
from datacheck.report import Report, load_report
from datacheck.schema import load_schema

_LAZY = {
    "InferConfig": "datacheck._infer",
    "infer": "datacheck._infer",
    "load_profile": "datacheck.profile",
    "write_demo": "datacheck._demo",
}


def __getattr__(name: str) -> object:
    """Import rarely used entry points on first use (keeps ``import datacheck`` light)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'datacheck' has no attribute {name!r}")


__all__ = [
    "CHECKS",
    "CheckSpec",
    "DatacheckError",
    "FP16_MAX",
    "InferConfig",
    "InputError",
    "Report",
    "ScanConfig",
    "SchemaError",
    "Severity",
    "UsageError",
    "__version__",
    "infer",
    "load_profile",
    "load_report",
    "load_schema",
    "scan",
    "write_demo",
]
