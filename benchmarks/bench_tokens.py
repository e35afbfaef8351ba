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
    ids = np.memmap(args[0] + ".bin", dtype=np.uint16, mode="r")
    return {"max": int(ids.max())}


def scan(args: list[str]) -> dict:
    import datacheck

    prefix, schema = args[0], args[1]
    out = tempfile.mkdtemp()
    try:
        report = datacheck.scan(
            prefix + ".idx", schema, out=out, executor="inprocess", workers=1, isolate=False
        )
        rows = sorted(int(r) for r in report.findings["row"].dropna())
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"rows": rows}


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
        fl = best["floor"]["seconds"]
        table = Table(
            ["variant", "seconds", "GB/s", "× floor", "peak RSS MB"],
            [
                [name, r["seconds"], gb / r["seconds"], r["seconds"] / fl, r["rss_mb"]]
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
