"""Column-level checks over per-shard profiles: ``drift`` and ``unnormalized``.

They run once all work units have finished, on the per-file profiles the units sent back (no
data is re-read), and give at most one finding per column per file (shard), with ``row`` null
and a message that says what is off, by how much, and the threshold.

``drift``: a shard's statistics disagree with the column's reference (``reference_stats`` in
the schema) or, without one, with the other shards of the same input (median of the shard
means and standard deviations; needs at least ``CONSENSUS_MIN_SHARDS`` shards; a warning):

* the mean moved by more than ``max_mean_shift`` reference standard deviations (default 3);
* the standard deviation is off by more than a factor ``max_std_ratio`` (default 3);
* the column is constant in the shard while the reference varies;
* the column is all null in the shard while the reference has values.

``unnormalized``: a column the schema marks ``normalized`` whose mean in a shard is more than
``max_mean_shift`` (default 0.5) target standard deviations from the target mean (default 0), or
whose std is off the target std (default 1) by more than a factor ``max_std_ratio`` (default 2).

Mean and std comparisons need ``MIN_VALUES`` finite values in the shard (a tiny shard's sample
std is noise); the constant and all-null tests do not.

**Outliers cannot fake drift.** Where the column has bounds (the reference's z-score bound,
``mean +/- zscore_max * std``), the moments compared (``drift`` and ``unnormalized``) are those
of the shard's values within them: a few
1e6 values in 200k rows are ``extreme`` row findings, not a moved mean.  A shard with more than
``OUTSIDE_SHARE`` of its values beyond the bounds has drifted whole: one ``drift`` finding
says so, and its per-value ``extreme`` and ``out_of_range`` findings are folded into it
(:func:`folded_columns`).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from datacheck import findings as fnd
from datacheck.checks._registry import DRIFT, UNNORMALIZED, CheckSpec, Severity
from datacheck.checks._rules import Normalized, Reference
from datacheck.profile._stats import ColumnProfile, merge_profiles, write_profile

__all__ = [
    "DRIFT",
    "UNNORMALIZED",
    "column_findings",
    "folded_columns",
    "profile_bounds",
    "needs_profile",
    "normalization_problem",
    "profile_findings",
]

MIN_VALUES = 30
"""Finite values a shard needs before its mean and std are compared."""
OUTSIDE_SHARE = 0.05
"""A shard with more than this share of its values beyond the column's bounds has drifted."""
CONSENSUS_MIN_SHARDS = 3
"""Shards needed to compare a column without reference statistics against the others."""


def needs_profile(schema: Any) -> bool:
    """Whether a compiled schema has column-level checks that need the scan to profile."""
    if schema is None:
        return False
    return any(
        s.rules.reference is not None or s.rules.normalized is not None
        for s in schema.columns.values()
    )


def _ratio(observed: float, expected: float) -> float:
    """How many times larger or smaller ``observed`` is (1 = equal; inf if one is 0)."""
    if observed == expected:
        return 1.0
    if observed <= 0 or expected <= 0:
        return math.inf
    return max(observed / expected, expected / observed)


def _moment_problems(
    mean: float, std: float, ref_mean: float, ref_std: float, max_shift: float, max_ratio: float
) -> list[str]:
    out = []
    if ref_std > 0:
        shift = abs(mean - ref_mean) / ref_std
        if shift > max_shift:
            out.append(
                f"mean {mean:.4g} is {shift:.3g} std from {ref_mean:.4g} (max {max_shift:g})"
            )
    ratio = _ratio(std, ref_std)
    if ratio > max_ratio and ref_std > 0 and std > 0:
        out.append(f"std {std:.4g} is x{ratio:.3g} off {ref_std:.4g} (max x{max_ratio:g})")
    return out


def normalization_problem(spec: Normalized, mean: float, std: float) -> str | None:
    """Why a column with this mean and std is not normalised per ``spec``, or None."""
    problems = _moment_problems(
        mean, std, spec.mean, spec.std, spec.max_mean_shift, spec.max_std_ratio
    )
    if std == 0:
        problems.append(f"constant {mean:.4g} (normalized means std {spec.std:g})")
    return "; ".join(problems) or None


def drift_problem(
    p: ColumnProfile,
    mean: float,
    std: float,
    max_shift: float,
    max_ratio: float,
    against: str = "the reference",
) -> str | None:
    """Why a shard's profile disagrees with reference ``mean``/``std``, or None.  With bounds
    (:class:`ColumnProfile`), the moments are those of the values within them."""
    if p.rows and not p.values:
        return f"all null in this shard ({p.rows} rows); {against} has values"
    if not p.finite:
        return None
    if p.finite >= 2 and p.min == p.max and std > 0:
        return (
            f"constant {p.min:.6g} in this shard ({p.finite} values); {against} has std {std:.4g}"
        )
    if p.finite < MIN_VALUES:
        return None
    if (beyond := _beyond(p)) is not None:  # drifted whole: its moments, all values, say how
        problems = _moment_problems(p.mean, p.std, mean, std, max_shift, max_ratio)
        return f"{'; '.join([beyond, *problems])} ({against})"
    n, p_mean, p_std = _moments(p)
    if n < MIN_VALUES:
        return None
    if std == 0 and p_mean != mean:
        return f"mean {p_mean:.6g}; {against} is constant {mean:.6g}"
    problems = _moment_problems(p_mean, p_std, mean, std, max_shift, max_ratio)
    return f"{'; '.join(problems)} ({against})" if problems else None


def _moments(p: Any) -> tuple[int, float, float]:
    """(n, mean, std) a shard is compared on (a ``ColumnProfile``, or a namespace of its
    statistics without bounds)."""
    if hasattr(p, "moments"):
        return p.moments()
    return p.finite, p.mean, p.std


def _beyond(p: Any) -> str | None:
    """ "201,000 of 201,000 values (100%) beyond the bounds [-5.9, 5.8]" when more than
    ``OUTSIDE_SHARE`` of a bounded shard's values are, else None."""
    outside = getattr(p, "outside", 0)
    if not outside or outside <= OUTSIDE_SHARE * p.finite:
        return None
    return (
        f"{outside:,} of {p.finite:,} values ({outside / p.finite:.0%}) beyond the bounds "
        f"[{p.lo:.4g}, {p.hi:.4g}] (mean +/- zscore_max std; their extreme/out_of_range rows folded here)"
    )


def _finding(path: str, spec: CheckSpec, sev: Severity, column: str, msg: str) -> fnd.Finding:
    return fnd.Finding(path, spec.name, sev, msg, column=column)


def _reference_findings(
    column: str, ref: Reference, shards: Mapping[str, ColumnProfile]
) -> list[fnd.Finding]:
    out = []
    for path, p in sorted(shards.items()):
        msg = drift_problem(p, ref.mean, ref.std, ref.max_mean_shift, ref.max_std_ratio)
        if msg is not None:
            out.append(_finding(path, DRIFT, ref.severity, column, msg))
    return out


def _consensus_findings(column: str, shards: Mapping[str, ColumnProfile]) -> list[fnd.Finding]:
    """Compare each shard with the median of the shards (robust to the odd one out)."""
    if len(shards) < CONSENSUS_MIN_SHARDS:
        return []
    if sum(1 for p in shards.values() if p.values) * 2 <= len(shards):
        return []  # mostly empty: nothing to compare with
    stats = [p for p in shards.values() if p.finite >= MIN_VALUES]
    robust = len(stats) * 2 > len(shards)
    mean = statistics.median(p.mean for p in stats) if robust else 0.0
    std = statistics.median(p.std for p in stats) if robust else 0.0
    out = []
    for path, p in sorted(shards.items()):
        if p.values and not std > 0:
            continue  # no spread to measure against: only the all-null test applies
        against = f"the median of {len(stats)} shards" if robust else "the other shards"
        msg = drift_problem(
            p, mean, std, Reference.max_mean_shift, Reference.max_std_ratio, against
        )
        if msg is not None:
            out.append(_finding(path, DRIFT, Severity.WARNING, column, msg))
    return out


def _normalized_findings(
    column: str, spec: Normalized, shards: Mapping[str, ColumnProfile]
) -> list[fnd.Finding]:
    out = []
    for path, p in sorted(shards.items()):
        n, mean, std = _moments(p)
        if p.finite < MIN_VALUES or (n < MIN_VALUES and _beyond(p) is None):
            continue
        msg = _beyond(p) or normalization_problem(spec, mean, std)
        if msg is not None:
            out.append(_finding(path, UNNORMALIZED, spec.severity, column, msg))
    return out


def profile_bounds(schema: Any) -> dict[str, tuple[float, float]]:
    """Column -> the bounds its drift moments are computed within (see the module doc)."""
    out: dict[str, tuple[float, float]] = {}
    for name, spec in schema.columns.items() if schema is not None else ():
        ref = spec.rules.reference
        z = ref.zscore_range() if ref is not None else None
        if z is not None and z.min is not None and z.max is not None:
            out[name] = (z.min, z.max)
    return out


def folded_columns(by_file: Mapping[str, Mapping[str, ColumnProfile]]) -> set[tuple[str, str]]:
    """(path, column) of the shards drifted whole (beyond their bounds): their per-value
    ``extreme`` and ``out_of_range`` findings are folded into the one ``drift`` finding."""
    return {
        (path, column)
        for path, cols in by_file.items()
        for column, p in cols.items()
        if p.finite >= MIN_VALUES and _beyond(p) is not None
    }


def column_findings(
    by_file: Mapping[str, Mapping[str, ColumnProfile]],
    schema: Any,
    groups: Mapping[str, str] | None = None,
) -> list[fnd.Finding]:
    """``drift`` and ``unnormalized`` findings from per-file profiles.

    Args:
        by_file: path -> column -> profile, one entry per readable file (shard).
        schema: the compiled schema (reference statistics, normalised columns), or None.
        groups: path -> dataset (input root); shards are compared only within a dataset.
    """
    datasets: dict[str, dict[str, dict[str, ColumnProfile]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for path, cols in by_file.items():
        for column, p in cols.items():
            datasets[(groups or {}).get(path, "")][column][path] = p
    out: list[fnd.Finding] = []
    for columns in datasets.values():
        for column, shards in sorted(columns.items()):
            spec = schema.columns.get(column) if schema is not None else None
            rules = spec.rules if spec is not None else None
            if rules is not None and rules.reference is not None:
                out += _reference_findings(column, rules.reference, shards)
            else:
                out += _consensus_findings(column, shards)
            if rules is not None and rules.normalized is not None:
                out += _normalized_findings(column, rules.normalized, shards)
    return sorted(out, key=lambda f: (f.path, f.column or "", f.check))


def profile_findings(
    out: Path,
    results: Sequence[Any],
    schema: Any,
    groups: Mapping[str, str],
    skip: set[str],
    sketched: bool,
) -> tuple[list[fnd.Finding], set[tuple[str, str]]]:
    """Merge the units' profiles per file, write ``profile.json``, return column findings
    and the (path, column) whose ``extreme`` warnings they fold (:func:`folded_columns`).

    Args:
        out: the report folder.
        results: the scan's ``UnitResult`` objects (their ``profile`` states).
        schema: the compiled schema, or None.
        groups: path -> input root (shards are compared within one input).
        skip: files left out of the checks (corrupt: their statistics are partial).
        sketched: whether the units built quantile sketches.
    """
    units: dict[str, list[dict[str, ColumnProfile]]] = defaultdict(list)
    for r in sorted(results, key=lambda r: (r.path, r.part)):
        if r.profile is not None:
            units[r.path].append({k: ColumnProfile.from_state(v) for k, v in r.profile.items()})
    by_file = {path: merge_profiles(parts) for path, parts in units.items()}
    write_profile(out, by_file, sketched)
    checked = {path: cols for path, cols in by_file.items() if path not in skip}
    return column_findings(checked, schema, groups), folded_columns(checked)
