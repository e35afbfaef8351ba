"""``datacheck report DIR``: show a finished scan's summary again, or write its HTML page."""

from __future__ import annotations

import argparse
from typing import Any

from datacheck.cli._base import add_show_argument
from datacheck.errors import UsageError

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register the ``report`` subcommand."""
    p = sub.add_parser(
        "report",
        help="summarise a scan's output folder, or write report.html",
        description="Print the summary of a finished scan (its --out folder) and exit with "
        "the scan's exit code; with --html, also write a self-contained report.html.",
    )
    p.add_argument("dir", help="the scan's --out folder (holds report.json)")
    add_show_argument(p)
    p.add_argument("--html", action="store_true", help="write report.html (no network assets)")
    p.add_argument(
        "--html-out",
        metavar="PATH",
        help="where to write the page (default: DIR/report.html); implies --html",
    )
    p.set_defaults(func=_run_report)


def _run_report(args: argparse.Namespace) -> int:
    from datacheck.report import load_report
    from datacheck.report._text import render_text

    report = load_report(args.dir)
    print(render_text(report, show=args.show))
    if args.html or args.html_out:
        try:
            dest = report.write_html(args.html_out)
        except OSError as exc:
            raise UsageError(
                f"--html-out {args.html_out!r}: cannot write it ({exc.strerror}); "
                "pass a path in a writable folder"
            ) from exc
        print(f"html:       {dest}")
    return report.exit_code()
