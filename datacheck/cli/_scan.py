"""``datacheck scan PATHS``: the pre-training gate (library side: :func:`datacheck.scan`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from datacheck.execute import EXECUTOR_NAMES

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``datacheck scan``."""
    p = sub.add_parser(
        "scan",
        help="scan datasets before training",
        description=(
            "Scan Parquet, CSV, Arrow/Feather and JSON Lines files for NaN, Inf, fp16-overflowing "
            "values, nulls, schema violations and corrupt files."
        ),
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
    p.add_argument("--workers", type=int, help="parallel workers (default: one per core)")
    p.add_argument(
        "--executor",
        default="auto",
        choices=EXECUTOR_NAMES,
        help="where units run (default: %(default)s)",
    )
    p.add_argument(
        "--unit-timeout",
        type=float,
        metavar="SECONDS",
        help="report a file corrupt when reading one unit of it takes longer "
        "(default: 300 s plus 1 s per 4 MiB; 0: no limit)",
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
        type=int,
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


class _ProgressBar:
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
        self.bar.update(result.bytes)
        self.bar.set_postfix_str(f"files {self._files_done}/{self._files}")

    def close(self) -> None:
        self.bar.close()


def _progress_bar(enabled: bool | None) -> _ProgressBar | None:
    if enabled is None:
        enabled = sys.stderr.isatty()
    return _ProgressBar() if enabled else None


def _run_scan(args: argparse.Namespace) -> int:
    from datacheck._scan import ScanConfig, scan
    from datacheck.report._text import render_text

    config = ScanConfig(
        fail_on=args.fail_on,
        workers=args.workers,
        executor=args.executor,
        isolate=args.isolate,
        unit_timeout=args.unit_timeout,
        unit_bytes=args.unit_mb << 20,
        scheduler=args.scheduler,
        resume=args.resume,
        profile=args.profile,
    )
    progress = _progress_bar(args.progress)
    try:
        report = scan(args.paths, args.schema, out=args.out, config=config, progress=progress)
    finally:
        if progress is not None:
            progress.close()
    if args.html:
        report.write_html()
    if args.output_format == "json":
        print(json.dumps({"report": str(report.dir), **report.summary}, indent=1))
    else:
        print(render_text(report))
    return report.exit_code()
