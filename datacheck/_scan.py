"""``datacheck.scan``: discover -> plan units -> execute -> aggregate -> write the report."""

from __future__ import annotations

import os
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import pyarrow as pa

from datacheck import findings as fnd
from datacheck._discover import discover, plan_units
from datacheck._drift import needs_profile, profile_findings
from datacheck._execute import EXECUTORS, default_workers, run_units
from datacheck._resume import Journal
from datacheck._unit import UnitResult, scan_unit
from datacheck.checks._registry import Severity
from datacheck.errors import UsageError
from datacheck.report import FAIL_ON, MANIFEST, Report, write_report_json
from datacheck.schema import CompiledSchema, load_schema

__all__ = ["ScanConfig", "scan"]


@dataclass(frozen=True, kw_only=True)
class ScanConfig:
    """Settings of one scan; validated on construction."""

    fail_on: str = "error"
    """Lowest severity that makes the scan fail: ``error``, ``warning`` or ``never``."""
    workers: int | None = None
    """Parallel workers (default: a worker per core)."""
    executor: str = "auto"
    """``auto``, ``inprocess``, ``processes`` or ``distributed``."""
    unit_bytes: int = 512 << 20
    """Files larger than this are split into row-group ranges."""
    executor_options: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for the executor (e.g. ``retries`` for ``distributed``)."""
    scheduler: str | None = None
    """Address of a running dask scheduler (``tcp://host:8786``); implies ``distributed``."""
    client: Any = None
    """A ``dask.distributed.Client`` to run on (left open); implies ``distributed``."""
    resume: bool = False
    """Skip the units an interrupted scan into the same ``out`` folder already finished."""
    profile: bool = False
    """Profile every column (moments and quantile sketches) into ``profile.json``; moments are
    always collected when the schema has ``reference_stats`` or ``normalized`` columns."""

    def __post_init__(self) -> None:
        if self.fail_on not in FAIL_ON:
            raise UsageError(f"fail_on {self.fail_on!r} is not one of: {', '.join(FAIL_ON)}")
        if self.workers is not None and self.workers < 1:
            raise UsageError(f"workers must be >= 1, got {self.workers}")
        valid = {*EXECUTORS, "auto", "distributed"}
        if self.executor not in valid:
            raise UsageError(f"executor {self.executor!r} is not one of: {', '.join(sorted(valid))}")
        if self.unit_bytes < 1 << 20:
            raise UsageError(f"unit_bytes must be at least 1 MiB, got {self.unit_bytes}")
        self._check_cluster()

    def _check_cluster(self) -> None:
        if self.scheduler is None and self.client is None:
            return
        if self.scheduler is not None and self.client is not None:
            raise UsageError("pass either scheduler= or client=, not both")
        if self.scheduler is not None and (not isinstance(self.scheduler, str) or not self.scheduler.strip()):
            raise UsageError(f"scheduler must be an address like tcp://host:8786, got {self.scheduler!r}")
        if self.executor not in ("auto", "distributed"):
            raise UsageError(f"a dask scheduler or client runs on executor 'distributed', not {self.executor!r}")
        if self.workers is not None:
            warnings.warn(f"workers={self.workers} is ignored: the dask cluster's own workers run "
                          "the scan", UserWarning, stacklevel=4)
        object.__setattr__(self, "executor", "distributed")

    def run_options(self) -> dict[str, Any]:
        """Keyword arguments for the executor: ``executor_options`` plus the cluster."""
        opts = dict(self.executor_options)
        if self.scheduler is not None:
            opts["scheduler"] = self.scheduler
        if self.client is not None:
            opts["client"] = self.client
        return opts


@lru_cache(maxsize=8)
def _schema_in_worker(spec: str) -> CompiledSchema | None:
    return load_schema(spec)


def _run_unit(
    unit: Any, schema: Any, parts_dir: str | None, profile: bool = False, sketch: bool = False
) -> UnitResult:
    """The picklable unit function: a schema given as a string is loaded once per worker."""
    compiled = _schema_in_worker(schema) if isinstance(schema, str) else schema
    return scan_unit(unit, compiled, parts_dir, profile=profile, sketch=sketch)


def _file_entries(results: list[UnitResult]) -> list[dict[str, Any]]:
    """Merge unit results into one entry per file (every file exactly once)."""
    by_path: dict[str, list[UnitResult]] = defaultdict(list)
    for r in results:
        by_path[r.path].append(r)
    entries = []
    for path in sorted(by_path):
        parts = sorted(by_path[path], key=lambda r: r.part)
        counts: Counter[str] = Counter()
        sites: dict[str, Counter[str]] = defaultdict(Counter)
        for r in parts:
            counts.update(r.counts)
            for check, by_sev in r.sites.items():
                sites[check].update(by_sev)
        errors = [r.corrupt for r in parts if r.corrupt]
        if len(errors) > 1:  # one corrupt finding per file, however many units failed
            counts["corrupt"] = 1
            sites["corrupt"] = Counter({"error": 1})
        status = "corrupt" if errors else ("flagged" if counts else "ok")
        entries.append({
            "path": path, "format": parts[0].format, "status": status,
            "rows": sum(r.rows for r in parts), "bytes": sum(r.bytes for r in parts),
            "counts": dict(sorted(counts.items())),
            "sites": {k: dict(v) for k, v in sorted(sites.items())},
            "columns": parts[0].columns, "error": errors[0] if errors else None,
        })
    return entries


_TEXT_FORMATS = {"csv", "jsonl"}


def _dtype_kind(dtype: str, fmt: str) -> str | None:
    """What shards must agree on: the type, up to differences that are not drift.

    ``null`` (a column with no value in this shard) agrees with anything; string/binary/list
    offsets widths (``large_*``, ``*_view``) are the same data; and in text formats, where
    types are inferred, integers and floats are both ``number``.
    """
    if dtype == "null":
        return None
    for prefix in ("large_", ""):
        for base in ("string", "binary", "list"):
            if dtype.startswith(prefix + base):
                return base + dtype[len(prefix + base):]
    if dtype in ("string_view", "utf8_view"):
        return "string"
    if fmt in _TEXT_FORMATS and dtype.startswith(("int", "uint", "float", "double", "halffloat")):
        return "number"
    return dtype


def _group_key(entry: dict[str, Any], roots: dict[str, str]) -> tuple[str, str]:
    return roots.get(entry["path"], ""), entry["format"]


def shard_dtype_findings(entries: list[dict[str, Any]], roots: dict[str, str]) -> list[fnd.Finding]:
    """A column whose dtype differs from the other shards of the same dataset.

    Shards are grouped by input root and format; the majority dtype of each column is the
    reference.  Corrupt files are left out (their columns are unknown).
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        if e["status"] != "corrupt" and e["columns"]:
            groups[_group_key(e, roots)].append(e)
    out: list[fnd.Finding] = []
    for members in groups.values():
        if len(members) < 2:
            continue
        dtypes: dict[str, Counter[str]] = defaultdict(Counter)
        for e in members:
            for col, dt in e["columns"].items():
                if (kind := _dtype_kind(dt, e["format"])) is not None:
                    dtypes[col][kind] += 1
        for col, seen in dtypes.items():
            if len(seen) < 2:
                continue
            ref, n_ref = seen.most_common(1)[0]
            for e in members:
                dt = e["columns"].get(col)
                if dt is not None and _dtype_kind(dt, e["format"]) not in (None, ref):
                    msg = f"dtype {dt}, other shards have {ref} ({n_ref} of {len(members)})"
                    out.append(fnd.Finding(e["path"], "schema", Severity.ERROR, msg, column=col))
    return out


def _apply_extra(entries: list[dict[str, Any]], extra: list[fnd.Finding]) -> None:
    by_path = {e["path"]: e for e in entries}
    for f in extra:
        e = by_path[f.path]
        e["counts"][f.check] = e["counts"].get(f.check, 0) + f.count
        e["sites"].setdefault(f.check, {}).setdefault(f.severity.value, 0)
        e["sites"][f.check][f.severity.value] += 1
        if e["status"] == "ok":
            e["status"] = "flagged"


def _write_manifest(out: Path, results: list[UnitResult], extra: list[fnd.Finding]) -> int:
    """Stream every unit's findings into ``quarantine.parquet`` in (path, part) order."""
    writer = fnd.ManifestWriter(out / MANIFEST)
    seen_corrupt: set[str] = set()
    try:
        for r in sorted(results, key=lambda r: (r.path, r.part)):
            table = r.table
            if r.part_file is not None:
                table = fnd.read_part(r.part_file)
            if table is None:
                continue
            if r.corrupt and r.path in seen_corrupt:
                table = _drop_corrupt(table)
            seen_corrupt.update([r.path] if r.corrupt else [])
            writer.append(table)
        if extra:
            writer.append(fnd.findings_table(extra))
    finally:
        writer.close()
    return writer.rows


def _drop_corrupt(table: pa.Table) -> pa.Table:
    import pyarrow.compute as pc

    return table.filter(pc.not_equal(table["check"].cast(pa.string()), "corrupt"))


def _output_dir(out: str | Path) -> Path:
    """Create the output folder, or say in one line why it cannot be."""
    out_dir = Path(out)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"--out {str(out)!r}: cannot create it ({exc.strerror}); pass a writable folder"
        ) from exc
    if not os.access(out_dir, os.W_OK):
        raise UsageError(f"--out {str(out)!r}: not writable; pass a writable folder")
    return out_dir


def scan(
    paths: str | Sequence[str],
    schema: Any = None,
    *,
    out: str | Path | None = None,
    config: ScanConfig | None = None,
    progress: Callable[[UnitResult, int, int], None] | None = None,
    **overrides: Any,
) -> Report:
    """Scan files for NaN/Inf, extreme values, nulls, schema violations and corrupt files.

    Args:
        paths: files, directories (recursive) or globs, in any mix.
        schema: a pandera YAML path, ``module:attr``, a pandera ``DataFrameSchema``, or None.
        out: output folder for ``report.json`` and ``quarantine.parquet`` (default: a
            temporary folder that lives as long as the returned report).
        config: scan settings; keyword overrides (``fail_on=``, ``workers=``, ...) build one.
        progress: called as ``progress(result, done_units, total_units)`` after each unit; if
            it has a ``start(units)`` method, that is called first with the planned units.

    Returns:
        The :class:`~datacheck.Report`.

    Raises:
        InputError, SchemaError, UsageError: for bad inputs or settings (never for bad data).
    """
    config = config or ScanConfig(**overrides)
    inputs = [paths] if isinstance(paths, (str, Path)) else list(paths)
    inputs = [str(p) for p in inputs]
    compiled = load_schema(schema)
    files, ignored = discover(inputs)
    units = plan_units(files, config.unit_bytes)
    keepalive = None
    if out is None:
        keepalive = tempfile.TemporaryDirectory(prefix="datacheck-")
        out = keepalive.name
    out_dir = _output_dir(out)
    parts = out_dir / "parts"
    fingerprint = {"inputs": inputs, "schema": compiled.source if compiled else None,
                   "unit_bytes": config.unit_bytes}
    journal = Journal(out_dir, parts, fingerprint, resume=config.resume)
    results, todo = journal.split(units)
    worker_schema = schema if isinstance(schema, (str, Path)) and schema else compiled
    if isinstance(worker_schema, Path):
        worker_schema = str(worker_schema)
    if compiled is not None and not any(c.rules.pandas_checks for c in compiled.columns.values()):
        worker_schema = compiled  # plain rules: workers need not import pandera (~1 s each)
    profiling = config.profile or needs_profile(compiled)
    fn = partial(_run_unit, schema=worker_schema, parts_dir=str(parts), profile=profiling,
                 sketch=config.profile)  # fmt: skip
    start = time.perf_counter()
    workers = config.workers or default_workers()
    if progress is not None and hasattr(progress, "start"):
        progress.start(units)
    running = run_units(fn, todo, config.executor, workers, **config.run_options())
    try:  # on Ctrl-C / errors: stop the executor now, keep journal + parts for --resume
        for r in running:
            journal.record(r)
            results.append(r)
            if progress is not None:
                progress(r, len(results), len(units))
    finally:
        getattr(running, "close", lambda: None)()
        journal.close()
    entries = _file_entries(results)
    extra = shard_dtype_findings(entries, dict(files))
    if profiling:
        corrupt = {e["path"] for e in entries if e["status"] == "corrupt"}
        extra += profile_findings(out_dir, results, compiled, dict(files), corrupt, config.profile)
    _apply_extra(entries, extra)
    _write_manifest(out_dir, results, extra)
    journal.finish()
    hidden = ("executor_options", "client", "resume")
    settings = {
        "inputs": inputs, "schema": compiled.source if compiled else None,
        **{f.name: getattr(config, f.name) for f in fields(config) if f.name not in hidden},
        "workers": workers,
    }
    doc = write_report_json(out_dir, settings, entries, ignored, time.perf_counter() - start)
    return Report(out_dir, doc, _keepalive=keepalive)
