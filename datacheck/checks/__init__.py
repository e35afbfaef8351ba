"""Check declarations (one place) and their backends.

Each check is declared once in :mod:`datacheck.checks._registry` with its stable name and
default severity; :mod:`._numpy` is the body used by scans (Arrow buffers viewed as NumPy),
and ``datacheck.torch`` has the body used on batches at training time.  :mod:`._spike` is the
one spike detector for training series, used by ``datacheck logs`` and ``TrainingGuard``.
"""

from __future__ import annotations

from datacheck.checks._pandas import register_pandera_checks
from datacheck.checks._registry import (
    CHECKS,
    CORRUPT,
    DRIFT,
    EXTREME,
    FP16_MAX,
    INF,
    NAN,
    NULL,
    OUT_OF_RANGE,
    SCHEMA,
    UNNORMALIZED,
    CheckSpec,
    Severity,
    get_check,
)
from datacheck.checks._spike import SpikeConfig, SpikeDetector

__all__ = [
    "CHECKS",
    "CORRUPT",
    "DRIFT",
    "EXTREME",
    "FP16_MAX",
    "INF",
    "NAN",
    "NULL",
    "OUT_OF_RANGE",
    "SCHEMA",
    "UNNORMALIZED",
    "CheckSpec",
    "Severity",
    "SpikeConfig",
    "SpikeDetector",
    "get_check",
    "register_pandera_checks",
]
