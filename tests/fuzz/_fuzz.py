"""A seeded mutation fuzzer for ``datacheck scan``: damaged files must never stop the scan.

Seeds (:mod:`_seeds`) are small valid files of every format datacheck reads: Parquet, CSV,
Arrow IPC file and stream, Feather v1, JSON Lines, NumPy ``.npy``/``.npz``, safetensors, torch
``.pt``, HDF5, tar shards (``.npy`` samples; images, labels and audio), images (JPEG, PNG,
animated GIF, multi-page TIFF, WebP, BMP), audio (WAV, FLAC, Ogg Vorbis), TFRecord (plain and
gzip), flat token files; and multi-file datasets: a Megatron ``.idx``/``.bin`` pair, MDS index +
shard (plain, zstd, gzip) and a Hugging Face ``save_to_disk`` split, damaged one file at a time
beside intact siblings.  Mutations (:mod:`_mutate`): byte edits (truncation, bit flips, byte
runs, huge or negative integer fields, header/footer fields, a chunk duplicated or deleted) and
structure-aware ones (JSON values, a compressed payload damaged inside its codec, TFRecord and
PNG checksums recomputed after the damage); plus generated hostile inputs (JSON nested
thousands deep, a 12-byte Feather v1, a 5,000-key JSON line).

Mutants are scanned in batches by the real CLI in a subprocess (``python -m datacheck scan``
with the default isolation, a short ``--unit-timeout``, a ``--unit-memory-mb`` bound and a
schema declaring the flat token dtype) and each batch is classified:

- ``ok``: the scan finished (exit 0 or 1) and its report lists every mutant exactly once (a
  dataset folder: each of its files at most once, at least one of them);
- ``traceback``: exit 3 (a bug in datacheck); ``usage``: exit 2; ``scan_died``: any other exit
  (a signal: a crash that isolation did not contain); ``hang``: the whole scan ran past its
  limit; ``lost``: the report misses a mutant or lists one twice.

Files are counted by status and by how the isolated reader ended (crashed, timed out, over the
memory bound).  A failing batch is rescanned mutant by mutant to name the culprit, which is
saved with ``--save DIR``; so is a mutant whose reader ran past the time or memory bound, after
a scan of it alone says whether that reproduces (or was a load spike on a shared machine).  The same ``--seed`` gives the same mutants.

    python -m tests.fuzz --minutes 10 --seed 1 [--batch 40] [--save DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _mutate import mutant, mutate
from _seeds import SCHEMA, datasets, hostile, seeds

__all__ = ["Fuzzer", "datasets", "main", "mutant", "mutate", "run", "seeds"]

SCAN_TIMEOUT_S = 600
"""A whole batch scan past this is a hang (every unit has a far shorter limit)."""
UNIT_TIMEOUT_S = 20
UNIT_MEMORY_MB = 1024


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
        "--schema",
        str(folder.parent / "schema.yaml"),
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


Mutants = dict[str, bytes | dict[str, bytes]]
"""Name -> a file's bytes, or a dataset folder's ``{relative path: bytes}``."""


def _listed(report: dict[str, Any], folder: Path) -> Counter[str]:
    """How often the report lists each path (relative to ``folder``), scanned or ignored."""
    paths = [f["path"] for f in report["files"]] + list(report["ignored"])
    return Counter(Path(p).relative_to(folder).as_posix() for p in paths)


def _complete(listed: Counter[str], mutants: Mutants) -> bool:
    """Every file mutant listed exactly once; every dataset's files at most once, one at least."""
    for name, body in mutants.items():
        if not isinstance(body, dict):
            if listed[name] != 1:
                return False
            continue
        counts = [listed[f"{name}/{rel}"] for rel in body]
        if max(counts) > 1 or not any(counts):
            return False
    return True


def _file_outcomes(
    report: dict[str, Any], folder: Path, mutants: Mutants
) -> tuple[Counter[str], bool, list[tuple[str, str, str]]]:
    """Counts by status and by how a reader ended, whether every mutant is listed, and the
    contained failures: (path relative to ``folder``, kind, error)."""
    counts: Counter[str] = Counter()
    contained = []
    for f in report["files"]:
        counts[f["status"]] += 1
        counts[f"{f.get('format') or '?'}:{f['status']}"] += 1
        error = f.get("error") or ""
        for kind, start in _CONTAINED.items():
            if error.startswith(start):
                counts[kind] += 1
                contained.append((Path(f["path"]).relative_to(folder).as_posix(), kind, error))
    return counts, _complete(_listed(report, folder), mutants), contained


_CONTAINED = {
    "reader_crashed": "the reader crashed",
    "reader_timed_out": "the reader timed out",
    "reader_over_memory": "the reader needed more than",
}


def _by_format(files: Counter[str]) -> dict[str, dict[str, int]]:
    """``{format: {status: files}}`` from the ``format:status`` counts."""
    out: dict[str, dict[str, int]] = {}
    for key, n in sorted(files.items()):
        fmt, sep, status = key.rpartition(":")
        if sep:
            out.setdefault(fmt, {})[status] = n
    return out


def _write(folder: Path, mutants: Mutants) -> None:
    for name, body in mutants.items():
        if isinstance(body, dict):
            for rel, data in body.items():
                (folder / name / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / name / rel).write_bytes(data)
        else:
            (folder / name).write_bytes(body)


class Fuzzer:
    """Runs batches of mutants and keeps the counts."""

    def __init__(self, seed: int, batch: int, save: Path | None) -> None:
        self.rng = random.Random(seed)
        self.seeds = seeds()
        self.datasets = datasets()
        self.kinds = sorted(self.seeds) + sorted(self.datasets)
        self.batch = batch
        self.save = save
        self.batches: Counter[str] = Counter()
        self.files: Counter[str] = Counter()
        self.mutations: Counter[str] = Counter()
        """Mutants by mutation kind (bytes, json, inner, crc)."""
        self.failures: list[dict[str, Any]] = []
        self.contained: list[str] = []
        """Mutants whose reader crashed, hung or ran out of memory (contained by isolation)."""
        self.rechecked: list[dict[str, Any]] = []
        """Mutants past the time or memory bound, and what a scan of each alone said."""
        self.seed_status: dict[str, str] = {}
        """The unmutated seeds' statuses (first round): none may be corrupt."""
        self.mutants = 0
        self.digest = hashlib.sha256()

    def _one(self, kind: str) -> bytes | dict[str, bytes]:
        if kind in self.seeds:
            how, data = mutant(f"x.{kind}", self.seeds[kind], self.rng)
            self.mutations[how] += 1
            self.digest.update(data)
            return data
        files = dict(self.datasets[kind])
        target = self.rng.choice(sorted(files))
        how, files[target] = mutant(target, files[target], self.rng)
        self.mutations[how] += 1
        self.digest.update(target.encode() + files[target])
        return files

    def mutants_for(self, round_no: int) -> Mutants:
        out: Mutants = {}
        for i in range(self.batch):
            kind = self.kinds[i % len(self.kinds)] if round_no == 0 else self.rng.choice(self.kinds)
            out[f"m{round_no:04d}-{i:03d}.{kind}"] = self._one(kind)
        if round_no == 0:
            out.update(hostile())
            out.update({f"seed.{k}": v for k, v in self.seeds.items()})
            out.update({f"seed.{k}": v for k, v in self.datasets.items()})
        return out

    def run_batch(self, round_no: int, work: Path) -> None:
        folder = work / f"b{round_no}"
        folder.mkdir()
        mutants = self.mutants_for(round_no)
        _write(folder, mutants)
        self.mutants += len(mutants)
        outcome, report, tail = _scan(folder, work / f"o{round_no}")
        if report is not None:
            counts, complete, contained = _file_outcomes(report, folder, mutants)
            self.files.update(counts)
            for rel, kind, error in contained:
                self.contained.append(f"{rel}: {error}")
                if kind != "reader_crashed":
                    self._recheck(folder / rel.split("/")[0], rel, kind, work)
            if round_no == 0:
                self._seed_statuses(report, folder)
            if not complete:
                outcome = "lost"
        self.batches[outcome] += 1
        if outcome != "ok":
            self._blame(folder, work, outcome, tail)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(work / f"o{round_no}", ignore_errors=True)

    def _seed_statuses(self, report: dict[str, Any], folder: Path) -> None:
        for f in report["files"]:
            rel = Path(f["path"]).relative_to(folder).as_posix()
            if rel.startswith("seed."):
                self.seed_status[rel] = f["status"]

    def _alone(self, path: Path, work: Path) -> tuple[str, dict[str, Any] | None, str]:
        """Scan the mutant at ``path`` (a file or a dataset folder) by itself."""
        single = work / "single"
        shutil.rmtree(single, ignore_errors=True)
        single.mkdir()
        if path.is_dir():
            shutil.copytree(path, single / path.name)
        else:
            shutil.copy(path, single / path.name)
        got = _scan(single, work / "single-out")
        shutil.rmtree(work / "single-out", ignore_errors=True)
        return got

    def _keep(self, path: Path) -> None:
        if self.save is not None:
            self.save.mkdir(parents=True, exist_ok=True)
            copy = shutil.copytree if path.is_dir() else shutil.copy
            copy(path, self.save / path.name)

    def _recheck(self, path: Path, rel: str, kind: str, work: Path) -> None:
        """A reader that ran past the time or memory bound in a batch, scanned again alone:
        reproduced, or not (a load spike on a shared machine)."""
        _, report, _ = self._alone(path, work)
        single = work / "single"
        again = None
        if report is not None:
            again = next(
                (
                    f.get("error") or f["status"]
                    for f in report["files"]
                    if Path(f["path"]).relative_to(single).as_posix() == rel
                ),
                None,
            )
        reproduced = again is not None and again.startswith(_CONTAINED[kind])
        self.files[f"{kind}_{'reproduced' if reproduced else 'not_reproduced'}_alone"] += 1
        self.rechecked.append({"file": rel, "kind": kind, "alone": again})
        self._keep(path)

    def _blame(self, folder: Path, work: Path, outcome: str, tail: str) -> None:
        """Rescan a failing batch mutant by mutant and record (and save) the culprits."""
        found = False
        for path in sorted(folder.iterdir()):
            got, _, why = self._alone(path, work)
            if got == "ok":
                continue
            found = True
            self.failures.append({"file": path.name, "outcome": got, "stderr": why[-600:]})
            self._keep(path)
        if not found:
            self.failures.append({"file": folder.name, "outcome": outcome, "stderr": tail[-600:]})

    def summary(self, seconds: float) -> dict[str, Any]:
        return {
            "seconds": round(seconds, 1),
            "mutants": self.mutants,
            "mutants_sha256": self.digest.hexdigest()[:16],
            "formats": self.kinds,
            "mutations": dict(self.mutations),
            "batches": dict(self.batches),
            "files": {k: v for k, v in sorted(self.files.items()) if ":" not in k},
            "by_format": _by_format(self.files),
            "seeds_corrupt": sorted(k for k, v in self.seed_status.items() if v == "corrupt"),
            "failures": self.failures[:50],
            "contained": self.contained[:100],
            "rechecked": self.rechecked[:100],
        }


def run(
    minutes: float,
    seed: int,
    batch: int,
    save: Path | None = None,
    rounds: int = 0,
    progress: bool = False,
    partial: Path | None = None,
) -> dict:
    """Fuzz for ``minutes`` (or exactly ``rounds`` batches when given); the counts.
    ``progress``: a line per batch on stderr; ``partial``: the summary so far written there
    after every batch (a run cut short still leaves its counts)."""
    fuzzer = Fuzzer(seed, batch, save)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dc-fuzz-") as tmp:
        (Path(tmp) / "schema.yaml").write_text(SCHEMA)
        round_no = 0
        while (rounds and round_no < rounds) or (
            not rounds and time.monotonic() - start < minutes * 60
        ):
            fuzzer.run_batch(round_no, Path(tmp))
            round_no += 1
            if partial is not None:
                summary = fuzzer.summary(time.monotonic() - start)
                partial.write_text(json.dumps({"partial": True, **summary}, indent=1) + "\n")
            if progress:
                took = time.monotonic() - start
                print(f"{took:7.0f} s  batch {round_no}: {dict(fuzzer.batches)}", file=sys.stderr)
    return fuzzer.summary(time.monotonic() - start)


def _commit() -> str | None:
    """The datacheck checkout's commit (for the record), when it is a git checkout."""
    import datacheck

    root = Path(datacheck.__file__).resolve().parents[1]
    try:
        got = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return None
    return got.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=40, help="mutants per scan")
    p.add_argument("--save", type=Path, help="copy failing mutants here")
    p.add_argument("--json", type=Path, help="also write the summary here")
    args = p.parse_args(argv)
    commit = _commit()
    result = {"commit": commit, "seed": args.seed, "minutes": args.minutes}
    result.update(
        run(args.minutes, args.seed, args.batch, args.save, progress=True, partial=args.json)
    )
    text = json.dumps(result, indent=1)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    bad = sum(v for k, v in result["batches"].items() if k != "ok")
    return 1 if bad or result["seeds_corrupt"] else 0
