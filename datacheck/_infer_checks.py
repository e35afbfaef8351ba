"""The checks ``datacheck infer`` writes into a column's YAML: ranges, reference statistics and
normalisation, with the numbers as YAML reads them back (split from :mod:`datacheck._infer`)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from datacheck.checks._rules import Normalized, Reference


def _num(x: float, sig: int = 6) -> str:
    """A float as YAML 1.1 reads it back as a float (PyYAML needs ``1.0e-07``, not ``1e-07``)."""
    text = repr(float(f"{x:.{sig}g}"))
    if "e" in text and "." not in text.split("e")[0]:
        text = text.replace("e", ".0e")
    return text


def _bound(x: float, integer: bool) -> str:
    return str(int(x)) if integer and abs(x) < 2**53 else _num(x, 12)


def _quantum(scale: float, digits: int = 5) -> float:
    return 10.0 ** (math.floor(math.log10(scale)) - digits) if scale > 0 else 1e-12


def _range(stats: dict[str, Any], margin: float, integer: bool) -> tuple[float, float]:
    """The observed range widened by ``margin`` of its span, rounded outward."""
    lo, hi = float(stats["min"]), float(stats["max"])
    span = hi - lo
    pad = margin * (span if span > 0 else max(abs(hi), 1.0))
    lower, upper = lo - pad, hi + pad
    if lo >= 0 > lower:
        lower = 0.0
    if integer:
        return float(math.floor(lower)), float(math.ceil(upper))
    q = _quantum(max(abs(lower), abs(upper), span))
    return math.floor(lower / q) * q, math.ceil(upper / q) * q


def _is_float(arrow: str) -> bool:
    return arrow in ("double", "float", "halffloat") or (
        "list" in arrow and any(t in arrow for t in ("double", "float"))
    )


def _looks_normalized(stats: dict[str, Any]) -> bool:
    from datacheck.profile._drift import normalization_problem

    if stats.get("mean") is None or not stats.get("finite"):
        return False
    return normalization_problem(Normalized(), stats["mean"], stats["std"]) is None


def _reference_moments(s: dict[str, Any]) -> tuple[float, float]:
    """The reference mean and std exactly as the schema file writes them (rounded)."""
    std = float(s["std"])
    mean_q = _quantum(std, 4) if std > 0 else _quantum(abs(s["mean"]) or 1.0, 9)
    mean = round(float(s["mean"]) / mean_q) * mean_q
    return float(_num(mean, 12)), float(_num(std))


def _shard_drift(s: dict[str, Any], shards: dict[str, dict[str, Any]]) -> list[str]:
    """The ``drift`` findings the profiled shards themselves would get from ``reference_stats``."""
    from datacheck.profile._drift import drift_problem

    mean, std = _reference_moments(s)
    out = []
    for path, p in sorted(shards.items()):
        prof = SimpleNamespace(
            **{k: p.get(k) for k in ("rows", "values", "finite", "min", "max")},
            mean=p.get("mean"),
            std=p.get("std"),
        )
        msg = drift_problem(prof, mean, std, Reference.max_mean_shift, Reference.max_std_ratio)  # type: ignore[arg-type]
        if msg is not None:
            out.append(f"{path}: {msg}")
    return out


def _zscore_max(s: dict[str, Any], zscore_max: float) -> tuple[float, str]:
    """``zscore_max``, raised (with a comment) if the profiled values reach beyond it."""
    mean, std = _reference_moments(s)
    worst = max(abs(float(s["min"]) - mean), abs(float(s["max"]) - mean)) / std if std > 0 else 0
    if worst <= zscore_max:
        return zscore_max, ""
    raised = math.ceil(worst * 1.05 * 10) / 10
    return raised, f" (raised from {_num(zscore_max)}: the profiled values reach {worst:.3g} std)"


def _reference_lines(
    name: str,
    s: dict[str, Any],
    shards: dict[str, dict[str, Any]],
    zscore_max: float,
    notes: list[str],
    off: bool = False,
) -> list[str]:
    """The ``reference_stats`` check, never one that the profiled data itself would fail.

    ``off`` (an id- or time-like column): every bound ``.inf``, so neither values nor shards
    are judged, and the scan does not compare the shards with each other either.

    Shards that already differ beyond the ``drift`` thresholds (an id- or time-like column)
    get the moment tests off (``.inf``), with the reasons as comments: left out entirely, the
    scan would compare the shards with each other instead and warn about the same spread.
    """
    mean, std = _reference_moments(s)
    zmax, zwhy = _zscore_max(s, zscore_max)
    drift = _shard_drift(s, shards)
    shift, ratio = (
        (".inf", ".inf")
        if drift or off
        else (_num(Reference.max_mean_shift), _num(Reference.max_std_ratio))
    )
    zmax_text = ".inf" if off else _num(zmax)
    lines = []
    if drift:
        notes.append(
            f"column {name!r}: shard drift tests off: its profiled shards already "
            f"differ beyond the thresholds ({drift[0]}{'; ...' if len(drift) > 1 else ''})"
        )
        lines += [
            "# drift (mean shift / std ratio) off: the profiled shards themselves differ beyond",
            f"# max_mean_shift {_num(Reference.max_mean_shift)} / max_std_ratio "
            f"{_num(Reference.max_std_ratio)} (an id- or time-like column?):",
            *[f"#   {d}" for d in drift[:5]],
            *([f"#   ... and {len(drift) - 5} more"] if len(drift) > 5 else []),
        ]
    return lines + [
        f"- mean: {_num(mean, 12)}",
        f"  std: {_num(std)}",
        f"  zscore_max: {zmax_text}      # value-level `extreme`: |x - mean| > zscore_max * std{'' if off else zwhy}",
        f"  max_mean_shift: {shift}  # `drift`: a shard's mean moved more than this many std",
        f"  max_std_ratio: {ratio}   # `drift`: a shard's std is off by more than this factor",
        "  options: {check_name: reference_stats}",
    ]


def _normalized_lines(name: str, s: dict[str, Any], notes: list[str]) -> list[str]:
    n = Normalized()
    out = []
    if not _looks_normalized(s):
        msg = (
            f"column {name!r} is marked normalized but is not standardised in this data "
            f"(mean {_num(s['mean'], 4)}, std {_num(s['std'], 4)}): scans will report "
            "`unnormalized` until it is; delete the check if the column is meant raw"
        )
        notes.append(msg)
        out.append(f"# NOTE: {msg}")
    return out + [
        f"- mean: {_num(n.mean)}",
        f"  std: {_num(n.std)}",
        f"  max_mean_shift: {_num(n.max_mean_shift)}  # `unnormalized`: mean further than this many std from mean",
        f"  max_std_ratio: {_num(n.max_std_ratio)}   # `unnormalized`: std off by more than this factor",
        "  options: {check_name: normalized}",
    ]


FEW_VALUES = 64
"""An integer column whose observed range holds at most this many values (a label, a class,
a count) gets its exact range: a label observed in [0, 9] is never 10."""


def _range_lines(arrow: str, s: dict[str, Any], margin: float, zscore_max: float) -> list[str]:
    """``in_range`` as an error, or ``max_abs`` for list columns (pandera's range checks
    cannot compare a row's vector; datacheck's checks take every element).

    An integer column with few possible values gets its exact observed range; other integers
    the range widened by ``margin`` of its span; floats too, but never tighter than the
    reference's z-score bound (``mean +/- zscore_max * std``): a range learned from a finite
    sample of a continuous column would otherwise fail clean data from the same source."""
    integer = not _is_float(arrow)
    pct = f"{margin * 100:g}%"
    if "list" in arrow:
        top = max(abs(float(s["min"])), abs(float(s["max"])))
        bound, why = top * (1 + margin) if top > 0 else 1.0, f"widened by {pct}"
        if not integer:
            mean, std = _reference_moments(s)
            zmax, _ = _zscore_max(s, zscore_max)
            if abs(mean) + zmax * std > bound:
                bound, why = abs(mean) + zmax * std, f"{why}, at least |mean| + {_num(zmax, 3)} std"
        return [
            f"- max_abs: {_num(bound, 12)}  # observed |x| <= {_num(top, 6)}, {why}; every element",
            "  options: {check_name: max_abs}",
        ]
    observed = f"observed [{_num(s['min'], 6)}, {_num(s['max'], 6)}]"
    if integer and float(s["max"]) - float(s["min"]) < FEW_VALUES:
        lo, hi, why = float(s["min"]), float(s["max"]), "exactly (an integer with few values)"
    else:
        lo, hi = _range(s, margin, integer)
        why = f"widened by {pct} of the span"
        if not integer:
            lo, hi, why = _at_least_zscore(s, lo, hi, zscore_max, why)
    return [
        f"- min_value: {_bound(lo, integer)}  # {observed}, {why}",
        f"  max_value: {_bound(hi, integer)}",
        "  options: {check_name: in_range}  # an error; add raise_warning: true for a warning",
    ]


def _at_least_zscore(
    s: dict[str, Any], lo: float, hi: float, zscore_max: float, why: str
) -> tuple[float, float, str]:
    """A float range no tighter than the reference's z-score bound (a never-negative column
    keeps its lower bound at 0)."""
    mean, std = _reference_moments(s)
    zmax, _ = _zscore_max(s, zscore_max)
    z_lo, z_hi = mean - zmax * std, mean + zmax * std
    if float(s["min"]) >= 0 > z_lo:
        z_lo = 0.0
    if z_lo >= lo and z_hi <= hi:
        return lo, hi, why
    q = _quantum(max(abs(z_lo), abs(z_hi), hi - lo))
    lo, hi = min(lo, math.floor(z_lo / q) * q), max(hi, math.ceil(z_hi / q) * q)
    return lo, hi, f"{why}, at least mean +/- {_num(zmax, 3)} std"
