"""The pandas bodies of datacheck's own checks, registered through pandera's extension API.

``finite``, ``max_abs``, ``fp16_safe``, ``bf16_safe``, ``reference_stats`` and ``normalized``
are declared in :mod:`datacheck.checks._registry`; scans run their NumPy bodies
(:mod:`datacheck.checks._numpy`).  These bodies let the same schema file validate a pandas
DataFrame in pandera itself.
"""

from __future__ import annotations

import numpy as np

from datacheck.checks._registry import BF16_MAX, FP16_OVERFLOW, Severity
from datacheck.checks._rules import ZSCORE_MAX, Normalized

__all__ = ["register_pandera_checks"]


def register_pandera_checks() -> None:
    """Register datacheck's checks with pandera (once per process)."""
    import pandera.extensions as ext
    from pandera.api.extensions import CheckType  # noqa: F401 - imported for its side effect

    registered = getattr(register_pandera_checks, "done", False)
    if registered:
        return

    @ext.register_check_method(statistics=[])
    def finite(pandas_obj):
        """Every value is finite: no NaN, +Inf or -Inf (NaN is not treated as null)."""
        return np.isfinite(pandas_obj.astype("float64"))

    @ext.register_check_method(statistics=["max_abs"])
    def max_abs(pandas_obj, *, max_abs):
        """|x| <= max_abs for every finite value."""
        return ~(pandas_obj.abs() > max_abs)

    @ext.register_check_method(statistics=[])
    def fp16_safe(pandas_obj):
        """The value stays finite after a cast to float16 (|x| < 65520)."""
        return ~(pandas_obj.abs() > FP16_OVERFLOW)

    @ext.register_check_method(statistics=[])
    def bf16_safe(pandas_obj):
        """The value stays finite after a cast to bfloat16."""
        return ~(pandas_obj.abs() > BF16_MAX)

    @ext.register_check_method(
        statistics=["mean", "std", "zscore_max", "max_mean_shift", "max_std_ratio"]
    )
    def reference_stats(
        pandas_obj, *, mean, std, zscore_max=None, max_mean_shift=None, max_std_ratio=None
    ):
        """|x - mean| <= zscore_max * std (default 6); datacheck scans also check shard drift."""
        z = ZSCORE_MAX if zscore_max is None else float(zscore_max)
        if not float(std) > 0 or np.isinf(z):
            return pandas_obj.notna() | pandas_obj.isna()
        return ~((pandas_obj.astype("float64") - float(mean)).abs() > z * float(std))

    @ext.register_check_method(statistics=["mean", "std", "max_mean_shift", "max_std_ratio"])
    def normalized(pandas_obj, *, mean=None, std=None, max_mean_shift=None, max_std_ratio=None):
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
        return (
            x.size < 2 or normalization_problem(spec, float(x.mean()), float(x.std(ddof=0))) is None
        )

    register_pandera_checks.done = True  # type: ignore[attr-defined]
