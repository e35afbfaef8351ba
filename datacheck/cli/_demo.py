"""``datacheck demo DEST``: a small dataset with planted faults and its schema."""

from __future__ import annotations

import argparse
from typing import Any

from datacheck.cli._base import ExitCode

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``datacheck demo``."""
    p = sub.add_parser(
        "demo",
        help="write a small dataset with planted faults and a schema",
        description="Write a small dataset (4 Parquet/CSV shards and one truncated file) with "
        "planted NaN, +/-Inf, extreme values, a null and an out-of-range label, plus the "
        "pandera schema that catches them, into DEST; then run the printed scan command.",
    )
    p.add_argument("dest", help="folder to write into")
    p.set_defaults(func=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from datacheck._demo import write_demo

    root = write_demo(args.dest)
    print(f"demo dataset written to {root}/ (schema: {root}/schema.yaml)")
    print(f"next: datacheck scan {root} --schema {root}/schema.yaml --out ./dc-report")
    return ExitCode.OK
