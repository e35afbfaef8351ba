"""The NumPy body of the value checks against a plain NumPy oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from datacheck.checks._numpy import RowMap, check_values
from datacheck.checks._registry import FP16_MAX, Severity
from datacheck.checks._rules import Allowed, Bound, ColumnRules, Range, default_rules

floats = hnp.arrays(
    np.float64,
    st.integers(0, 60),
    elements=st.one_of(st.floats(-1e6, 1e6), st.just(np.nan), st.just(np.inf), st.just(-np.inf)),
)


def _by_check(hits) -> dict[str, tuple[list[int], list[int]]]:
    return {h.check: (h.rows.tolist(), h.counts.tolist()) for h in hits}


@settings(max_examples=200, deadline=None)
@given(values=floats)
def test_scalar_column_matches_oracle(values: np.ndarray) -> None:
    got = _by_check(check_values(values, None, RowMap(len(values)), default_rules(True, True)))
    oracle = {
        "nan": np.flatnonzero(np.isnan(values)),
        "inf": np.flatnonzero(np.isinf(values)),
        "extreme": np.flatnonzero(np.isfinite(values) & (np.abs(values) > FP16_MAX)),
    }
    for check, rows in oracle.items():
        if rows.size:
            assert got[check] == (rows.tolist(), [1] * rows.size)
        else:
            assert check not in got


@settings(max_examples=100, deadline=None)
@given(values=floats, width=st.integers(1, 5))
def test_vectors_report_the_row_and_count_every_element(values: np.ndarray, width: int) -> None:
    n = len(values) // width
    values = values[: n * width]
    got = _by_check(check_values(values, None, RowMap(n, stride=width), default_rules(True, True)))
    per_row = np.isnan(values).reshape(n, width).sum(axis=1)
    rows = np.flatnonzero(per_row)
    if rows.size:
        assert got["nan"] == (rows.tolist(), per_row[rows].tolist())
    else:
        assert "nan" not in got


def test_nulls_are_not_nan_and_values_under_nulls_are_ignored() -> None:
    values = np.array([1.0, np.nan, 5.0, np.nan])
    valid = np.array([True, True, False, False])  # slot 3 holds garbage NaN under a null
    hits = check_values(values, valid, RowMap(4), default_rules(True, True))
    assert _by_check(hits) == {"null": ([2, 3], [1, 1]), "nan": ([1], [1])}
    assert [h.severity for h in hits] == [Severity.ERROR, Severity.ERROR]  # a null reads as NaN
    relaxed = check_values(values, valid, RowMap(4), default_rules(True, True, Severity.WARNING))
    assert [h.severity for h in relaxed] == [Severity.WARNING, Severity.ERROR]


@pytest.mark.parametrize(
    ("rule", "bad"),
    [
        (Range("out_of_range", Severity.ERROR, 0, 9), [0, 4]),
        (Range("out_of_range", Severity.ERROR, 0, 9, include_min=False), [0, 1, 4]),
        (Range("out_of_range", Severity.ERROR, None, 9, include_max=False), [3, 4]),
    ],
)
def test_ranges(rule: Range, bad: list[int]) -> None:
    values = np.array([-1, 0, 5, 9, 12], dtype=np.int64)
    hits = check_values(values, None, RowMap(5), ColumnRules(ranges=(rule,)))
    assert _by_check(hits) == {"out_of_range": (bad, [1] * len(bad))}


def test_bound_ignores_non_finite_and_isin() -> None:
    values = np.array([np.inf, 200.0, -150.0, 3.0])
    rules = ColumnRules(
        bounds=(Bound(100.0, "extreme", Severity.ERROR),),
        allowed=(Allowed("isin", Severity.ERROR, (3.0, 200.0)),),
    )
    got = _by_check(check_values(values, None, RowMap(4), rules))
    assert got["extreme"] == ([1, 2], [1, 1])
    assert got["inf"] == ([0], [1])
    assert got["isin"] == ([0, 2], [1, 1])


def test_clean_data_yields_nothing() -> None:
    values = np.linspace(-3, 3, 1000).astype(np.float32)
    assert check_values(values, None, RowMap(1000), default_rules(True, True)) == []


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_fp16_bound_is_exact_in_every_float_width(dtype: type) -> None:
    """65520 overflows to Inf in float16; 65504 does not.  A float32 column holding exactly
    65520 must be flagged although the bound (65519.99...) rounds to 65520 in float32."""
    from datacheck.checks._registry import FP16_OVERFLOW

    if dtype is np.float16:
        values = np.array([65504.0, -65504.0, 1.0], dtype=dtype)  # 65520 is Inf in float16
        want: list[int] = []
    else:
        values = np.array([65504.0, 65520.0, -65520.0, 65519.0, 1.0], dtype=dtype)
        want = [1, 2]
    rules = ColumnRules(bounds=(Bound(FP16_OVERFLOW, "fp16_safe"),))
    hits = check_values(values, None, RowMap(len(values)), rules)
    rows = sorted(int(r) for h in hits if h.check == "fp16_safe" for r in h.rows)
    assert rows == want
    assert (np.abs(values.astype(np.float64)) > FP16_OVERFLOW).nonzero()[0].tolist() == want


def test_a_signalling_nan_is_a_nan_finding_without_a_warning() -> None:
    """A damaged float32 can hold a signalling NaN; casting it for the finding's value sets
    the FP invalid flag (a RuntimeWarning, an error under pytest): found like any NaN."""
    values = np.array([1.0, 0.0, 2.0], dtype=np.float32)
    values.view(np.uint32)[1] = 0x7F800001  # exponent all ones, quiet bit clear
    (hit,) = check_values(values, None, RowMap(3, stride=1), default_rules(True, True))
    assert hit.check == "nan" and hit.rows.tolist() == [1]
