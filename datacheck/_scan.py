"""``datacheck.scan``: discover -> plan units -> execute -> aggregate -> write the report."""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from datacheck.checks._registry import Severity
from datacheck.engine._discover import discover_files, plan_units
from datacheck.engine._duplicates import duplicate_findings
from datacheck.engine._journal import Journal
from datacheck.engine._merge import (
    apply_extra,
    empty_findings,
    file_entries,
    fold_counts,
    media_folders,
    null_column_findings,
    shard_dtype_findings,
    write_manifest,
)
from datacheck.engine._outputs import out_lock, retire_report
from datacheck.engine._result import UnitResult, poison_result
from datacheck.engine._unit import scan_unit
from datacheck.errors import UsageError
from datacheck.execute import check_executor, default_workers, prestart, run_units
from datacheck.formats import (
    UNIT_MEMORY,
    Format,
    _storage,
    check_requirements,
    ensure_registered,
    estimated_work,
    format_modules,
    get_format,
    main_formats,
)
from datacheck.profile._drift import needs_profile, profile_findings
from datacheck.report import FAIL_ON, MANIFEST, REPORT_JSON, Report, write_report_json
from datacheck.report._gate import check_names
from datacheck.schema import CompiledSchema, load_schema

__all__ = ["NULL_SEVERITIES", "ScanConfig", "scan"]

NULL_SEVERITIES = ("error", "warning")
"""What a null in a numeric column no schema column covers may be (``--null-severity``)."""


@dataclass(frozen=True, kw_only=True)
class ScanConfig:
    """Settings of one scan; validated on construction."""

    fail_on: str = "error"
    """Lowest severity that makes the scan fail: ``error``, ``warning`` or ``never``."""
    workers: int | None = None
    """Parallel workers (default: a worker per core)."""
    executor: str = "auto"
    """``auto``, ``inprocess``, ``processes`` or ``distributed``."""
    isolate: bool = True
    """Read files in worker processes, where a reader that crashes (a segfault on a damaged
    file) cannot end the scan.  False runs the ``inprocess`` executor in this very process:
    no worker to start, but a crash then ends the scan and there is no time limit."""
    unit_memory_mb: int | None = None
    """MiB of memory a worker may hold while reading one unit before the file is reported
    ``corrupt`` (0: no limit; default: half this machine's memory shared by the workers, at
    least 2 GiB).  Not enforced on ``distributed`` or with ``isolate=False``.  Readers also
    check what a file declares against a quarter of it (2 GiB when unset) before allocating:
    a row group, a value or a member past that is streamed, or refused as ``corrupt`` with
    the reason when it cannot be (:func:`datacheck.formats.memory_budget`)."""
    follow_symlinks: bool = False
    """Read symlinks inside input folders that lead outside them, and symlinked folders
    (otherwise listed under ``ignored`` with the reason)."""
    unit_timeout: float | None = None
    """Seconds a unit may run before it is reported ``corrupt`` (0: no limit; default: 300 s
    plus a second per 4 MiB of the unit).  Not enforced on ``distributed``."""
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
    max_bad_fraction: Mapping[str, float] = field(default_factory=dict)
    """Check -> the fraction of a column's rows that may fail it without failing the scan
    (``{"nan": 0.001}``); the findings are still all recorded."""
    null_severity: str = "error"
    """Severity of a null in a numeric column that no schema column covers: ``error`` (a
    loader turns a null into NaN) or ``warning``.  A schema column says it itself
    (``nullable: false``: an error; ``nullable: true``: allowed)."""

    def __post_init__(self) -> None:
        if self.fail_on not in FAIL_ON:
            raise UsageError(f"fail_on {self.fail_on!r} is not one of: {', '.join(FAIL_ON)}")
        if self.null_severity not in NULL_SEVERITIES:
            raise UsageError(
                f"null_severity {self.null_severity!r} is not one of: {', '.join(NULL_SEVERITIES)}"
            )
        if self.workers is not None and self.workers < 1:
            raise UsageError(f"workers must be >= 1, got {self.workers}")
        check_executor(self.executor)
        if self.unit_memory_mb is not None and self.unit_memory_mb < 0:
            raise UsageError(f"unit_memory_mb must be >= 0, got {self.unit_memory_mb}")
        if self.unit_timeout is not None and not self.unit_timeout >= 0:
            raise UsageError(f"unit_timeout must be >= 0 seconds, got {self.unit_timeout}")
        if self.unit_bytes < 1 << 20:
            raise UsageError(f"unit_bytes must be at least 1 MiB, got {self.unit_bytes}")
        for check, fraction in dict(self.max_bad_fraction).items():
            ok = isinstance(fraction, (int, float)) and not isinstance(fraction, bool)
            if not (isinstance(check, str) and check and ok and 0 <= fraction <= 1):
                raise UsageError(
                    f"max_bad_fraction {{{check!r}: {fraction!r}}}: map check names to "
                    "fractions in [0, 1], e.g. {'nan': 0.001}"
                )
        object.__setattr__(self, "max_bad_fraction", dict(self.max_bad_fraction))
        self._check_cluster()

    def _check_cluster(self) -> None:
        if self.scheduler is None and self.client is None:
            return
        if self.scheduler is not None and self.client is not None:
            raise UsageError("pass either scheduler= or client=, not both")
        if self.scheduler is not None and (
            not isinstance(self.scheduler, str) or not self.scheduler.strip()
        ):
            raise UsageError(
                f"scheduler must be an address like tcp://host:8786, got {self.scheduler!r}"
            )
        if self.executor not in ("auto", "distributed"):
            raise UsageError(
                f"a dask scheduler or client runs on executor 'distributed', not {self.executor!r}"
            )
        if self.workers is not None:
            warnings.warn(
                f"workers={self.workers} is ignored: the dask cluster's own workers run the scan",
                UserWarning,
                stacklevel=4,
            )
        object.__setattr__(self, "executor", "distributed")

    def run_options(self) -> dict[str, Any]:
        """Keyword arguments for the executor: ``executor_options`` plus the cluster."""
        opts = dict(self.executor_options)
        if self.executor != "distributed":
            opts.setdefault("isolate", self.isolate)
            opts.setdefault("unit_timeout", self.unit_timeout)
            mb = self.unit_memory_mb
            opts.setdefault("unit_memory", None if mb is None else mb << 20)
        if self.scheduler is not None:
            opts["scheduler"] = self.scheduler
        if self.client is not None:
            opts["client"] = self.client
        return opts


@lru_cache(maxsize=8)
def _schema_in_worker(spec: str, mtime: float) -> CompiledSchema | None:
    return load_schema(spec)


def _mtime(spec: str) -> float:
    """A schema file's mtime: workers outlive a scan, and the file may change in between."""
    try:
        return os.stat(spec).st_mtime
    except OSError:  # module:attr
        return 0.0


def _run_unit(
    unit: Any,
    schema: Any,
    parts_dir: str | None,
    profile: bool = False,
    sketch: bool = False,
    unit_memory: int | None = None,
    null_severity: str = "error",
    formats: tuple[Format, ...] = (),
) -> UnitResult:
    """The picklable unit function: a schema given as a string is loaded once per worker;
    ``unit_memory`` bounds what readers allocate (:func:`datacheck.formats.memory_budget`);
    ``formats`` are the script's own formats, which a fresh worker does not know."""
    ensure_registered(formats)
    compiled = _schema_in_worker(schema, _mtime(schema)) if isinstance(schema, str) else schema
    options = {} if unit_memory is None else {UNIT_MEMORY: unit_memory}
    null = Severity(null_severity)
    return scan_unit(unit, compiled, parts_dir, options, profile=profile, sketch=sketch, null=null)


def _output_dir(out: str | Path) -> Path:
    """Create the output folder, or say in one line why it cannot be."""
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(
            f"--out {str(out)!r}: a file, not a folder; pass a folder for the report "
            "(created if missing)"
        )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"--out {str(out)!r}: cannot create it ({exc.strerror}); pass a writable folder"
        ) from None
    if not os.access(out_dir, os.W_OK):
        raise UsageError(f"--out {str(out)!r}: not writable; pass a writable folder")
    return out_dir


class ProgressBar:
    """A tqdm bar on stderr over the bytes scanned, with files done / total beside it."""

    def __init__(self) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=0, unit="B", unit_scale=True, desc="scanning", file=sys.stderr, leave=False
        )
        self._parts: dict[str, int] = {}
        self._files_done = 0
        self._files = 0

    def start(self, units: Sequence[Any]) -> None:
        """Called by ``scan`` with the planned work units, before any runs."""
        self.bar.total = sum(u.size // max(u.n_parts, 1) for u in units)
        self._files = len({u.path for u in units})
        self.bar.refresh()

    def __call__(self, result: Any, done: int, total: int) -> None:
        seen = self._parts[result.path] = self._parts.get(result.path, 0) + 1
        if seen == result.n_parts:
            self._files_done += 1
        # drawn by update() when it redraws (at most every 0.1 s), not once per unit (22 us)
        self.bar.set_postfix_str(f"files {self._files_done}/{self._files}", refresh=False)
        self.bar.update(result.bytes)

    def close(self) -> None:
        self.bar.refresh()  # the last counts, which update() may not have drawn
        self.bar.close()


Progress = Callable[[UnitResult, int, int], None]


def _progress(progress: bool | Progress | None) -> tuple[Progress | None, Callable[[], None]]:
    """(callback, close): ``True`` draws a bar on stderr, ``False``/``None`` nothing."""
    if progress is True:
        bar = ProgressBar()
        return bar, bar.close
    if progress is None or progress is False:
        return None, lambda: None
    if not callable(progress):
        raise UsageError(
            f"progress={progress!r}: pass True (a bar on stderr), False, or a callable "
            "progress(result, done_units, total_units)"
        )
    return progress, lambda: None


def _null_severity(compiled: CompiledSchema | None, config: ScanConfig, column: str) -> Severity:
    """The severity of a null in ``column``: with a schema, an error where a column is not
    nullable (the units count nulls only there; undeclared columns have no null rule:
    DIFFERENCES ``undeclared``); without one, the scan's ``null_severity``."""
    if compiled is not None:
        return Severity.ERROR
    return Severity(config.null_severity)


def _local(path: str) -> str:
    """An absolute path for a local file; URLs stay as they are."""
    from datacheck.formats import _storage

    return path if _storage.is_url(path) else os.path.abspath(path)


def _columns_apply(compiled: CompiledSchema | None, units: Sequence[Any]) -> None:
    """Refuse a schema whose ``columns:`` would check nothing: every input is a tensor or
    media file (they take a ``tensors:`` section), so none of the user's checks would run."""
    if compiled is None or not compiled.columns or compiled.tensors is not None or not units:
        return
    if any(get_format(u.format).tabular for u in units):
        return
    names = ", ".join(list(compiled.columns)[:3]) + (", ..." if len(compiled.columns) > 3 else "")
    first = units[0]
    raise UsageError(
        f"the schema's columns: ({names}) check tables, and every input is a tensor or media "
        f"file ({first.path!r} is {first.format}): none of these checks would run; write them "
        "under a tensors: section (docs/how-to/tensors.md), or scan without --schema for the "
        "default checks"
    )


def _schema_setting(schema: Any, compiled: CompiledSchema | None) -> str | None:
    """What report.json records as the schema: an absolute path for a file, else its source."""
    if isinstance(schema, (str, Path)) and os.path.isfile(schema):
        return os.path.abspath(schema)
    return compiled.source if compiled else None


def scan(
    paths: str | Sequence[str],
    schema: Any = None,
    *,
    out: str | Path | None = None,
    config: ScanConfig | None = None,
    progress: bool | Progress | None = None,
    **overrides: Any,
) -> Report:
    """Scan files for NaN/Inf, extreme values, nulls, schema violations and corrupt files.

    Args:
        paths: files, directories (recursive) or globs, in any mix.
        schema: a pandera YAML path, ``module:attr``, a pandera ``DataFrameSchema``, or None.
        out: output folder for ``report.json`` and ``quarantine.parquet`` (default: a
            temporary folder that lives as long as the returned report).
        config: scan settings; keyword overrides (``fail_on=``, ``workers=``, ...) build one.
        progress: ``True`` for a progress bar on stderr, ``False``/``None`` for none, or a
            callable ``progress(result, done_units, total_units)`` run after each unit (if it
            has a ``start(units)`` method, that is called first with the planned units).

    Returns:
        The :class:`~datacheck.Report`.  ``report.json`` records absolute paths (or URLs),
        so the report reads back from any working directory.

    Raises:
        InputError, SchemaError, UsageError: for bad inputs or settings (never for bad data).
    """
    config = config or ScanConfig(**overrides)
    prestart(config.executor, config.isolate, [__name__])  # starts while we list the files
    inputs = [paths] if isinstance(paths, (str, Path)) else list(paths)
    inputs = [str(p) for p in inputs]
    compiled = load_schema(schema)
    check_names(config.max_bad_fraction, compiled)  # a typo would tolerate nothing
    # messages name the inputs as typed; then absolute paths
    found, skipped, reasons = discover_files(inputs, config.follow_symlinks)
    local_roots = {root: _local(root) for root in {root for _, root in found}}  # a few, many files
    files = [(_local(f), local_roots[root]) for f, root in found]
    ignored = [_local(f) for f in skipped]
    ignored_why = {_local(f): why for f, why in reasons.items()}
    inputs = [_local(p) for p in inputs]
    schema_setting = _schema_setting(schema, compiled)
    # uniqueness and whole-column checks need each file in one unit
    units = plan_units(
        files, 1 << 62 if compiled is not None and compiled.whole_file else config.unit_bytes
    )
    check_requirements(units)  # a missing decoder is the install, not the data
    _columns_apply(compiled, units)
    keepalive = None
    if out is None:
        keepalive = tempfile.TemporaryDirectory(prefix="datacheck-")
        out = keepalive.name
    out_dir = _output_dir(out)
    with out_lock(out_dir):  # one scan writes a folder at a time
        parts = out_dir / "parts"
        fingerprint = {
            "inputs": inputs,
            "schema": schema_setting,
            "unit_bytes": config.unit_bytes,
            "null_severity": config.null_severity,
        }
        journal = Journal(out_dir, parts, fingerprint, resume=config.resume)
        results, todo = journal.split(units)
        worker_schema: Any = compiled
        if isinstance(schema, (str, Path)) and schema:  # workers load it once each (by path)
            worker_schema = schema_setting if os.path.isfile(schema) else str(schema)
        if compiled is not None and not compiled.needs_pandera:
            worker_schema = compiled  # plain rules: workers need not import pandera (~1 s each)
        profiling = config.profile or needs_profile(compiled)
        fn = partial(
            _run_unit,
            schema=worker_schema,
            parts_dir=str(parts),
            profile=profiling,
            sketch=config.profile,
            unit_memory=None if config.unit_memory_mb is None else config.unit_memory_mb << 20,
            null_severity=config.null_severity,
            formats=main_formats({u.format for u in todo}),
        )
        start = time.perf_counter()
        workers = config.workers or default_workers()
        progress, close_progress = _progress(progress)
        if progress is not None and hasattr(progress, "start"):
            progress.start(units)
        preload = format_modules({u.format for u in todo})
        options = config.run_options()
        if config.executor == "distributed" or "scheduler" in options or "client" in options:
            options["fetch_dir"] = str(parts)  # parts a remote worker could not write here
        if any(_storage.in_this_process_only(u.path) for u in todo):
            options["isolate"] = False  # memory:// lives here: no worker could read it
        running = run_units(
            fn,
            todo,
            config.executor,
            workers,
            on_poison=poison_result,
            preload=preload,
            work=estimated_work(todo),
            **options,
        )
        try:  # on Ctrl-C / errors: stop the executor now, keep journal + parts for --resume
            for r in running:
                journal.record(r)
                results.append(r)
                if progress is not None:
                    progress(r, len(results), len(units))
        finally:
            getattr(running, "close", lambda: None)()
            journal.close()
            close_progress()
        entries = file_entries(results)
        roots = dict(files)
        for e in entries:
            e["root"] = roots.get(e["path"])  # the input folder (or URL prefix) it was found under
        shapes = {r.path: r.shapes for r in results if r.part == 0 and r.shapes is not None}
        extra = shard_dtype_findings(entries, roots, shapes)
        extra += empty_findings(entries) + duplicate_findings(entries)
        severity_of = partial(_null_severity, compiled, config)
        extra += null_column_findings(entries, results, severity_of, roots)
        folded: set[tuple[str, str]] = set()
        if profiling:
            corrupt = {e["path"] for e in entries if e["status"] == "corrupt"}
            columnwise, folded = profile_findings(
                out_dir, results, compiled, dict(files), corrupt, config.profile
            )
            extra += columnwise
        apply_extra(entries, extra)
        retire_report(out_dir, REPORT_JSON)  # the commit point: never beside another's manifest
        removed = write_manifest(out_dir, MANIFEST, results, extra, fold=folded)
        fold_counts(entries, removed)
        journal.finish()
        hidden = ("executor_options", "client", "resume")
        settings = {
            "inputs": inputs,
            "out": str(out_dir.resolve()),
            "schema": schema_setting,
            "mostly": {c: dict(v) for c, v in compiled.mostly.items()} if compiled else {},
            **{f.name: getattr(config, f.name) for f in fields(config) if f.name not in hidden},
            "workers": workers,
        }
        media = media_folders(entries, results)
        seconds = time.perf_counter() - start
        doc = write_report_json(
            out_dir, settings, entries, ignored, seconds, ignored_why, media=media
        )
    return Report(out_dir, doc, _keepalive=keepalive)
