"""The ``datacheck`` command line.  ``main(argv) -> int`` is testable in-process.

Exit codes (:class:`ExitCode`): 0 clean, 1 findings at or above ``--fail-on``, 2 usage or
input error.  A :class:`~datacheck.errors.DatacheckError` becomes one line on stderr, never a
traceback.  Subcommands living in other modules register through ``add_parser(subparsers)``
and are listed in ``_SUBCOMMAND_MODULES``.
"""

from __future__ import annotations

import argparse
import enum
import importlib
import json
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from datacheck.errors import DatacheckError, UsageError

_SUBCOMMAND_MODULES: tuple[str, ...] = ("datacheck._logs", "datacheck._report_cli", "datacheck._infer")
"""Modules exposing ``add_parser(subparsers)`` for extra subcommands (e.g. ``logs``)."""


class ExitCode(enum.IntEnum):
    OK = 0
    FINDINGS = 1
    USAGE = 2
    INTERRUPTED = 130
    TERMINATED = 143


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a pre-empted job, ``scancel``, a pod being evicted), unwound like Ctrl-C."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated()


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see '{self.prog} --help')")


def _add_scan(sub: Any) -> None:
    p = sub.add_parser("scan", help="scan datasets before training", description=(
        "Scan Parquet, CSV, Arrow/Feather and JSON Lines files for NaN, Inf, fp16-overflowing "
        "values, nulls, schema violations and corrupt files."))
    p.add_argument("paths", nargs="+", help="files, directories (recursive) or globs")
    p.add_argument("--schema", help="pandera schema: a YAML file or module:attr")
    p.add_argument("--out", default="datacheck-report", help="output folder (default: %(default)s)")
    p.add_argument("--fail-on", choices=["error", "warning", "never"], default="error",
                   help="exit 1 on findings at or above this severity (default: %(default)s)")
    p.add_argument("--workers", type=int, help="parallel workers (default: one per core)")
    p.add_argument("--executor", default="auto",
                   help="auto | inprocess | processes | distributed (default: %(default)s)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run on a running dask scheduler, e.g. tcp://10.0.0.5:8786 "
                        "(implies --executor distributed)")
    p.add_argument("--resume", action="store_true",
                   help="skip the work units an interrupted scan into --out already finished")
    p.add_argument("--unit-mb", type=int, default=512,
                   help="split files larger than this into row-group ranges (default: %(default)s)")
    p.add_argument("--format", choices=["text", "json"], default="text", dest="output_format",
                   help="summary on stdout as a table or as JSON (default: %(default)s)")
    p.add_argument("--html", action="store_true", help="also write report.html into --out")
    p.add_argument("--profile", action="store_true",
                   help="write per-file column statistics and quantiles to --out/profile.json "
                        "(on without it, without quantiles, for schemas with reference_stats)")
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", dest="progress", action="store_true", default=None,
                      help="show a progress bar (default: when stderr is a terminal)")
    prog.add_argument("--no-progress", dest="progress", action="store_false")
    p.set_defaults(func=_run_scan)


def _add_demo(sub: Any) -> None:
    p = sub.add_parser("demo", help="write a small dataset with planted faults and a schema")
    p.add_argument("dest", help="folder to write into")
    p.set_defaults(func=_run_demo)


def build_parser() -> argparse.ArgumentParser:
    from datacheck import __version__

    parser = _Parser(prog="datacheck", description=(
        "Keep bad data and numerical blow-ups from killing long training runs."))
    parser.add_argument("--version", action="version", version=f"datacheck {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    _add_scan(sub)
    _add_demo(sub)
    for name in _SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


class _ProgressBar:
    """A tqdm bar on stderr over the bytes scanned, with files done / total beside it."""

    def __init__(self) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=0, unit="B", unit_scale=True, desc="scanning", file=sys.stderr,
                        leave=False)  # fmt: skip
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
    from datacheck._summary import render_text

    config = ScanConfig(fail_on=args.fail_on, workers=args.workers, executor=args.executor,
                        unit_bytes=args.unit_mb << 20, scheduler=args.scheduler,
                        resume=args.resume, profile=args.profile)
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


def _run_demo(args: argparse.Namespace) -> int:
    from datacheck._demo import write_demo

    root = write_demo(args.dest)
    print(f"demo dataset written to {root}/ (schema: {root}/schema.yaml)")
    print(f"next: datacheck scan {root} --schema {root}/schema.yaml --out ./dc-report")
    return ExitCode.OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code instead of exiting.

    SIGTERM is handled like Ctrl-C: the scan stops, local workers are shut down, and the
    journal and parts stay in ``--out`` for ``--resume``; the exit code is 143.
    """
    previous = _install_sigterm()
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except DatacheckError as exc:
        print(f"datacheck: error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except _Terminated:
        print("datacheck: terminated (SIGTERM); rerun with --resume to finish", file=sys.stderr)
        return ExitCode.TERMINATED
    except KeyboardInterrupt:
        print("datacheck: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # e.g. `datacheck scan ... | head`
        return ExitCode.OK
    except SystemExit as exc:  # --help / --version
        return int(exc.code or 0)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _install_sigterm() -> Any:
    """Route SIGTERM to :func:`_on_sigterm` (main thread only; else leave it alone)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _on_sigterm)


def console_main() -> NoReturn:
    sys.exit(main())
