"""Which format reads a file: by its name's longest known suffix, else by its first bytes."""

from __future__ import annotations

import pytest

from datacheck.formats import _EXTENSIONS, _ODD, _REGISTRY, Format, detect, register


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a/x.jpg", "image"),
        ("a/B.PARQUET", "parquet"),
        ("s/shard.00000.mds.zstd", "mds"),  # longer than no suffix at all, beside .mds
        ("x.csv.gz", "csv"),  # the compression suffix is not the format
        ("y.tar.gz", "tar"),
        ("q.tgz", "tar"),
        ("a.b.npy", "npy"),
        ("dir.parquet/notes.txt", None),  # a folder's name never tells
        ("noext", None),
    ],
)
def test_the_longest_known_suffix_tells(name: str, expected: str | None) -> None:
    fmt = detect(name, b"")
    assert (fmt.name if fmt else None) == expected


def test_magic_bytes_tell_when_the_name_does_not() -> None:
    fmt = detect("data/blob", b"PAR1\x00\x00")
    assert fmt is not None and fmt.name == "parquet"


def test_a_plugin_extension_without_a_dot_beats_a_shorter_one() -> None:
    class Train(Format):
        name = "test-train-bin"
        extensions = ("train.bin",)

    register(Train())
    try:
        assert detect("x/train.bin", b"").name == "test-train-bin"  # type: ignore[union-attr]
        assert detect("x/other.bin", b"").name == "tokens"  # type: ignore[union-attr]
    finally:
        del _REGISTRY["test-train-bin"]
        _EXTENSIONS.clear()  # rebuilt from the registry on the next call
        _ODD.clear()
