"""Token benchmark: ``datacheck scan`` of a Megatron ``.idx``/``.bin`` against a NumPy ``max()``.

Writes ``--tokens`` (default 200 M) uint16 ids in documents of 1-2,000 tokens as a Megatron
indexed dataset (``.bin`` + ``.idx``, ~400 MB), one id planted at ``vocab_size``, then, in ONE
run, times each variant in a fresh subprocess (the shared harness), interleaved, fastest of
``--rounds`` (warm page cache):

1. floor: ``np.memmap(bin, uint16).max()``: one pass over the ids, the least any vocabulary
   check can do;
2. scan:  ``datacheck.scan(idx, schema)`` with ``tokens: {vocab_size: 50257}``, one worker,
   in-process: the index parsed and validated, every id checked, report and manifest written;
   the planted id must be found at its sequence.

Times are taken inside the child around the work itself: the scan child first scans a tiny pair
so that its one-off imports (pandera to read the schema file, pandas for the findings) are not
counted against a pass over the data.

Peak RSS is the child's own VmHWM (the scan drops pages behind its read; the floor's mapped
pages stay resident).  Results: ``results/tokens.json``.

    python benchmarks/bench_tokens.py                   # 200 M tokens
    python benchmarks/bench_tokens.py --tokens 2000000  # smoke run
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import tempfile
import time
from pathlib import Path

import numpy as np
from _harness import Table, child_main, interleaved, write_results

VOCAB = 50257


def write_pair(prefix: Path, tokens: int) -> int:
    """Write the pair (streamed); return the sequence holding the planted id."""
    rng = np.random.default_rng(0)
    lengths = []
    total = 0
    while total < tokens:
        n = int(min(rng.integers(1, 2001), tokens - total))
        lengths.append(n)
        total += n
    lengths_arr = np.asarray(lengths, dtype=np.int32)
    starts = np.concatenate([[0], np.cumsum(lengths_arr, dtype=np.int64)])
    planted_token = tokens * 3 // 4
    planted_seq = int(np.searchsorted(starts, planted_token, side="right") - 1)
    block = 1 << 24
    with open(prefix.with_suffix(".bin"), "wb") as fh:
        for lo in range(0, tokens, block):
            ids = rng.integers(0, VOCAB, min(block, tokens - lo), dtype=np.uint16)
            if lo <= planted_token < lo + len(ids):
                ids[planted_token - lo] = VOCAB
            fh.write(ids.tobytes())
    n = len(lengths_arr)
    header = struct.pack("<9sQBQQ", b"MMIDIDX\x00\x00", 1, 8, n, n + 1)
    with open(prefix.with_suffix(".idx"), "wb") as fh:
        fh.write(header + lengths_arr.tobytes() + (starts[:-1] * 2).tobytes())
        fh.write(np.arange(n + 1, dtype=np.int64).tobytes())
    return planted_seq


def floor(args: list[str]) -> dict:
    start = time.perf_counter()
    ids = np.memmap(args[0] + ".bin", dtype=np.uint16, mode="r")
    top = int(ids.max())
    return {"max": top, "timed": time.perf_counter() - start}


def _scan(idx: str, schema: str, out: str) -> object:
    import datacheck

    return datacheck.scan(idx, schema, out=out, executor="inprocess", workers=1, isolate=False)


def scan(args: list[str]) -> dict:
    prefix, schema = args[0], args[1]
    out = tempfile.mkdtemp()
    try:
        # Warm-up on a tiny pair: imports (pandera for the schema file, pandas for the
        # findings) are paid once per process, not per dataset; the timed scan is the second.
        tiny = Path(out) / "tiny"
        write_pair(tiny, 1000)
        _ = _scan(str(tiny) + ".idx", schema, str(Path(out) / "warm")).findings  # type: ignore[attr-defined]
        start = time.perf_counter()
        report = _scan(prefix + ".idx", schema, str(Path(out) / "o"))
        timed = time.perf_counter() - start
        rows = sorted(int(r) for r in report.findings["row"].dropna())  # type: ignore[attr-defined]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"rows": rows, "timed": timed}


VARIANTS = {"floor": floor, "scan": scan}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=200_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-tokens-"))
    try:
        prefix = tmp / "corpus_text_document"
        planted = write_pair(prefix, opts.tokens)
        schema = tmp / "schema.yaml"
        schema.write_text(f"tokens:\n  vocab_size: {VOCAB}\n")
        load = list(os.getloadavg())
        best = interleaved(__file__, list(VARIANTS), [str(prefix), str(schema)], opts.rounds)
        assert best["scan"]["rows"] == [planted], best["scan"]["rows"]
        assert best["floor"]["max"] == VOCAB
        gb = opts.tokens * 2 / 1e9
        fl = best["floor"]["timed"]
        table = Table(
            ["variant", "seconds", "GB/s", "× floor", "peak RSS MB"],
            [
                [name, r["timed"], gb / r["timed"], r["timed"] / fl, r["rss_mb"]]
                for name, r in (
                    ("floor: np.memmap(.bin).max()", best["floor"]),
                    ("datacheck scan (vocab check, 1 worker)", best["scan"]),
                )
            ],
            title=f"{opts.tokens:,} uint16 tokens ({gb:.2f} GB), Megatron .idx/.bin",
        )
        params = {"tokens": opts.tokens, "gb": round(gb, 3), "vocab_size": VOCAB}
        write_results("tokens", best, table=table, params=params, load_before=load)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if not child_main(VARIANTS):
        main()
