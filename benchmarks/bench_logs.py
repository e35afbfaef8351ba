"""``datacheck logs`` parse benchmark: a large text log, linear time, bounded memory.

Writes Megatron-shaped training logs (the widest common line shape: ~330 characters, 11
``|``-separated fields, a validation block and a checkpoint line now and then; a loss spike and
NaN near the end) of two sizes, and a log of lines holding one 40,000-character token (the
shape that used to backtrack quadratically).  Each is read in a fresh child process, in
interleaved rounds, as:

1. floor:   read the file line by line and do nothing (what any parser pays);
2. logs:    ``datacheck._logs.read_history`` + ``analyze`` (what ``datacheck logs`` does).

Seconds per size show the scaling (linear: the ratio of times follows the ratio of sizes); the
1 GB figure is projected from the CPU seconds (the wall time on a shared machine counts the
other processes' turns too).  Peak RSS is the child's own.

    python benchmarks/bench_logs.py                 # 32 MB and 128 MB, 2 rounds
    python benchmarks/bench_logs.py --mb 8 32       # smaller
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from pathlib import Path

from _harness import Table, child_main, interleaved, write_results

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _line(step: int, loss: float, gnorm: float) -> str:
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


def generate(path: Path, mb: int) -> int:
    """A Megatron-shaped log of about ``mb`` MB; returns its number of iteration lines."""
    rng = random.Random(0)
    lines = int(mb * 1024 * 1024 / 335)
    with path.open("w") as fh:
        for step in range(lines):
            loss = 2.4 * math.exp(rng.gauss(0, 0.01))
            if step >= lines - 100:
                loss *= 3.0
            if step >= lines - 50:
                loss = math.nan
            fh.write(_line(step, loss, 0.3 * math.exp(rng.gauss(0, 0.05))))
            if step % 1000 == 999:
                fh.write(f" validation loss at iteration {step} | lm loss value: 2.5E+00 |\n")
                fh.write(f"saving checkpoint at iteration {step:8d} to /ckpt\n")
    return lines


def long_tokens(path: Path, lines: int = 100, width: int = 40_000) -> None:
    """Lines whose one token has no number in it (the old parser's quadratic case)."""
    with path.open("w") as fh:
        for step in range(lines):
            fh.write(f"step {step} loss 2.{step % 10} {'x' * width}\n")


def floor(args: list[str]) -> dict[str, object]:
    cpu, n = time.process_time(), 0
    with open(args[0], encoding="utf-8", errors="replace") as fh:
        for _ in fh:
            n += 1
    return {"lines": n, "cpu_s": time.process_time() - cpu}


def logs(args: list[str]) -> dict[str, object]:
    from datacheck._logs import analyze, read_history

    cpu = time.process_time()
    hist = read_history(args[0])
    tl = analyze(hist)
    return {
        "readings": len(hist.steps),
        "status": tl.status,
        "warning_step": tl.warning_step,
        "cpu_s": time.process_time() - cpu,
    }


VARIANTS = {"floor": floor, "logs": logs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    import os

    load_before = list(os.getloadavg())
    rows, results = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for mb in args.mb:
            path = Path(tmp) / f"megatron-{mb}mb.log"
            generate(path, mb)
            files.append((f"{mb} MB Megatron log", path))
        path = Path(tmp) / "long-tokens.log"
        long_tokens(path)
        files.append(("100 lines with a 40,000-char token", path))
        for label, path in files:
            size = path.stat().st_size / 2**20
            best = interleaved(__file__, list(VARIANTS), [str(path)], rounds=args.rounds)
            secs, cpu = best["logs"]["seconds"], best["logs"]["cpu_s"]
            results[label] = {"size_mb": size, **best}
            rows.append(
                [
                    label,
                    round(size, 1),
                    best["floor"]["seconds"],
                    secs,
                    cpu,
                    size / cpu,
                    1024 * cpu / size,
                    best["logs"]["rss_mb"],
                    best["logs"]["status"],
                ]
            )
    sizes = [(r[1], r[4]) for r in rows[: len(args.mb)]]
    if len(sizes) >= 2:
        (s1, t1), (s2, t2) = sizes[0], sizes[-1]
        slope = (t2 - t1) / (s2 - s1)
        results["projection_1gb_s"] = t1 + slope * (1024 - s1)
        results["seconds_per_mb"] = slope
        print(f"slope {slope:.3f} CPU s/MB; 1 GB: {results['projection_1gb_s']:.0f} CPU s")
    table = Table(
        [
            "log",
            "MB",
            "floor s",
            "logs s",
            "logs CPU s",
            "MB per CPU s",
            "1 GB, CPU s",
            "peak RSS MB",
            "status",
        ],
        rows,
        title="datacheck logs: parse + analysis of a text log (one core)",
    )
    write_results("logs", results, table=table, params=vars(args), load_before=load_before)


if __name__ == "__main__":
    if not child_main(VARIANTS):
        main()
