"""``datacheck logs PATH``: the timeline of a training history (library side: :mod:`datacheck._logs`)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from typing import Any

from datacheck.checks._spike import GRAD_NORM, LOSS
from datacheck.errors import UsageError

__all__ = ["add_parser"]


def add_parser(subparsers: Any) -> None:
    """Register ``datacheck logs`` on an argparse subparsers object."""
    p = subparsers.add_parser(
        "logs",
        help="find spikes and NaN in a training history",
        description=(
            "Read a training history (any trainer's text log, JSON Lines or the guard's log, CSV, "
            "trainer_state.json, TensorBoard event files or run folders) and print the timeline: "
            "early warnings, loss warning, danger, NaN, blips, the step to restart from and an LR."
        ),
    )
    p.add_argument(
        "path",
        help="train.log | metrics.jsonl | metrics.csv | trainer_state.json | "
        "events.out.tfevents.* | a TensorBoard run folder",
    )
    for flag, what in (
        ("--loss", "the training loss (several joined with + are summed)"),
        ("--step", "the step counter"),
        ("--grad-norm", "the grad norm"),
        ("--lr", "the learning rate"),
    ):
        p.add_argument(flag, metavar="KEY", help=f"key of {what}, instead of discovering it")
    p.add_argument(
        "--spike-ratio",
        "--spike-factor",
        type=float,
        default=LOSS.ratio,
        dest="ratio",
        help="a loss spike is at least this many times its recent median (default: %(default)s)",
    )
    p.add_argument(
        "--sigma",
        type=float,
        default=LOSS.sigma,
        help="and this many robust standard deviations (1.4826 x MAD) above it, once the window "
        "holds enough readings (default: %(default)s)",
    )
    p.add_argument(
        "--grad-ratio",
        "--grad-spike-factor",
        type=float,
        default=GRAD_NORM.ratio,
        dest="grad_ratio",
        help="the same ratio for the grad norm (default: %(default)s)",
    )
    p.add_argument(
        "--window",
        type=int,
        default=LOSS.window,
        help="readings in the running median and MAD (default: %(default)s)",
    )
    p.add_argument(
        "--lookback",
        type=int,
        default=200,
        help="largest gap in steps between grad-norm spikes, and to the loss warning, "
        "for them to count as its precursor; also how far back an LR raise makes the LR "
        "before it the stable one (default: %(default)s)",
    )
    p.add_argument("--format", choices=["text", "json"], default="text", dest="output_format")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``datacheck logs``: 0 healthy, 1 warning/spike/NaN (unreadable input raises InputError)."""
    if args.lookback < 0:
        raise UsageError("logs: --lookback must be >= 0")
    loss = replace(LOSS, ratio=args.ratio, sigma=args.sigma, window=args.window)
    grad = replace(GRAD_NORM, ratio=args.grad_ratio, sigma=args.sigma, window=args.window)
    from datacheck._jsonl import json_safe
    from datacheck._logs import Overrides, analyze, read_history, render_text

    overrides = Overrides(loss=args.loss, step=args.step, grad_norm=args.grad_norm, lr=args.lr)
    hist = read_history(args.path, overrides)
    tl = analyze(hist, loss=loss, grad_norm=grad, lookback=args.lookback)
    if args.output_format == "json":
        print(
            json.dumps(
                json_safe(
                    {
                        "source": hist.source,
                        "format": hist.format,
                        "keys": hist.keys,
                        "reasons": hist.reasons,
                        "eval_readings": len(hist.eval_steps),
                        **asdict(tl),
                    }
                ),
                allow_nan=False,
                default=str,
            )
        )
    else:
        print(render_text(hist, tl))
    return 0 if tl.status == "healthy" else 1
