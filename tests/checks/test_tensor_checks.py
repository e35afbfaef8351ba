"""The per-sample tensor body (prefilter + exact checks) equals the flat NumPy body."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datacheck.checks._numpy import RowMap, check_values
from datacheck.checks._registry import BF16_MAX, FP16_MAX, FP16_OVERFLOW, Severity
from datacheck.checks._rules import Bound, ColumnRules, Range, default_rules
from datacheck.checks._tensor import sample_hits

SPECIALS = [
    np.nan,
    np.inf,
    -np.inf,
    FP16_MAX,
    np.nextafter(FP16_MAX, np.inf),
    65519.0,
    65520.0,
    -7e4,
    3.39e38,
    1e30,
]
RULES = {
    "default_float": default_rules(True, True),
    "max_abs": ColumnRules(bounds=(Bound(10.0, "extreme", Severity.ERROR),)),
    "fits": ColumnRules(
        bounds=(Bound(FP16_MAX), Bound(FP16_OVERFLOW, "fp16_safe"), Bound(BF16_MAX, "bf16_safe"))
    ),
    "range": ColumnRules(ranges=(Range("out_of_range", Severity.ERROR, -1.0, 1.0),)),
    "nan_only": ColumnRules(),
}


def _flat(x: np.ndarray, rules: ColumnRules) -> list[tuple]:
    n, k = x.shape
    return _canon(check_values(x.reshape(-1), None, RowMap(n, stride=k), rules))


def _canon(hits: list) -> list[tuple]:
    out = []
    for h in hits:
        vals = None if h.values is None else [v if v == v else "nan" for v in h.values.tolist()]
        out.append((h.check, h.severity, h.rows.tolist(), h.counts.tolist(), vals))
    return sorted(out, key=lambda t: t[0])


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 12),
    k=st.sampled_from([1, 5, 16, 40]),
    dtype=st.sampled_from([np.float32, np.float64, np.float16]),
    rule=st.sampled_from(sorted(RULES)),
    seed=st.integers(0, 2**31),
    plants=st.integers(0, 6),
)
def test_prefilter_matches_flat_checks(n, k, dtype, rule, seed, plants) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, k)) * rng.choice([0.5, 100.0, 3e4])
    for _ in range(plants):
        x[rng.integers(n), rng.integers(k)] = SPECIALS[rng.integers(len(SPECIALS))]
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    wide = x.astype(np.float32) if dtype == np.float16 else x  # float16 is checked as float32
    assert _canon(sample_hits(x, RULES[rule])) == _flat(wide, RULES[rule])


@pytest.mark.parametrize("dtype", [np.int64, np.uint8])
def test_integers(dtype) -> None:
    x = np.arange(60, dtype=dtype).reshape(3, 20)
    assert sample_hits(x, default_rules(False, True)) == []
    rules = ColumnRules(ranges=(Range("out_of_range", Severity.ERROR, 0, 30),))
    assert _canon(sample_hits(x, rules)) == _flat(x, rules)


def test_only_the_boundary_value_is_dirty() -> None:
    x = np.zeros((4, 32), np.float32)
    x[1, 3] = 65504.0  # exactly the fp16 max: fine
    x[2, 5] = np.nextafter(np.float32(65504.0), np.float32(np.inf))  # just beyond
    hits = sample_hits(x, default_rules(True, True))
    assert [(h.check, h.rows.tolist()) for h in hits] == [("extreme", [2])]
