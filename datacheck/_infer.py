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
from types import SimpleNamespace
from typing import Any

from datacheck._escape import printable
from datacheck.checks._rules import ZSCORE_MAX, Normalized, Reference
from datacheck.errors import InputError, UsageError

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


def _is_float(arrow: str) -> bool:
    return arrow in ("double", "float", "halffloat") or (
        "list" in arrow and any(t in arrow for t in ("double", "float"))
    )


def _looks_normalized(stats: dict[str, Any]) -> bool:
    from datacheck.profile._drift import normalization_problem

    if stats.get("mean") is None or not stats.get("finite"):
        return False
    return normalization_problem(Normalized(), stats["mean"], stats["std"]) is None


def _normalized_columns(
    config: InferConfig, dtypes: dict[str, str], stats: dict[str, dict[str, Any]]
) -> set[str]:
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
    if len(floats) >= 2 and len(looks) * 2 > len(floats):
        return set(floats)
    return set()


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
        range_lines = _range_lines(arrow, s, config)
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


def _range_lines(arrow: str, s: dict[str, Any], config: InferConfig) -> list[str]:
    """``in_range``, or ``max_abs`` for list columns (pandera's range checks cannot compare
    a row's vector; datacheck's checks take every element)."""
    integer = not _is_float(arrow)
    pct = f"{config.margin * 100:g}%"
    if "list" in arrow:
        top = max(abs(float(s["min"])), abs(float(s["max"])))
        bound = _num(top * (1 + config.margin) if top > 0 else 1.0, 12)
        return [
            f"- max_abs: {bound}  # observed |x| <= {_num(top, 6)}, widened by {pct}; every element",
            "  options: {check_name: max_abs, raise_warning: true}",
        ]
    lo, hi = _range(s, config.margin, integer)
    return [
        f"- min_value: {_bound(lo, integer)}  # observed [{_num(s['min'], 6)}, {_num(s['max'], 6)}], widened by {pct} of the span",
        f"  max_value: {_bound(hi, integer)}",
        "  options: {check_name: in_range, raise_warning: true}  # a warning; drop raise_warning to make it an error",
    ]


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
    readable = [f for f in files if f["status"] != "corrupt" and _tabular(f["format"])]
    dtypes = _column_dtypes(readable)
    normalized = _normalized_columns(config, dtypes, stats)
    notes = [
        f"{f['path']}: unreadable ({f['error']}); left out"
        for f in files
        if f["status"] == "corrupt"
    ]
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
    lines = _header(inputs, len(readable), rows)
    for name, arrow in dtypes.items():
        s = stats.get(name) or {"rows": 0, "values": 0, "nulls": 0, "nan": 0, "inf": 0}
        having = [f["path"] for f in readable if name in (f.get("columns") or {})]
        shards = {p: by_file[p][name] for p in having if name in by_file.get(p, {})}
        missing = len(readable) - len(having)
        lines += _column_lines(name, arrow, s, shards, name in normalized, config, notes, missing)
    text = "\n".join(printable(ln) for ln in lines) + "\n"  # no name can smuggle a YAML line
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
    columns = {n: {"dtype": dtypes[n], **stats.get(n, {})} for n in dtypes}
    return InferResult(text, len(readable), rows, columns, notes)
