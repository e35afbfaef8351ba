"""``datacheck demo DEST``: a small dataset with planted faults and its schema."""

from __future__ import annotations

import argparse
from typing import Any

from datacheck.cli._base import ExitCode

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``datacheck demo``."""
    p = sub.add_parser("demo", help="write a small dataset with planted faults and a schema")
    p.add_argument("dest", help="folder to write into")
    p.set_defaults(func=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from datacheck._demo import write_demo

    root = write_demo(args.dest)
    print(f"demo dataset written to {root}/ (schema: {root}/schema.yaml)")
    print(f"next: datacheck scan {root} --schema {root}/schema.yaml --out ./dc-report")
    return ExitCode.OK
