"""A seeded mutation fuzzer for ``datacheck scan``: damaged files must never stop the scan.

Seeds are small valid files in every format the fuzzer can write itself (Parquet, CSV, Arrow
IPC file and stream, Feather v1, JSON Lines, NumPy ``.npy``/``.npz``, safetensors, torch
``.pt``, HDF5, tar shards of ``.npy`` samples; the tensor ones when their library is
installed).  Each mutant is a seed with one or more of: truncation, bit flips, byte runs set
to 0x00/0xFF, a 4- or 8-byte field set to a huge or negative integer, a chunk duplicated or
deleted; plus generated hostile inputs (JSON nested thousands deep, a 12-byte Feather v1).

Mutants are scanned in batches by the real CLI in a subprocess (``python -m datacheck scan``
with the default isolation, a short ``--unit-timeout`` and a ``--unit-memory-mb`` bound) and
each batch is classified:

- ``ok``: the scan finished (exit 0 or 1) and its report lists every mutant exactly once;
- ``traceback``: exit 3 (a bug in datacheck); ``usage``: exit 2; ``scan_died``: any other exit
  (a signal: a crash that isolation did not contain); ``hang``: the whole scan ran past its
  limit; ``lost``: the report misses a mutant or lists one twice.

Files are counted by status and by how the isolated reader ended (crashed, timed out, over the
memory bound).  A failing batch is rescanned file by file to name the mutant, which is saved
with ``--save DIR``.  The same ``--seed`` gives the same mutants.

    python -m tests.fuzz --minutes 10 --seed 1 [--batch 40] [--save DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.feather as feather
import pyarrow.parquet as pq

SCAN_TIMEOUT_S = 600
"""A whole batch scan past this is a hang (every unit has a far shorter limit)."""
UNIT_TIMEOUT_S = 20
UNIT_MEMORY_MB = 1024
NAN = float("nan")


def _table(rows: int = 64) -> pa.Table:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(rows)
    x[[3, 17]] = [NAN, np.inf]
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "x": pa.array(x),
            "f": pa.array(rng.standard_normal(rows).astype(np.float32)),
            "s": pa.array([f"r{i}" for i in range(rows)]),
            "emb": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(rows * 4).astype(np.float32)), 4
            ),
            "tags": pa.array([[float(i), NAN] if i % 9 == 0 else [1.0] for i in range(rows)]),
        }
    )


def _ipc(table: pa.Table, stream: bool) -> bytes:
    sink = io.BytesIO()
    new = pa.ipc.new_stream if stream else pa.ipc.new_file
    with new(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=16)
    return sink.getvalue()


def _to_bytes(write: Callable[[io.BytesIO], None]) -> bytes:
    buf = io.BytesIO()
    write(buf)
    return buf.getvalue()


def _feather_v1(table: pa.Table) -> bytes:
    """Feather v1 (deprecated for writing, still read: files of that age exist)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return _to_bytes(lambda b: feather.write_feather(table, b, version=1))


def _npy(x: np.ndarray) -> bytes:
    return _to_bytes(lambda b: np.save(b, x))


def _tensor_seeds(x: np.ndarray) -> dict[str, bytes]:
    seeds = {
        "npy": _npy(x),
        "npz": _to_bytes(lambda b: np.savez_compressed(b, x=x, y=x[:, :1])),
    }
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as tf:
        for i, sample in enumerate(x[:8]):
            data = _npy(sample)
            info = tarfile.TarInfo(f"s{i:03d}.x.npy")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    seeds["tar"] = tar.getvalue()
    try:
        from safetensors.numpy import save as st_save

        seeds["safetensors"] = st_save({"x": x})
    except ImportError:
        pass
    try:
        import torch

        seeds["pt"] = _to_bytes(lambda b: torch.save({"x": torch.from_numpy(x)}, b))
    except ImportError:
        pass
    try:
        import h5py

        with tempfile.TemporaryDirectory() as d:
            with h5py.File(f"{d}/s.h5", "w") as h:
                h.create_dataset("x", data=x, chunks=(8, 4), compression="gzip")
            seeds["h5"] = Path(f"{d}/s.h5").read_bytes()
    except ImportError:
        pass
    return seeds


def seeds() -> dict[str, bytes]:
    """Extension -> the bytes of a small valid file with a few planted faults."""
    table = _table()
    jsonl = "".join(
        json.dumps({"id": i, "x": v, "tags": [v, 1.0]}) + "\n"
        for i, v in enumerate(table["x"].to_pylist())
    )
    flat = table.select(["id", "x", "f", "s"])
    x = np.random.default_rng(1).standard_normal((32, 4)).astype(np.float32)
    x[5, 1] = np.nan
    out = {
        "parquet": _to_bytes(lambda b: pq.write_table(table, b, row_group_size=16)),
        "csv": _to_bytes(lambda b: pacsv.write_csv(flat, b)),
        "arrow": _ipc(table, stream=False),
        "arrows": _ipc(table, stream=True),
        "feather": _feather_v1(flat),
        "jsonl": jsonl.encode(),
    }
    out.update(_tensor_seeds(x))
    return out


def _int_field(rng: random.Random, data: bytearray) -> None:
    width = rng.choice([4, 8])
    if len(data) <= width:
        return
    at = rng.randrange(len(data) - width)
    value = rng.choice([2**31 - 1, 2**32 - 1, 2**40, 2**62, -1, -(2**31), 0])
    data[at : at + width] = (value % (1 << (8 * width))).to_bytes(width, "little")


def mutate(seed: bytes, rng: random.Random) -> bytes:
    """One mutant of ``seed``: one to three random edits."""
    data = bytearray(seed)
    for _ in range(rng.randint(1, 3)):
        op = rng.choice(["truncate", "flip", "run", "int", "int", "dup", "cut"])
        if not data:
            break
        if op == "truncate":
            del data[rng.randrange(len(data)) :]
        elif op == "flip":
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(data))
                data[i] ^= 1 << rng.randrange(8)
        elif op == "run":
            i = rng.randrange(len(data))
            n = rng.randint(1, 64)
            data[i : i + n] = bytes([rng.choice([0, 0xFF])]) * len(data[i : i + n])
        elif op == "int":
            _int_field(rng, data)
        elif op == "dup":
            i = rng.randrange(len(data))
            data[i:i] = data[i : i + rng.randint(1, 256)]
        else:
            i = rng.randrange(len(data))
            del data[i : i + rng.randint(1, 256)]
    return bytes(data)


def hostile() -> dict[str, bytes]:
    """Hand-made hostile files, in every batch of the first round."""
    return {
        "deep.jsonl": b'{"a": ' + b"[" * 1000 + b"1" + b"]" * 1000 + b"}\n",
        "deeper.jsonl": b'{"a": ' + b"[" * 10000 + b"1" + b"]" * 10000 + b"}\n",
        "tiny.feather": b"FEA1\0\0\0\0FEA1",
        "wide.jsonl": (json.dumps({f"k{i}": i for i in range(5000)}) + "\n").encode(),
    }


def _scan(folder: Path, out: Path) -> tuple[str, dict[str, Any] | None, str]:
    """Scan ``folder`` with the CLI: (outcome, report or None, stderr tail)."""
    cmd = [
        sys.executable,
        "-m",
        "datacheck",
        "scan",
        str(folder),
        "--out",
        str(out),
        "--no-progress",
        "--format",
        "json",
        "--unit-timeout",
        str(UNIT_TIMEOUT_S),
        "--unit-memory-mb",
        str(UNIT_MEMORY_MB),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=SCAN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return "hang", None, ""
    tail = proc.stderr[-2000:]
    if proc.returncode == 3:
        return "traceback", None, tail
    if proc.returncode == 2:
        return "usage", None, tail
    if proc.returncode not in (0, 1):
        return "scan_died", None, f"exit {proc.returncode}\n{tail}"
    report = json.loads((out / "report.json").read_text())
    return "ok", report, tail


def _file_outcomes(
    report: dict[str, Any], names: list[str], contained: list[str] | None = None
) -> tuple[Counter[str], bool]:
    """Counts by status and by how a reader ended; names of contained failures to ``contained``."""
    counts: Counter[str] = Counter()
    listed = Counter(Path(f["path"]).name for f in report["files"])
    listed.update(Path(p).name for p in report["ignored"])
    complete = all(listed[n] == 1 for n in names)
    for f in report["files"]:
        counts[f["status"]] += 1
        error = f.get("error") or ""
        for kind, start in _CONTAINED.items():
            if error.startswith(start):
                counts[kind] += 1
                if contained is not None:
                    contained.append(f"{Path(f['path']).name}: {error}")
    return counts, complete


_CONTAINED = {
    "reader_crashed": "the reader crashed",
    "reader_timed_out": "the reader timed out",
    "reader_over_memory": "the reader needed more than",
}


class Fuzzer:
    """Runs batches of mutants and keeps the counts."""

    def __init__(self, seed: int, batch: int, save: Path | None) -> None:
        self.rng = random.Random(seed)
        self.seeds = seeds()
        self.batch = batch
        self.save = save
        self.batches: Counter[str] = Counter()
        self.files: Counter[str] = Counter()
        self.failures: list[dict[str, Any]] = []
        self.contained: list[str] = []
        """Mutants whose reader crashed, hung or ran out of memory (contained by isolation)."""
        self.mutants = 0
        self.digest = hashlib.sha256()

    def mutants_for(self, round_no: int) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        exts = sorted(self.seeds)
        for i in range(self.batch):
            ext = exts[i % len(exts)] if round_no == 0 else self.rng.choice(exts)
            data = mutate(self.seeds[ext], self.rng)
            out[f"m{round_no:04d}-{i:03d}.{ext}"] = data
            self.digest.update(data)
        if round_no == 0:
            out.update(hostile())
        return out

    def run_batch(self, round_no: int, work: Path) -> None:
        folder = work / f"b{round_no}"
        folder.mkdir()
        mutants = self.mutants_for(round_no)
        for name, data in mutants.items():
            (folder / name).write_bytes(data)
        self.mutants += len(mutants)
        outcome, report, tail = _scan(folder, work / f"o{round_no}")
        if report is not None:
            counts, complete = _file_outcomes(report, list(mutants), self.contained)
            self.files.update(counts)
            if not complete:
                outcome = "lost"
        self.batches[outcome] += 1
        if outcome != "ok":
            self._blame(folder, work, outcome, tail)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(work / f"o{round_no}", ignore_errors=True)

    def _blame(self, folder: Path, work: Path, outcome: str, tail: str) -> None:
        """Rescan a failing batch file by file and record (and save) the culprits."""
        for path in sorted(folder.iterdir()):
            single = work / "single"
            shutil.rmtree(single, ignore_errors=True)
            single.mkdir()
            shutil.copy(path, single / path.name)
            got, _, why = _scan(single, work / "single-out")
            if got == "ok":
                continue
            self.failures.append({"file": path.name, "outcome": got, "stderr": why[-600:]})
            if self.save is not None:
                self.save.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, self.save / path.name)
        if not self.failures:
            self.failures.append({"file": folder.name, "outcome": outcome, "stderr": tail[-600:]})

    def summary(self, seconds: float) -> dict[str, Any]:
        return {
            "seconds": round(seconds, 1),
            "mutants": self.mutants,
            "mutants_sha256": self.digest.hexdigest()[:16],
            "formats": sorted(self.seeds),
            "batches": dict(self.batches),
            "files": dict(self.files),
            "failures": self.failures[:50],
            "contained": self.contained[:100],
        }


def run(minutes: float, seed: int, batch: int, save: Path | None = None, rounds: int = 0) -> dict:
    """Fuzz for ``minutes`` (or exactly ``rounds`` batches when given); the counts."""
    fuzzer = Fuzzer(seed, batch, save)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dc-fuzz-") as tmp:
        round_no = 0
        while (rounds and round_no < rounds) or (
            not rounds and time.monotonic() - start < minutes * 60
        ):
            fuzzer.run_batch(round_no, Path(tmp))
            round_no += 1
    return fuzzer.summary(time.monotonic() - start)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=40, help="mutants per scan")
    p.add_argument("--save", type=Path, help="copy failing mutants here")
    p.add_argument("--json", type=Path, help="also write the summary here")
    args = p.parse_args(argv)
    result = run(args.minutes, args.seed, args.batch, args.save)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    bad = sum(v for k, v in result["batches"].items() if k != "ok")
    return 1 if bad else 0
