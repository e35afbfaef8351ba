"""Print the README's benchmark tables from ``benchmarks/results/*.json``.

    python benchmarks/tables.py            # every result that has a table
    python benchmarks/tables.py scan       # one of them

Each table is printed with the command that produced it and the machine it ran on, so the README
says what was measured, where, and how to measure it again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from _harness import RESULTS, Table


def render(path: Path) -> str | None:
    doc = json.loads(path.read_text())
    if not doc.get("table"):
        return None
    table = Table(**doc["table"])
    m = doc.get("machine", {})
    note = (
        f"_`python benchmarks/{doc.get('command', '?')}` on {m.get('cpus', '?')} cores, "
        f"load average {_load(m.get('loadavg_before') or m.get('loadavg'))}, "
        f"{doc.get('when', '?')}_"
    )
    return f"{table.markdown()}\n\n{note}\n"


def _load(values: list[float] | None) -> str:
    return "?" if not values else " / ".join(f"{v:.2f}" for v in values)


def main(names: list[str]) -> int:
    paths = sorted(RESULTS.glob("*.json"))
    if names:
        paths = [RESULTS / f"{n}.json" for n in names]
    for p in paths:
        text = render(p)
        if text:
            print(f"<!-- from benchmarks/results/{p.name} -->\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
