"""``datacheck infer PATHS``: profile trusted data, write a pandera schema (library: :mod:`datacheck._infer`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from datacheck._escape import printable
from datacheck.checks._rules import ZSCORE_MAX

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``datacheck infer``."""
    p = sub.add_parser(
        "infer",
        help="profile trusted data and write a pandera schema",
        description=(
            "Profile files in one streaming pass (dtype, nulls, NaN/Inf, min/max, mean/std, "
            "quantiles) and write a commented pandera YAML schema with datacheck checks."
        ),
    )
    p.add_argument("paths", nargs="+", help="files, directories (recursive) or globs")
    p.add_argument(
        "--out", default="schema.yaml", help="schema file to write (default: %(default)s)"
    )
    p.add_argument(
        "--normalized",
        default="auto",
        help="columns that should be standardised: auto, none, or a comma-separated "
        "list (default: %(default)s: every scalar float column when most look "
        "standardised)",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=0.1,
        help="widen observed ranges by this fraction of the span (default: %(default)s)",
    )
    p.add_argument(
        "--zscore-max",
        type=float,
        default=ZSCORE_MAX,
        help="value-level z-score bound (default: %(default)s)",
    )
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="learn from reference data that holds NaN, Inf, all-null columns, values beyond "
        "float16 or a shard unlike the others (default: report them, write nothing, exit 1)",
    )
    p.add_argument("--workers", type=int, help="parallel workers (default: one per core)")
    p.add_argument("--executor", default="auto", help="auto | inprocess | processes | distributed")
    p.set_defaults(func=_run_infer)


def _run_infer(args: argparse.Namespace) -> int:
    from datacheck._infer import InferConfig, infer

    normalized: str | list[str] = args.normalized
    if normalized not in ("auto", "none"):
        normalized = [c.strip() for c in args.normalized.split(",") if c.strip()]
    config = InferConfig(
        normalized=normalized,
        margin=args.margin,
        zscore_max=args.zscore_max,
        workers=args.workers,
        executor=args.executor,
        allow_dirty=args.allow_dirty,
    )
    result = infer(args.paths, out=args.out, config=config)
    for note in result.notes:
        print(f"note: {printable(note)}", file=sys.stderr)
    for line in result.damage:
        print(f"damage: {printable(line)}", file=sys.stderr)
    if not result.written:
        print(
            f"infer: {len(result.damage)} column(s) of the reference data hold damage (above); "
            f"{args.out} not written: infer from the clean files, or pass --allow-dirty to "
            "learn from them as they are",
            file=sys.stderr,
        )
        return 1
    dirty = " (learned from damaged data: see its header)" if result.damage else ""
    print(
        f"schema for {len(result.columns)} columns inferred from {result.files} file(s), "
        f"{result.rows:,} rows: {args.out}{dirty}"
    )
    print(f"next: datacheck scan DATA --schema {args.out}")
    return 0
