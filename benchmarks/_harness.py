"""One harness for every benchmark in this folder.

Every benchmark measures ratios side by side in ONE run (never absolute times across runs):

- each measured variant runs in a fresh child process (``python SCRIPT --child VARIANT ARGS``),
  so imports, caches and peak memory are its own; the child reports wall seconds and its own
  peak RSS (``VmHWM``: ``ru_maxrss`` carries the parent's peak across exec);
- variants run in interleaved rounds and the fastest round counts, so load changes on a shared
  machine hit every variant alike; the load average before and after is recorded beside them;
- results are written to ``benchmarks/results/<name>.json`` with the machine they ran on and a
  ``table`` (columns + rows) from which ``python benchmarks/tables.py`` prints the README tables.

A benchmark script uses it like this::

    VARIANTS = {"floor": read_only, "datacheck": scan}      # fn(args: list[str]) -> dict | None

    if __name__ == "__main__":
        if not child_main(VARIANTS):                          # the child side
            best = interleaved(__file__, list(VARIANTS), [path], rounds=3)
            write_results("scan", best, table=Table(["variant", "seconds"], rows))
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(
    os.environ.get("DATACHECK_BENCH_RESULTS") or Path(__file__).resolve().parent / "results"
)
"""Where results go (``DATACHECK_BENCH_RESULTS`` overrides it, e.g. for smoke tests)."""

__all__ = [
    "RESULTS",
    "Table",
    "child_main",
    "interleaved",
    "machine",
    "peak_rss_mb",
    "run_child",
    "run_tree",
    "write_results",
]


def peak_rss_mb() -> float:
    """This process's own peak resident memory (``VmHWM``) in MiB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    import resource  # pragma: no cover - not Linux

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _tree(pid: int) -> list[int]:
    out = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [q for c in fh.read().split() for q in _tree(int(c))]
    except OSError:  # it ended while we looked
        pass
    return out


def _memory(pid: int) -> tuple[int, int]:
    """(PSS, RSS) of one process in bytes; (0, 0) when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            fields = {ln.split(":")[0]: int(ln.split()[1]) for ln in fh if ln.endswith("kB\n")}
    except OSError:
        return 0, 0
    return fields.get("Pss", 0) << 10, fields.get("Rss", 0) << 10


def run_tree(cmd: Sequence[str], interval: float = 0.01, **popen: Any) -> dict[str, Any]:
    """Run ``cmd``; wall seconds, exit code, and the peak over time of the summed PSS and RSS
    of its whole process tree (sampled every ``interval`` s: forked workers share pages with
    their parent, which PSS splits and RSS counts in each), in MiB."""
    start = time.perf_counter()
    proc = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL, **popen)
    pss = rss = 0
    while proc.poll() is None:
        mem = [_memory(p) for p in _tree(proc.pid)]
        pss, rss = max(pss, sum(m[0] for m in mem)), max(rss, sum(m[1] for m in mem))
        time.sleep(interval)
    return {
        "seconds": time.perf_counter() - start,
        "rc": proc.returncode,
        "tree_pss_mb": pss / 2**20,
        "tree_rss_mb": rss / 2**20,
    }


def child_main(variants: Mapping[str, Callable[[list[str]], dict[str, Any] | None]]) -> bool:
    """Run ``--child VARIANT ARGS...`` if that is how this process was started.

    Prints one JSON line: ``seconds``, ``rss_mb`` and whatever the variant returned.  Returns
    False when the process is not a child (the caller then runs the parent side).
    """
    if len(sys.argv) < 3 or sys.argv[1] != "--child":
        return False
    name, args = sys.argv[2], sys.argv[3:]
    start = time.perf_counter()
    extra = variants[name](args) or {}
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "rss_mb": peak_rss_mb(), **extra}))
    return True


def run_child(
    script: str, variant: str, args: Sequence[str], timeout: float = 3600
) -> dict[str, Any]:
    """One measured run of ``variant`` in a fresh child process."""
    out = subprocess.run(
        [sys.executable, script, "--child", variant, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{variant}: child exited {out.returncode}\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def interleaved(
    script: str, variants: Sequence[str], args: Sequence[str], rounds: int = 3
) -> dict[str, dict[str, Any]]:
    """The fastest of ``rounds`` runs of each variant, the rounds interleaved across variants.

    Each result also keeps ``all_seconds`` (every round) so the spread can be reported.
    """
    best: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        for v in variants:
            res = run_child(script, v, args)
            seen = best.get(v, {}).get("all_seconds", []) + [res["seconds"]]
            if v not in best or res["seconds"] < best[v]["seconds"]:
                best[v] = res
            best[v]["all_seconds"] = seen
    return best


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    return {
        "cpus": len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "loadavg": list(os.getloadavg()),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


@dataclass
class Table:
    """A results table as the README shows it."""

    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    title: str = ""

    def markdown(self) -> str:
        head = "| " + " | ".join(self.columns) + " |"
        rule = "|" + "|".join("---" if i == 0 else "---:" for i in range(len(self.columns))) + "|"
        body = ["| " + " | ".join(_cell(c) for c in row) + " |" for row in self.rows]
        return "\n".join(([f"**{self.title}**", ""] if self.title else []) + [head, rule, *body])


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def write_results(
    name: str,
    results: Mapping[str, Any],
    *,
    table: Table | None = None,
    params: Mapping[str, Any] | None = None,
    load_before: Sequence[float] | None = None,
) -> Path:
    """Write ``benchmarks/results/<name>.json``: results, parameters, machine and table."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "params": dict(params or {}),
        "machine": {**machine(), "loadavg_before": list(load_before or [])},
        "results": dict(results),
        "table": asdict(table) if table else None,
    }
    path = RESULTS / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    os.replace(tmp, path)
    if table:
        print(table.markdown())
    print(f"results: {path}")
    return path
