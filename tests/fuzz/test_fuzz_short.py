"""A short deterministic fuzz run: every mutant (and every hand-made hostile file) ends in the
report exactly once, and no scan ends with a traceback, a crash or a hang."""

from __future__ import annotations

from _fuzz import Fuzzer, mutate, run, seeds


def test_the_same_seed_gives_the_same_mutants() -> None:
    a, b = Fuzzer(7, 12, None), Fuzzer(7, 12, None)
    assert a.mutants_for(1) == b.mutants_for(1)
    assert Fuzzer(8, 12, None).mutants_for(1) != a.mutants_for(2)


def test_every_seed_is_a_valid_file_that_mutates() -> None:
    import random

    for ext, data in seeds().items():
        assert data and mutate(data, random.Random(ext)) != data, ext


def test_a_short_fuzz_run_finishes_every_scan() -> None:
    result = run(minutes=0, seed=0, batch=2 * len(seeds()), rounds=1)
    assert result["batches"] == {"ok": 1}, result["failures"]
    files = result["files"]
    assert files.get("corrupt", 0) > 0 and files.get("reader_crashed", 0) >= 1  # tiny.feather
