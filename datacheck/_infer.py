"""``datacheck infer``: profile trusted data in one streaming pass and write a pandera schema.

The pass is an ordinary scan with profiling on (same readers, same executors, quantile sketches
merged across units and workers).  The schema it writes is pandera YAML, readable and commented
for hand editing, with datacheck's checks:

* ``finite`` on float columns (NaN and +/-Inf are errors);
* ``nullable`` as observed (a column with any null is nullable);
* ``in_range``: the observed range widened by ``margin`` of its span on each side (not below 0
  for a column that never was negative), as a warning;
* ``reference_stats``: the observed mean and std, with the value-level z-score bound
  (``extreme``) and the shard ``drift`` thresholds written out explicitly;
* ``normalized`` on the columns that should be standardised (``--normalized``; by default every
  scalar float column when most of them already look standardised).

It loads back through :func:`datacheck.load_schema` and through pandera's
``DataFrameSchema.from_yaml`` (after ``datacheck.schema`` has registered its checks).
"""

from __future__ import annotations

import math
import re
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datacheck._escape import printable
from datacheck._infer_checks import (
    _is_float,
    _looks_normalized,
    _normalized_lines,
    _num,
    _range_lines,
    _reference_lines,
    _shard_drift,
)
from datacheck.checks._rules import ZSCORE_MAX
from datacheck.errors import InputError, UsageError
from datacheck.profile._damage import column_damage

__all__ = ["InferConfig", "InferResult", "infer"]

_ARROW_TO_PANDERA = {
    "double": "float64",
    "float": "float32",
    "halffloat": "float16",
    "bool": "bool",
    **{f"{s}int{b}": f"{s}int{b}" for s in ("", "u") for b in (8, 16, 32, 64)},
}
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


@dataclass(frozen=True, kw_only=True)
class InferConfig:
    """Settings of ``datacheck infer``; validated on construction."""

    normalized: str | Sequence[str] = "auto"
    """``auto``, ``none``, or the columns that should be standardised."""
    margin: float = 0.1
    """Widen the observed range by this fraction of its span on each side."""
    zscore_max: float = ZSCORE_MAX
    """Value-level z-score bound written into ``reference_stats``."""
    workers: int | None = None
    """Parallel workers for the profiling pass (default: one per core)."""
    executor: str = "auto"
    """Executor of the profiling pass (as for ``scan``)."""
    allow_dirty: bool = False
    """Learn from reference data that holds damage (NaN, Inf, all-null columns, values beyond
    float16, a shard unlike the others): written, with what was seen.  Without it such a
    schema is not written (``InferResult.damage`` says why; the CLI exits 1)."""

    def __post_init__(self) -> None:
        if not (0 <= self.margin < math.inf):
            raise UsageError(f"margin must be >= 0, got {self.margin!r}")
        if not self.zscore_max > 0:
            raise UsageError(f"zscore_max must be > 0, got {self.zscore_max!r}")
        if isinstance(self.normalized, str) and self.normalized not in ("auto", "none"):
            raise UsageError(
                f"normalized {self.normalized!r}: pass 'auto', 'none' or a list of columns"
            )


@dataclass
class InferResult:
    """The inferred schema text, and notes worth showing the user."""

    text: str
    files: int
    rows: int
    columns: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Column -> merged statistics (``profile.json``'s ``columns``) plus ``dtype``."""
    notes: list[str] = field(default_factory=list)
    damage: list[str] = field(default_factory=list)
    """What the reference data holds that no schema should learn from, one line per column
    (``"x0: 3 NaN; values up to 1.5e+06, beyond float16's 65504"``)."""
    written: bool = False
    """Whether the schema was written to ``out`` (not when damaged, unless ``allow_dirty``)."""


def _key(name: str) -> str:
    import json

    if _PLAIN_KEY.match(name) and name.lower() not in _YAML_WORDS:
        return name
    return json.dumps(name)


def _dtype(arrow: str, nullable: bool) -> str | None:
    dtype = _ARROW_TO_PANDERA.get(arrow)
    if dtype and nullable and "int" in dtype:  # pandas' nullable integers: Int64, UInt8, ...
        return dtype[0].upper() + dtype[1:] if dtype.startswith("int") else "UInt" + dtype[4:]
    return dtype


def _normalized_columns(
    config: InferConfig,
    dtypes: dict[str, str],
    stats: dict[str, dict[str, Any]],
    notes: list[str] | None = None,
) -> set[str]:
    """The columns to mark ``normalized``: those named, or (``auto``) the scalar float columns
    that look standardised when most do; one that does not (a target, a raw feature) is left
    unmarked with a note: a check the reference data itself fails is none a careful person
    would write."""
    if config.normalized == "none":
        return set()
    if config.normalized != "auto":
        wanted = [config.normalized] if isinstance(config.normalized, str) else config.normalized
        unknown = sorted(set(wanted) - set(dtypes))
        if unknown:
            raise UsageError(
                f"--normalized: no column {', '.join(map(repr, unknown))} in the data; "
                f"columns: {', '.join(sorted(dtypes))}"
            )
        return set(wanted)
    floats = [c for c, t in dtypes.items() if t in ("double", "float", "halffloat")]
    looks = [c for c in floats if _looks_normalized(stats.get(c, {}))]
    if len(floats) < 2 or len(looks) * 2 <= len(floats):
        return set()
    for c in floats:
        if c not in looks and notes is not None and stats.get(c, {}).get("mean") is not None:
            s = stats[c]
            notes.append(
                f"column {c!r} is not standardised (mean {s['mean']:.4g}, std {s['std']:.4g}) "
                "while most float columns are: not marked normalized (a target, or a feature "
                f"someone forgot to scale?); --normalized {','.join([*looks, c])} requires it"
            )
    return set(looks)


def _stats_comment(arrow: str, s: dict[str, Any]) -> list[str]:
    lines = [
        f"# {arrow} | rows {s['rows']:,} | values {s['values']:,} | nulls {s['nulls']:,}"
        + (f" | NaN {s['nan']:,} | Inf {s['inf']:,}" if s.get("min") is not None else "")
    ]
    if s.get("min") is not None:
        q = s.get("quantiles") or {}
        parts = [f"min {_num(s['min'], 4)}"] + [f"{k} {_num(v, 4)}" for k, v in q.items()]
        parts += [f"max {_num(s['max'], 4)}", f"mean {_num(s['mean'], 4)}"]
        parts.append(f"std {_num(s['std'], 4)}")
        lines.append("# " + "  ".join(parts))
    return lines


def _column_lines(
    name: str,
    arrow: str,
    s: dict[str, Any],
    shards: dict[str, dict[str, Any]],
    normalized: bool,
    config: InferConfig,
    notes: list[str],
    missing: int = 0,
) -> list[str]:
    """One column's YAML; ``shards``: its per-file statistics; ``missing``: files without it."""
    dtype = _dtype(arrow, bool(s["nulls"]))
    numeric = s.get("min") is not None
    lines = _stats_comment(arrow, s)
    if dtype is None:
        lines.append(
            f"# no pandera dtype for {arrow}: not enforced"
            + ("; checks apply to every element" if "list" in arrow else "")
        )
    lines += [f"dtype: {dtype or 'null'}", f"nullable: {'true' if s['nulls'] else 'false'}"]
    if dtype is not None and dtype[0] in "IU" and "nt" in dtype:
        lines.append("coerce: true  # pandas reads an integer column with nulls as float64")
    if missing:
        lines.append(
            f"required: false  # absent from {missing} of the {missing + len(shards)} files"
        )
    checks: list[str] = []
    if _is_float(arrow):
        if s["nan"] or s["inf"]:
            notes.append(f"column {name!r}: {s['nan']} NaN and {s['inf']} Inf in the sample")
        checks += ["- options: {check_name: finite}  # NaN and +/-Inf are errors"]
    if numeric and dtype != "bool":
        why = _id_like(name, arrow, s, shards)
        range_lines = _range_lines(arrow, s, config.margin, config.zscore_max)
        if why and "drift" not in why:  # drifting shards get their own note below
            notes.append(f"column {name!r} looks like an id or a clock ({why}): value checks off")
        if why:
            checks.append(f"# value checks off: {why}; uncomment to enforce the range")
            checks += ["# " + c for c in range_lines]
        else:
            checks += range_lines
        checks += _reference_lines(name, s, shards, config.zscore_max, notes, off=bool(why))
    if normalized and numeric:
        checks += _normalized_lines(name, s, notes)
    if checks:
        lines += ["checks:"] + ["  " + c for c in checks]
    return [f"  {_key(name)}:"] + ["    " + ln for ln in lines]


_ID_NAME = re.compile(
    r"(^|[_\-. ])(id|idx|index|key|uuid|guid|row|timestamp|time|date|datetime|ts|epoch)$",
    re.IGNORECASE,
)


def _id_like(name: str, arrow: str, s: dict[str, Any], shards: dict[str, dict[str, Any]]) -> str:
    """Why a column looks like an id or a clock (empty if it does not): an integer column so
    named, or shards whose statistics already drift from each other.  Its range and z-scores
    describe the sample, not the data to come: checks on them would flag every new id."""
    if _ID_NAME.search(name) and not _is_float(arrow):
        return "an integer column named like an id or a time"
    if _shard_drift(s, shards):
        return "its profiled shards already differ beyond the drift thresholds"
    return ""


def _tabular(fmt: str) -> bool:
    from datacheck.formats import get_format

    return bool(get_format(fmt).tabular)


def _column_dtypes(files: list[dict[str, Any]]) -> dict[str, str]:
    """The majority Arrow type of every column over readable files, in first-seen order."""
    seen: dict[str, Counter[str]] = {}
    for f in files:
        for col, dt in (f.get("columns") or {}).items():
            seen.setdefault(col, Counter())[dt] += 1
    return {col: c.most_common(1)[0][0] for col, c in seen.items()}


def _header(paths: list[str], files: int, rows: int) -> list[str]:
    from datacheck._version import __version__

    return [
        f"# pandera schema inferred by datacheck {__version__} from {files} file(s), {rows:,} rows:",
        *[f"#   {p}" for p in paths[:10]],
        *(["#   ..."] if len(paths) > 10 else []),
        "# Edit freely. Enforce it with: datacheck scan DATA --schema THIS_FILE",
        "# Column checks: `reference_stats` gives value-level `extreme` (z-score) and per-shard",
        "# `drift` (mean shift / std ratio / constant / all null); `normalized` gives `unnormalized`.",
        "# Id- and time-like columns get their value checks written disabled (commented out).",
        "schema_type: dataframe",
        "columns:",
    ]


def infer(
    paths: str | Sequence[str],
    *,
    out: str | Path | None = None,
    config: InferConfig | None = None,
    **overrides: Any,
) -> InferResult:
    """Profile ``paths`` in one streaming pass and build a commented pandera YAML schema.

    Args:
        paths: files, directories or globs of trusted data.
        out: write the schema there (else only return it).
        config: settings; keyword overrides (``normalized=``, ``margin=``, ...) build one.

    Raises:
        InputError, UsageError: for bad inputs or settings.
    """
    from datacheck._scan import scan
    from datacheck.profile._stats import read_profile

    config = config or InferConfig(**overrides)
    inputs = [str(paths)] if isinstance(paths, (str, Path)) else [str(p) for p in paths]
    with tempfile.TemporaryDirectory(prefix="datacheck-infer-") as tmp:
        report = scan(
            inputs,
            out=tmp,
            profile=True,
            fail_on="never",
            workers=config.workers,
            executor=config.executor,
        )
        doc = read_profile(tmp)
        stats, by_file = doc["columns"], doc["files"]
        files = report.data["files"]
        drift = _drift_findings(report)
    readable = [f for f in files if f["status"] != "corrupt" and _tabular(f["format"])]
    dtypes = _column_dtypes(readable)
    notes = [
        f"{f['path']}: unreadable ({f['error']}); left out"
        for f in files
        if f["status"] == "corrupt"
    ]
    normalized = _normalized_columns(config, dtypes, stats, notes)
    notes += [
        f"{f['path']}: {f['format']} tensors are not inferred (write a tensors: section); left out"
        for f in files
        if f["status"] != "corrupt" and not _tabular(f["format"])
    ]
    if not dtypes:
        raise InputError(
            f"infer: no readable table among {len(files)} file(s) "
            f"({notes[0] if notes else 'no columns'}); pass trusted tabular data"
        )
    rows = sum(f["rows"] for f in readable)
    holding = {n: sum(1 for f in readable if n in (f.get("columns") or {})) for n in dtypes}
    ids = [n for n, a in dtypes.items() if _ID_NAME.search(n) and not _is_float(a)]
    found = column_damage(dtypes, stats, drift, holding, ids)
    damage = [f"{c}: {'; '.join(d)}" for c, d in found.items()]
    lines = _header(inputs, len(readable), rows) + _damage_lines(damage)
    for name, arrow in dtypes.items():
        s = stats.get(name) or {"rows": 0, "values": 0, "nulls": 0, "nan": 0, "inf": 0}
        having = [f["path"] for f in readable if name in (f.get("columns") or {})]
        shards = {p: by_file[p][name] for p in having if name in by_file.get(p, {})}
        missing = len(readable) - len(having)
        lines += _column_lines(name, arrow, s, shards, name in normalized, config, notes, missing)
    text = "\n".join(printable(ln) for ln in lines) + "\n"  # no name can smuggle a YAML line
    written = out is not None and (not damage or config.allow_dirty)
    if out is not None and written:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
    columns = {n: {"dtype": dtypes[n], **stats.get(n, {})} for n in dtypes}
    return InferResult(text, len(readable), rows, columns, notes, damage, written)


def _drift_findings(report: Any) -> list[tuple[str, str, str]]:
    """(path, column, message) of the profiling pass's drift findings (shard vs the others)."""
    out = []
    for frame in report.iter_findings(check="drift"):
        for path, column, value in zip(frame["path"], frame["column"], frame["value"], strict=True):
            out.append((str(path), str(column), str(value)))
    return out


def _damage_lines(damage: list[str]) -> list[str]:
    """The YAML's record of the damage it was learned from (``--allow-dirty``)."""
    if not damage:
        return []
    return [
        "# DAMAGE seen in the reference data, learned from as it is (--allow-dirty):",
        *[f"#   {d}" for d in damage],
    ]
