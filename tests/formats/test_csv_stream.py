"""A large CSV is streamed in small blocks with the column types of its head: Arrow's streaming
reader reads ~36 blocks ahead, so the block is the memory (16 MiB blocks held ~585 MB for a
700 MB file), while types come from the first block only (a column empty there is ``null``
and fails further down).  Sizes here are scaled down by patching the two constants."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import datacheck
from datacheck.formats import _csv


def _write(path: Path, rows: int, sparse_until: int, long_line: int = 0) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(rows)
    x[[7, rows // 2, rows - 3]] = np.nan
    x[rows // 3] = 1e6  # an fp16 overflow
    with open(path, "w") as fh:
        fh.write("id,x,sparse,text\n")
        for i in range(rows):
            sparse = "" if i < sparse_until else ("inf" if i == rows - 2 else f"{i / 7:.3f}")
            text = "t" * long_line if i == 5 and long_line else f"r{i}"
            fh.write(f"{i},{float(x[i])!r},{sparse},{text}\n")


def _findings(path: Path, out: Path, **kw: object) -> list[tuple]:
    report = datacheck.scan(path, out=out, executor="inprocess", isolate=False, **kw)
    assert report.data["files"][0]["status"] != "corrupt", report.data["files"][0]["error"]
    f = report.findings
    return sorted(zip(f["row"], f["column"], f["check"], f["value"], strict=True))


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_csv, "BLOCK_BYTES", 256 << 10)
    monkeypatch.setattr(_csv, "STREAM_BLOCK", 16 << 10)


def test_a_large_file_streams_in_small_blocks_with_its_head_types(
    tmp_path: Path, small_blocks: None
) -> None:
    """A column empty for the first 2,000 rows (many stream blocks, inside the head) is typed
    from the head, not ``null`` from the first block; every finding is the one-block read's."""
    path = tmp_path / "big.csv"
    _write(path, 20_000, sparse_until=2_000)  # ~0.6 MB: past the patched 256 KiB
    layout = _csv.layout_of(str(path), {}, _csv.dialect_of(str(path), {}))
    assert layout.block == 16 << 10 and layout.types is not None
    assert str(layout.types["sparse"]) == "double"
    got = _findings(path, tmp_path / "stream")
    rows = {(r, c, k) for r, c, k, _ in got}
    assert {(7, "x", "nan"), (10_000, "x", "nan"), (19_997, "x", "nan")} <= rows
    assert (19_998, "sparse", "inf") in rows and (6_666, "x", "extreme") in rows


def test_streamed_findings_equal_a_read_in_one_block(tmp_path: Path, small_blocks: None) -> None:
    path = tmp_path / "big.csv"
    _write(path, 20_000, sparse_until=500)
    streamed = _findings(path, tmp_path / "s")
    code = textwrap.dedent(
        f"""
        import datacheck
        from datacheck.formats import _csv
        _csv.BLOCK_BYTES = 64 << 20  # the whole file in one block: the oracle
        r = datacheck.scan({str(path)!r}, out={str(tmp_path / "o")!r}, executor="inprocess", isolate=False)
        f = r.findings
        rows = zip(f["row"].tolist(), f["column"].tolist(), f["check"].tolist(), f["value"].tolist())
        print(repr(sorted(tuple(map(str, t)) for t in rows)))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    one_block = eval(out.stdout)  # noqa: S307 - our own child's repr of a list of tuples
    assert sorted(tuple(map(str, t)) for t in streamed) == one_block
    assert len(streamed) >= 6


def test_a_long_line_in_the_head_widens_the_block(tmp_path: Path, small_blocks: None) -> None:
    """A 3 KB line: the stream block holds at least 32 of them, so no row straddles two."""
    path = tmp_path / "long.csv"
    _write(path, 20_000, sparse_until=0, long_line=3_000)
    layout = _csv.layout_of(str(path), {}, _csv.dialect_of(str(path), {}))
    assert layout.block >= 32 * 3_000
    assert _findings(path, tmp_path / "o")


def test_a_small_file_is_read_in_one_block_as_before(tmp_path: Path) -> None:
    path = tmp_path / "small.csv"
    _write(path, 300, sparse_until=100)
    layout = _csv.layout_of(str(path), {}, _csv.dialect_of(str(path), {}))
    assert layout == _csv.Layout(_csv.BLOCK_BYTES)
