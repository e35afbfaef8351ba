"""Damage in reference data: what ``datacheck infer`` must not learn a schema from.

A schema learned from damaged data bakes the damage in: ``nullable: true`` for a column a bad
join emptied, a reference mean of 421,500 for a column one shard holds x1e6.  From the
profiling pass's merged statistics (and its consensus ``drift`` findings, which compare each
shard with the median of the others) each column is judged on:

* NaN and +/-Inf values;
* all or mostly (more than half) null;
* finite float values beyond float16's range (they overflow under fp16 mixed precision);
* shards whose statistics differ from the others' (a shard scaled or shifted by mistake).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from datacheck.checks._registry import FP16_MAX

__all__ = ["column_damage"]


def _one(name: str, arrow: str, s: Mapping[str, Any]) -> list[str]:
    out = []
    if s.get("nan"):
        out.append(f"{s['nan']:,} NaN")
    if s.get("inf"):
        out.append(f"{s['inf']:,} Inf")
    rows, nulls = int(s.get("rows") or 0), int(s.get("nulls") or 0)
    if rows and (not s.get("values") or nulls * 2 > rows) and _numeric(arrow, s):
        what = "all null" if not s.get("values") else "mostly null"
        out.append(f"{what} ({nulls:,} of {rows:,} rows)")
    top = max(abs(float(s.get("min") or 0.0)), abs(float(s.get("max") or 0.0)))
    if _float(arrow) and top > FP16_MAX:
        out.append(f"values up to {top:.4g}, beyond float16's {FP16_MAX:g}")
    return out


def _numeric(arrow: str, s: Mapping[str, Any]) -> bool:
    return s.get("min") is not None or arrow == "null" or _float(arrow) or "int" in arrow


def _float(arrow: str) -> bool:
    return any(t in arrow for t in ("double", "float", "halffloat"))


def column_damage(
    dtypes: Mapping[str, str],
    stats: Mapping[str, Mapping[str, Any]],
    drift: Iterable[tuple[str, str, str]] = (),
    shards: Mapping[str, int] | None = None,
    skip: Iterable[str] = (),
) -> dict[str, list[str]]:
    """Column -> what is wrong with it in the reference data (columns without damage absent).

    Args:
        dtypes: column -> Arrow type name.
        stats: column -> merged statistics (``profile.json``'s ``columns``).
        drift: (path, column, message) of the profiling pass's consensus ``drift`` findings.
        shards: column -> the number of files holding it: a drifting shard is damage when it
            is an odd one out (fewer than half of them drift); when most do, the column
            spreads across shards by nature (an id, a clock).
        skip: columns not judged (id- and time-like: their values are not features).
    """
    skipped = set(skip)
    out: dict[str, list[str]] = {}
    for name, arrow in dtypes.items():
        found = _one(name, arrow, stats.get(name) or {}) if name not in skipped else []
        if found:
            out[name] = found
    odd: dict[str, list[str]] = {}
    for path, column, message in drift:
        odd.setdefault(column, []).append(f"{path.rsplit('/', 1)[-1]}: {message}")
    for column, seen in odd.items():
        if column in skipped or len(seen) * 2 >= (shards or {}).get(column, len(seen)):
            continue
        more = f" (and {len(seen) - 1} more)" if len(seen) > 1 else ""
        out.setdefault(column, []).append(f"a shard unlike the others, {seen[0]}{more}")
    return out
