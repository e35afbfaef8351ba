"""A short deterministic fuzz run: every mutant (and every hand-made hostile file) ends in the
report exactly once, and no scan ends with a traceback, a crash or a hang."""

from __future__ import annotations

import json
import random

from _fuzz import Fuzzer, datasets, mutant, run, seeds
from _mutate import fix_png, fix_tfrecord, mutate_json


def test_the_same_seed_gives_the_same_mutants() -> None:
    a, b = Fuzzer(7, 12, None), Fuzzer(7, 12, None)
    assert a.mutants_for(1) == b.mutants_for(1)
    assert Fuzzer(8, 12, None).mutants_for(1) != a.mutants_for(2)


def test_every_seed_file_mutates() -> None:
    for ext, data in seeds().items():
        assert data and mutant(f"x.{ext}", data, random.Random(ext))[1] != data, ext
    for name, files in datasets().items():
        assert len(files) >= 2, name
        for rel, data in files.items():
            assert mutant(rel, data, random.Random(rel))[1] != data, (name, rel)


def test_structure_aware_mutations_keep_the_structure() -> None:
    doc = {"shards": [{"samples": 6, "column_names": ["a", "b"]}], "version": 2}
    raw = json.dumps(doc).encode()
    for i in range(20):
        got = mutate_json(raw, random.Random(i))
        assert got is not None and got != raw and isinstance(json.loads(got), dict)
    for ext, fix in (("tfrecord", fix_tfrecord), ("png", fix_png)):
        good = seeds()[ext]
        assert fix(good) == good, ext  # the seed's checksums are already right


def test_a_short_fuzz_run_finishes_every_scan() -> None:
    kinds = len(seeds()) + len(datasets())
    result = run(minutes=0, seed=0, batch=kinds, rounds=1)  # one mutant of every format
    assert result["batches"] == {"ok": 1}, result["failures"]
    assert result["seeds_corrupt"] == []
    assert result["files"].get("corrupt", 0) > 0  # the hostile files and bombs among them


def test_json_edits_never_share_a_hostile_value() -> None:
    """Hostile values are copied into each document: an edit inside one inserted earlier used
    to change the shared constant, until a later mutant held itself (json.dumps: circular)."""
    from _mutate import HOSTILE_JSON

    before = json.dumps(HOSTILE_JSON)
    raw = json.dumps({"a": {"b": [1, {"c": 2}]}, "d": [3, [4]]}).encode()
    rng = random.Random(1)
    for _ in range(3000):
        assert mutate_json(raw, rng) is not None
    assert json.dumps(HOSTILE_JSON) == before
