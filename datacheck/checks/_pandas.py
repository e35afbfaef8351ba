"""The pandas bodies of datacheck's own checks, registered through pandera's extension API.

``finite``, ``max_abs``, ``fp16_safe``, ``bf16_safe``, ``reference_stats`` and ``normalized``
are declared in :mod:`datacheck.checks._registry`; scans run their NumPy bodies
(:mod:`datacheck.checks._numpy`).  These bodies let the same schema file validate a pandas
DataFrame in pandera itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from datacheck.checks._registry import BF16_MAX, FP16_OVERFLOW, Severity
from datacheck.checks._rules import ZSCORE_MAX, Normalized

__all__ = ["NumericCheck", "Outcome", "register_pandera_checks", "report_name", "run_check"]


def _elementwise(pandas_obj, ok):
    """``ok`` (values -> bool mask) per value; for a column of vectors (embeddings read by
    pandas as arrays), a row passes when every element does."""
    import pandas as pd

    if pandas_obj.dtype != object:
        return ok(pandas_obj.astype("float64"))
    return pd.Series(
        [
            True if v is None else bool(np.all(ok(np.asarray(v, dtype=np.float64))))
            for v in pandas_obj
        ],
        index=pandas_obj.index,
    )


def _finite(pandas_obj):
    """Every value is finite: no NaN, +Inf or -Inf (NaN is not treated as null)."""
    return _elementwise(pandas_obj, np.isfinite)


def _max_abs(pandas_obj, *, max_abs):
    """|x| <= max_abs for every finite value."""
    return _elementwise(pandas_obj, lambda x: ~(np.abs(x) > max_abs))


def _fp16_safe(pandas_obj):
    """The value stays finite after a cast to float16 (|x| < 65520)."""
    return _elementwise(pandas_obj, lambda x: ~(np.abs(x) > FP16_OVERFLOW))


def _bf16_safe(pandas_obj):
    """The value stays finite after a cast to bfloat16."""
    return _elementwise(pandas_obj, lambda x: ~(np.abs(x) > BF16_MAX))


def _reference_stats(
    pandas_obj, *, mean, std, zscore_max=None, max_mean_shift=None, max_std_ratio=None
):
    """|x - mean| <= zscore_max * std (default 6); datacheck scans also check shard drift."""
    z = ZSCORE_MAX if zscore_max is None else float(zscore_max)
    if not float(std) > 0 or np.isinf(z):
        return pandas_obj.notna() | pandas_obj.isna()
    return _elementwise(pandas_obj, lambda x: ~(np.abs(x - float(mean)) > z * float(std)))


def _normalized(pandas_obj, *, mean=None, std=None, max_mean_shift=None, max_std_ratio=None):
    """The column is standardised: its mean and std are close to ``mean``/``std`` (0/1)."""
    from datacheck.profile._drift import normalization_problem

    stats = {
        "mean": mean,
        "std": std,
        "max_mean_shift": max_mean_shift,
        "max_std_ratio": max_std_ratio,
    }
    spec = Normalized.from_stats(stats, Severity.ERROR)
    x = pandas_obj.astype("float64")
    x = x[np.isfinite(x)]
    return x.size < 2 or normalization_problem(spec, float(x.mean()), float(x.std(ddof=0))) is None


def _named(fn: Any, name: str) -> Any:
    fn.__name__ = name  # pandera registers a check under its function's name
    return fn


def register_pandera_checks() -> None:
    """Register datacheck's checks with pandera (once per process).

    pandera keeps a wrapper of each body, which does not pickle: compiled schemas hold a
    :class:`NumericCheck` in their place where these checks meet data that is not numeric."""
    import pandera.extensions as ext
    from pandera.api.extensions import CheckType  # noqa: F401 - imported for its side effect

    if getattr(register_pandera_checks, "done", False):
        return
    ext.register_check_method(statistics=[])(_named(_finite, "finite"))
    ext.register_check_method(statistics=["max_abs"])(_named(_max_abs, "max_abs"))
    ext.register_check_method(statistics=[])(_named(_fp16_safe, "fp16_safe"))
    ext.register_check_method(statistics=[])(_named(_bf16_safe, "bf16_safe"))
    ext.register_check_method(
        statistics=["mean", "std", "zscore_max", "max_mean_shift", "max_std_ratio"]
    )(_named(_reference_stats, "reference_stats"))
    ext.register_check_method(statistics=["mean", "std", "max_mean_shift", "max_std_ratio"])(
        _named(_normalized, "normalized")
    )
    register_pandera_checks.done = True  # type: ignore[attr-defined]


RANGE_NAMES = frozenset(
    {"in_range", "greater_than", "greater_than_or_equal_to", "less_than", "less_than_or_equal_to"}
)
ELEMENTWISE = frozenset(
    {
        *RANGE_NAMES,
        "equal_to",
        "not_equal_to",
        "isin",
        "notin",
        "str_matches",
        "str_contains",
        "str_startswith",
        "str_endswith",
        "str_length",
        "finite",
        "max_abs",
        "fp16_safe",
        "bf16_safe",
        "reference_stats",
    }
)
"""Checks whose pandas body answers per value: they may run one batch at a time."""


def report_name(check: Any) -> str:
    """The name a pandera check reports under (range checks are ``out_of_range``)."""
    return "out_of_range" if check.name in RANGE_NAMES else str(check.name)


@dataclass(frozen=True)
class NumericCheck:
    """One of datacheck's numeric checks met data that is not numeric: pandera's body would
    raise, so this reports a check error (picklable, unlike the registered check)."""

    name: str
    raise_warning: bool = False


@dataclass
class Outcome:
    """One pandera check on one batch: failing positions per column, one verdict, or an error."""

    bad: dict[str | None, np.ndarray] | None = None
    """Failing row positions by column (None: a row-wise check of the whole frame)."""
    passed: bool | None = None
    """The verdict of a check whose result is one value (an aggregate)."""
    error: str | None = None
    """The check raised on this data: pandera's ``CHECK_ERROR``."""


def run_check(check: Any, obj: Any) -> Outcome:
    """Run a pandera check on a pandas Series or DataFrame (RangeIndex) and read its answer as
    pandera does (``backends/pandas/checks.py``): a boolean Series aligned with the rows it
    checked names the failing rows; a boolean DataFrame the failing cells that are not null;
    anything else (one value, a Series on other labels, ``value_counts()``) is one verdict."""

    if isinstance(check, NumericCheck):
        return Outcome(error=f"TypeError: {check.name} needs numeric data, got {obj.dtype}")
    try:
        res = check(obj)
    except Exception as exc:  # noqa: BLE001 - pandera reports a raising check as a failure
        text = " ".join(str(exc).split())[:200]
        return Outcome(error=f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
    try:
        return _read_result(res, obj)
    except (TypeError, ValueError) as exc:  # a result holding <NA>: pandera fails there too
        text = " ".join(str(exc).split())[:200]
        return Outcome(error=f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _read_result(res: Any, obj: Any) -> Outcome:
    import pandas as pd

    out, checked = res.check_output, res.checked_object
    if isinstance(out, pd.DataFrame) and isinstance(checked, pd.DataFrame):
        bad: dict[str | None, np.ndarray] = {}
        for name in out.columns:
            fails = ~out[name].to_numpy(dtype=bool) & checked[name].notna().to_numpy()
            bad[str(name)] = np.asarray(out.index[fails], dtype=np.int64)
        return Outcome(bad=bad)
    if isinstance(out, pd.Series) and out.index.equals(checked.index):
        key = getattr(obj, "name", None) if isinstance(obj, pd.Series) else None
        rows = np.asarray(out.index[~out.to_numpy(dtype=bool)], dtype=np.int64)
        return Outcome(bad={key: rows})
    return Outcome(passed=bool(res.check_passed))
