"""The verdict's tolerance, as Great Expectations' ``mostly``: a check may fail on a small
fraction of a column's rows without failing the scan.

Two sources, per (column, check): the schema's ``mostly: F`` option on a check (at least F of
the column's rows must pass), and the run's ``--max-bad-fraction CHECK=F`` (at most F of the
rows of any column may fail CHECK), which wins where both apply.  Only row-level findings are
tolerated (a bad row is a bad row); file- and column-level ones (``corrupt``, ``schema``,
``drift``, ``unnormalized``) always gate.  Every finding is still recorded: the tolerance
changes the verdict (``exit_code``), never ``quarantine.parquet`` or the counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["check_names", "parse_max_bad_fraction", "tolerance_summary"]

SCHEMA_ONLY = ("unique", "check_error", "truncated")
"""Check names a scan reports that no registry entry declares (the schema's own)."""


def _schema_names(schema: Any) -> set[str]:
    """The check names a compiled schema's rules report under."""
    if schema is None:
        return set()
    specs = [*schema.columns.values(), *schema.index]
    specs += [schema.undeclared] if schema.undeclared is not None else []
    out: set[str] = set()
    for spec in specs:
        rules = spec.rules
        for rule in (*rules.ranges, *rules.allowed, *rules.bounds):
            out.add(rule.check)
        out.update(str(getattr(c, "name", "")) for c in rules.pandas_checks)
    out.update(str(getattr(c, "name", "")) for c in schema.frame_checks)
    for checks in schema.mostly.values():
        out.update(checks)
    return out - {""}


def check_names(fractions: Mapping[str, float], schema: Any = None) -> None:
    """Refuse a ``--max-bad-fraction`` check name the scan can never report (a typo would
    tolerate nothing, silently).

    Raises:
        UsageError: naming the check, the closest known name and where to find them all.
    """
    import difflib

    from datacheck.checks._registry import CHECKS
    from datacheck.errors import UsageError

    known = set(CHECKS) | set(SCHEMA_ONLY) | _schema_names(schema)
    for check in fractions:
        if check in known:
            continue
        close = difflib.get_close_matches(check, sorted(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(
            f"--max-bad-fraction {check}={fractions[check]:g}: no check is named {check!r}"
            f"{hint}; the checks: {', '.join(sorted(CHECKS))}, or one the schema declares"
        )


def parse_max_bad_fraction(items: list[str] | None) -> dict[str, float]:
    """``["nan=0.001", "null=0.01"]`` -> ``{"nan": 0.001, "null": 0.01}``.

    Raises:
        UsageError: an item is not ``CHECK=F`` with F in [0, 1].
    """
    from datacheck.errors import UsageError

    out: dict[str, float] = {}
    for item in items or []:
        check, sep, value = item.partition("=")
        try:
            fraction = float(value) if sep and check.strip() else float("nan")
        except ValueError:
            fraction = float("nan")
        if not 0 <= fraction <= 1:
            raise UsageError(
                f"--max-bad-fraction {item!r}: write CHECK=FRACTION with FRACTION in [0, 1], "
                "e.g. --max-bad-fraction nan=0.001"
            )
        out[check.strip()] = fraction
    return out


def _limits(settings: Mapping[str, Any], columns: set[tuple[str, str]]) -> dict[tuple, Any]:
    """(column, check) -> (max bad fraction, where it comes from)."""
    run = settings.get("max_bad_fraction") or {}
    schema = settings.get("mostly") or {}
    out: dict[tuple, Any] = {}
    for column, check in columns:
        if check in run:
            out[(column, check)] = (float(run[check]), f"--max-bad-fraction {check}")
        elif check in schema.get(column, {}):
            mostly = float(schema[column][check])
            out[(column, check)] = (1.0 - mostly, f"schema mostly {mostly:g}")
    return out


def _row_sites(manifest: Path) -> dict[tuple[str, str], dict[str, int]]:
    """(column, check) -> severity -> row-level sites, from the manifest."""
    from datacheck.report._manifest import count_by

    out: dict[tuple[str, str], dict[str, int]] = {}
    counts = count_by(manifest, ["column", "check", "severity"], rows_only=True)
    for (column, check, severity), n in counts.items():
        out.setdefault((column or "", check), {})[severity] = n
    return out


def _rows_of(files: list[dict[str, Any]], column: str) -> int:
    """Rows of the readable files that hold ``column`` (all readable rows if none lists it)."""
    readable = [f for f in files if f["status"] != "corrupt"]
    having = [f for f in readable if column in (f.get("columns") or {})]
    return sum(int(f["rows"]) for f in (having or readable))


def tolerance_summary(
    manifest: Path, files: list[dict[str, Any]], settings: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, dict[str, int]]]:
    """(one entry per tolerated (column, check), sites the verdict leaves out per check and
    severity).  Empty when the scan has no tolerance."""
    if not settings.get("max_bad_fraction") and not settings.get("mostly"):
        return [], {}
    sites = _row_sites(manifest)
    entries: list[dict[str, Any]] = []
    tolerated: dict[str, dict[str, int]] = {}
    limits = _limits(settings, set(sites))
    for (column, check), (limit, source) in sorted(limits.items(), key=lambda kv: kv[0][::-1]):
        by_sev = sites[(column, check)]
        bad, rows = sum(by_sev.values()), _rows_of(files, column)
        fraction = bad / rows if rows else 1.0
        within = fraction <= limit
        entries.append(
            {
                "column": column,
                "check": check,
                "bad_rows": bad,
                "rows": rows,
                "fraction": fraction,
                "max_fraction": limit,
                "source": source,
                "within": within,
            }
        )
        if within:
            mine = tolerated.setdefault(check, {})
            for sev, n in by_sev.items():
                mine[sev] = mine.get(sev, 0) + n
    return entries, tolerated
