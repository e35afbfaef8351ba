"""``datacheck scan PATHS``: the pre-training gate (library side: :func:`datacheck.scan`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from datacheck.cli._base import add_show_argument, non_negative_float, positive_int
from datacheck.execute import EXECUTOR_NAMES

__all__ = ["add_parser"]

_DESCRIPTION = (
    "Scan datasets for NaN, Inf, fp16-overflowing values, nulls, out-of-range values, schema "
    "violations, drift and corrupt files, and write report.json + quarantine.parquet.\n\n"
    "formats read (by extension or magic bytes; compressed CSV/JSON Lines too):\n{formats}"
)


def _description() -> str:
    """The description with every format the registry reads (built when help is shown)."""
    import datacheck.engine  # noqa: F401  (registers the readers)
    from datacheck.formats import formats

    lines = [
        f"  {name:<12} {' '.join(getattr(fmt, 'extensions', ()))}"
        for name, fmt in formats().items()
        if name != "unknown"
    ]
    return _DESCRIPTION.format(formats="\n".join(lines))


def add_parser(sub: Any) -> None:
    """Register ``datacheck scan``."""
    p = sub.add_parser(
        "scan",
        help="scan datasets before training",
        description=_DESCRIPTION.format(formats="(every registered format)"),
        late_description=_description,
    )
    p.add_argument("paths", nargs="+", help="files, directories (recursive) or globs")
    p.add_argument("--schema", help="pandera schema: a YAML file or module:attr")
    p.add_argument("--out", default="datacheck-report", help="output folder (default: %(default)s)")
    p.add_argument(
        "--fail-on",
        choices=["error", "warning", "never"],
        default="error",
        help="exit 1 on findings at or above this severity (default: %(default)s)",
    )
    p.add_argument(
        "--max-bad-fraction",
        action="append",
        metavar="CHECK=F",
        help="tolerate CHECK on at most fraction F of any column's rows without failing the "
        "scan, e.g. nan=0.001 (repeatable; findings are still all recorded; overrides a "
        "schema check's 'mostly')",
    )
    p.add_argument(
        "--null-severity",
        choices=["error", "warning"],
        default="error",
        help="a null in a numeric column that no schema column covers: an error (a loader "
        "turns it into NaN; the default) or a warning (a schema column says it with nullable)",
    )
    p.add_argument("--workers", type=positive_int, help="parallel workers (default: one per core)")
    p.add_argument(
        "--executor",
        default="auto",
        choices=EXECUTOR_NAMES,
        help="where units run (default: %(default)s)",
    )
    p.add_argument(
        "--unit-timeout",
        type=non_negative_float,
        metavar="SECONDS",
        help="report a file corrupt when reading one unit of it takes longer "
        "(default: 300 s plus 1 s per 4 MiB; 0: no limit)",
    )
    p.add_argument(
        "--unit-memory-mb",
        type=int,
        metavar="MIB",
        help="report a file corrupt when reading one unit of it needs more memory "
        "(default: half the machine's memory shared by the workers, at least 2048; 0: no limit)",
    )
    p.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="read symlinks that lead outside the input folders, and symlinked folders "
        "(default: list them under ignored)",
    )
    p.add_argument(
        "--no-isolation",
        dest="isolate",
        action="store_false",
        help="with --executor inprocess, read files in the datacheck process itself: no worker "
        "to start, but a reader that crashes on a damaged file ends the scan (trusted files only)",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run on a running dask scheduler, e.g. tcp://10.0.0.5:8786 "
        "(implies --executor distributed)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="skip the work units an interrupted scan into --out already finished",
    )
    p.add_argument(
        "--unit-mb",
        type=positive_int,
        default=512,
        help="split files larger than this into row-group ranges (default: %(default)s)",
    )
    p.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        dest="output_format",
        help="summary on stdout as a table or as JSON (default: %(default)s)",
    )
    add_show_argument(p)
    p.add_argument("--html", action="store_true", help="also write report.html into --out")
    p.add_argument(
        "--profile",
        action="store_true",
        help="write per-file column statistics and quantiles to --out/profile.json "
        "(on without it, without quantiles, for schemas with reference_stats)",
    )
    prog = p.add_mutually_exclusive_group()
    prog.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="show a progress bar (default: when stderr is a terminal)",
    )
    prog.add_argument("--no-progress", dest="progress", action="store_false")
    p.set_defaults(func=_run_scan)


def _run_scan(args: argparse.Namespace) -> int:
    from datacheck._scan import ScanConfig, scan
    from datacheck.report._gate import parse_max_bad_fraction
    from datacheck.report._text import render_text

    config = ScanConfig(
        fail_on=args.fail_on,
        max_bad_fraction=parse_max_bad_fraction(args.max_bad_fraction),
        null_severity=args.null_severity,
        workers=args.workers,
        executor=args.executor,
        isolate=args.isolate,
        follow_symlinks=args.follow_symlinks,
        unit_memory_mb=args.unit_memory_mb,
        unit_timeout=args.unit_timeout,
        unit_bytes=args.unit_mb << 20,
        scheduler=args.scheduler,
        resume=args.resume,
        profile=args.profile,
    )
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    report = scan(args.paths, args.schema, out=args.out, config=config, progress=progress)
    page = report.write_html() if args.html else None
    if args.output_format == "json":
        where = {"report": str(report.dir), **({"html": str(page)} if page else {})}
        print(json.dumps({**where, **report.summary}, indent=1))
    else:
        print(render_text(report, show=args.show))
        if page is not None:
            print(f"html:       {page}")
    return report.exit_code()
