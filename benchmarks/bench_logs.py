"""``datacheck logs`` on a large text log, side by side with the floor of reading it.

Writes a training log in a real trainer's shape into a temporary folder (deleted after):

* ``megatron``: Megatron-LM/DeepSpeed ``training_log`` lines (~335 characters, 11
  ``|``-separated fields), a validation block and a checkpoint line every 1,000 iterations;
* ``nanogpt``: ``iter N: loss X, time Yms, mfu Z%`` lines (~50 characters), a ``step N: train
  loss X, val loss Y`` line and a checkpoint line every 250 iterations;

both with a loss spike and NaN near the end, and (``--long-tokens``, on by default) 100 lines of
one 40,000-character token each (the shape that used to backtrack quadratically).  Each file is
read in fresh child processes, in interleaved rounds (the fastest counts), as:

1. ``floor: bytes``: read the file in 1 MiB blocks and count newlines (disk and page cache);
2. ``floor: lines``: read it as UTF-8 text line by line (what any Python parser pays);
3. ``datacheck logs``: the command in-process (``datacheck.cli.main(["logs", PATH, "--format",
   "json"])``, its imports included).

Per variant: wall seconds, CPU seconds (user + system of the child), MB per CPU second and per
wall second, and the child's peak RSS (``VmHWM``).  On a shared machine the wall time counts the
other processes' turns too: the load average before and after is in the results.

    python benchmarks/bench_logs.py                                   # 32 + 128 MB -> logs.json
    python benchmarks/bench_logs.py --mb 1024 --rounds 1 --no-long-tokens --name logs-1gb
    python benchmarks/bench_logs.py --shape nanogpt --mb 64 --name logs-nanogpt
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from _harness import Table, child_main, interleaved, write_results

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _megatron_line(step: int, loss: float, gnorm: float) -> str:
    fields = [
        f" iteration {step:8d}/ 1000000",
        f"consumed samples: {step * 512:12d}",
        "elapsed time per iteration (ms): 1234.5",
        "learning rate: 6.000E-05",
        "global batch size:   512",
        f"lm loss: {'nan' if math.isnan(loss) else format(loss, '.6E')}",
        "loss scale: 4096.0",
        f"grad norm: {gnorm:.3f}",
        "num zeros: 0.0",
        "number of skipped iterations:   0",
        f"number of nan iterations: {int(math.isnan(loss)):3d}",
    ]
    return "[default0]:" + " | ".join(fields) + " |\n"


def _megatron(fh: IO[str], step: int, loss: float, gnorm: float) -> None:
    fh.write(_megatron_line(step, loss, gnorm))
    if step % 1000 == 999:
        fh.write(f" validation loss at iteration {step} | lm loss value: 2.5E+00 |\n")
        fh.write(f"saving checkpoint at iteration {step:8d} to /ckpt\n")


def _nanogpt(fh: IO[str], step: int, loss: float, gnorm: float) -> None:
    if step % 250 == 0:
        fh.write(f"step {step}: train loss {loss:.4f}, val loss {loss * 1.02:.4f}\n")
        fh.write("saving checkpoint to out\n")
    shown = "nan" if math.isnan(loss) else f"{loss:.4f}"
    fh.write(f"iter {step}: loss {shown}, time {120 + gnorm:.2f}ms, mfu 41.{step % 10}2%\n")


SHAPES: dict[str, tuple[Callable[[IO[str], int, float, float], None], int]] = {
    "megatron": (_megatron, 335),
    "nanogpt": (_nanogpt, 52),
}
"""Writer of one iteration, and about how many bytes an iteration takes."""


def generate(path: Path, mb: int, shape: str = "megatron") -> int:
    """A log of about ``mb`` MB in ``shape``; returns its number of iterations."""
    write, width = SHAPES[shape]
    rng = random.Random(0)
    lines = int(mb * 1024 * 1024 / width)
    with path.open("w", buffering=1 << 20) as fh:
        for step in range(lines):
            loss = 2.4 * math.exp(rng.gauss(0, 0.01))
            if step >= lines - 100:
                loss *= 3.0
            if step >= lines - 50:
                loss = math.nan
            write(fh, step, loss, 0.3 * math.exp(rng.gauss(0, 0.05)))
    return lines


def long_tokens(path: Path, lines: int = 100, width: int = 40_000) -> None:
    """Lines whose one token has no number in it (the old parser's quadratic case)."""
    with path.open("w") as fh:
        for step in range(lines):
            fh.write(f"step {step} loss 2.{step % 10} {'x' * width}\n")


def _cpu() -> float:
    return time.process_time()  # user + system of this process, finer than os.times()


def floor_bytes(args: list[str]) -> dict[str, object]:
    cpu, n = _cpu(), 0
    with open(args[0], "rb") as fh:
        while block := fh.read(1 << 20):
            n += block.count(b"\n")
    return {"lines": n, "cpu_s": _cpu() - cpu}


def floor_lines(args: list[str]) -> dict[str, object]:
    cpu, n = _cpu(), 0
    with open(args[0], encoding="utf-8", errors="replace", newline="") as fh:
        for _ in fh:
            n += 1
    return {"lines": n, "cpu_s": _cpu() - cpu}


def logs(args: list[str]) -> dict[str, object]:
    cpu = _cpu()
    from datacheck.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["logs", args[0], "--format", "json"])
    cpu = _cpu() - cpu
    if code not in (0, 1):
        raise SystemExit(f"datacheck logs exited {code}")
    doc: dict[str, Any] = json.loads(out.getvalue())
    return {
        "readings": doc["steps"],
        "status": doc["status"],
        "warning_step": doc["warning_step"],
        "nan_step": doc["nan_step"],
        "cpu_s": cpu,
    }


VARIANTS = {"floor: bytes": floor_bytes, "floor: lines": floor_lines, "datacheck logs": logs}


def _rows(label: str, size: float, best: dict[str, dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for name, res in best.items():
        cpu, wall = res["cpu_s"], res["seconds"]
        rows.append(
            [
                label,
                name,
                round(size, 1),
                wall,
                cpu,
                size / max(cpu, 1e-9),
                size / wall,
                res["rss_mb"],
                res.get("status", f"{res.get('lines', '')} lines"),
            ]
        )
    return rows


def _files(tmp: Path, args: argparse.Namespace) -> list[tuple[str, Path]]:
    files = []
    for mb in args.mb:
        path = tmp / f"{args.shape}-{mb}mb.log"
        start = time.perf_counter()
        iterations = generate(path, mb, args.shape)
        print(
            f"wrote {path.name}: {iterations:,} iterations in {time.perf_counter() - start:.0f} s"
        )
        files.append((f"{args.shape}, {iterations:,} iterations", path))
    if args.long_tokens:
        path = tmp / "long-tokens.log"
        long_tokens(path)
        files.append(("100 lines, each a 40,000-character token", path))
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="megatron")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--long-tokens", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--name", default="logs", help="results/<name>.json")
    parser.add_argument("--tmp", default=None, help="folder for the generated logs")
    args = parser.parse_args()
    load_before = list(os.getloadavg())
    rows, results = [], {}
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for label, path in _files(Path(tmp), args):
            size = path.stat().st_size / 2**20
            best = interleaved(__file__, list(VARIANTS), [str(path)], rounds=args.rounds)
            results[label] = {"size_mb": size, **best}
            rows += _rows(label, size, best)
    cpu = [(r[2], r[4]) for r in rows if r[1] == "datacheck logs"][: len(args.mb)]
    if len(cpu) >= 2:
        (s1, t1), (s2, t2) = cpu[0], cpu[-1]
        results["seconds_per_mb"] = (t2 - t1) / (s2 - s1)
        print(f"slope {results['seconds_per_mb']:.4f} CPU s/MB")
    table = Table(
        [
            "log",
            "variant",
            "MB",
            "wall s",
            "CPU s",
            "MB per CPU s",
            "MB per wall s",
            "peak RSS MB",
            "result",
        ],
        rows,
        title=f"datacheck logs against the floor ({args.shape}-shaped text log)",
    )
    write_results(args.name, results, table=table, params=vars(args), load_before=load_before)


if __name__ == "__main__":
    if not child_main(VARIANTS):
        main()
