"""``datacheck logs PATH``: the timeline of a training history (library side: :mod:`datacheck._logs`)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from datacheck.errors import UsageError

__all__ = ["add_parser"]


def add_parser(subparsers: Any) -> None:
    """Register ``datacheck logs`` on an argparse subparsers object."""
    p = subparsers.add_parser(
        "logs",
        help="find spikes and NaN in a training history",
        description=(
            "Read a training log (text, JSON Lines, CSV or TensorBoard events) and print the timeline: "
            "grad-norm precursor, loss warning, danger, NaN, and the step to restart from."
        ),
    )
    p.add_argument("path", help="train.log | metrics.jsonl | metrics.csv | events.out.tfevents.*")
    p.add_argument(
        "--spike-factor",
        type=float,
        default=10.0,
        help="loss jump over its recent median (default: %(default)s)",
    )
    p.add_argument(
        "--grad-spike-factor", type=float, help="grad-norm jump (default: the spike factor)"
    )
    p.add_argument(
        "--window",
        type=int,
        default=50,
        help="readings in the running median (default: %(default)s)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=10,
        help="readings before judging spikes (default: %(default)s)",
    )
    p.add_argument(
        "--lookback",
        type=int,
        default=200,
        help="largest gap in steps between grad-norm spikes, and to the loss warning, "
        "for them to count as its precursor (default: %(default)s)",
    )
    p.add_argument("--format", choices=["text", "json"], default="text", dest="output_format")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``datacheck logs``: 0 healthy, 1 spike or NaN (unreadable input raises InputError)."""
    if not args.spike_factor > 1 or (
        args.grad_spike_factor is not None and not args.grad_spike_factor > 1
    ):
        raise UsageError("logs: --spike-factor and --grad-spike-factor must be > 1 (e.g. 10)")
    if args.window < 1 or args.warmup < 0 or args.lookback < 0:
        raise UsageError("logs: --window must be >= 1, --warmup and --lookback >= 0")
    from datacheck._logs import analyze, read_history, render_text

    hist = read_history(args.path)
    tl = analyze(
        hist,
        spike_factor=args.spike_factor,
        grad_spike_factor=args.grad_spike_factor,
        window=args.window,
        warmup=args.warmup,
        lookback=args.lookback,
    )
    if args.output_format == "json":
        print(
            json.dumps(
                {"source": hist.source, "format": hist.format, "keys": hist.keys, **asdict(tl)}
            )
        )
    else:
        print(render_text(hist, tl))
    return 0 if tl.status == "healthy" else 1
