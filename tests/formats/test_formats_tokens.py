"""Token datasets: Megatron .idx/.bin pairs and flat token files, faults at the right row."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

import datacheck
from datacheck.formats import _tokens


def write_megatron(
    prefix: Path, docs: list[list[int]], dtype: type = np.uint16, code: int = 8
) -> tuple[Path, Path]:
    """A Megatron-LM indexed dataset (one sequence per document), as its builder writes it."""
    ids = [np.asarray(d, dtype=dtype) for d in docs]
    lengths = np.array([len(d) for d in ids], dtype=np.int32)
    pointers = np.zeros(len(ids), dtype=np.int64)
    np.cumsum(lengths[:-1].astype(np.int64) * np.dtype(dtype).itemsize, out=pointers[1:])
    doc_idx = np.arange(len(ids) + 1, dtype=np.int64)
    idx = prefix.with_suffix(".idx")
    header = struct.pack("<9sQBQQ", b"MMIDIDX\x00\x00", 1, code, len(ids), len(doc_idx))
    idx.write_bytes(header + lengths.tobytes() + pointers.tobytes() + doc_idx.tobytes())
    bin_ = prefix.with_suffix(".bin")
    bin_.write_bytes(b"".join(d.tobytes() for d in ids))
    return idx, bin_


def docs(n: int = 50) -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [list(rng.integers(0, 1000, int(rng.integers(8, 40)))) for _ in range(n)]


def schema(tmp_path: Path, body: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(body)
    return str(path)


def scan(path: Path, **kw: object) -> datacheck.Report:
    return datacheck.scan(str(path), executor="inprocess", workers=1, **kw)


def sites(report: datacheck.Report) -> set[tuple[int, str, str]]:
    f = report.findings
    f = f[f["row"].notna()]
    return {(int(r.row), r.column, r.check) for r in f.itertuples()}


@pytest.mark.parametrize("block", [_tokens.BLOCK_TOKENS, 7])
def test_megatron_out_of_vocab_and_empty(block: int, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(_tokens, "BLOCK_TOKENS", block)  # 7: sequences span blocks
    d = docs()
    d[3][2] = 1000  # == vocab: out of range
    d[3][5] = 5000
    d[40][-1] = 65535
    d[17] = []
    d[49] = []
    (tmp_path / "data").mkdir()
    write_megatron(tmp_path / "data" / "corpus_text_document", d)
    report = scan(  # isolate=False: the monkeypatched block size holds in this process only
        tmp_path / "data", schema=schema(tmp_path, "tokens:\n  vocab_size: 1000\n"), isolate=False
    )
    (entry,) = report.data["files"]
    assert entry["path"].endswith(".idx") and entry["format"] == "megatron"
    assert entry["rows"] == 50 and entry["columns"] == {"tokens": "uint16"}
    assert sites(report) == {
        (3, "tokens", "out_of_range"),
        (40, "tokens", "out_of_range"),
        (17, "tokens", "empty"),
        (49, "tokens", "empty"),
    }
    f = report.findings.set_index("row")
    assert f.loc[3, "count"] == 2 and f.loc[3, "value"] == "1000"
    assert f.loc[17, "severity"] == "warning"
    assert entry["counts"] == {"out_of_range": 3, "empty": 2}


def test_megatron_without_schema_checks_structure_only(tmp_path: Path) -> None:
    idx, _ = write_megatron(tmp_path / "c", docs())
    entry = scan(idx).data["files"][0]
    assert entry["status"] == "ok" and entry["rows"] == 50


def test_megatron_bin_named_alone_reads_the_pair(tmp_path: Path) -> None:
    d = docs()
    d[9][0] = 70000 % 65536 + 2000
    _, bin_ = write_megatron(tmp_path / "c", d)
    report = scan(bin_, schema=schema(tmp_path, "tokens:\n  vocab_size: 1000\n"))
    assert sites(report) == {(9, "tokens", "out_of_range")}


@pytest.mark.parametrize(
    "damage, message",
    [
        ("bin_short", "index says"),
        ("bin_long", "index says"),
        ("idx_short", "disagrees with its header"),
        ("pointer", "pointer"),
        ("magic", "not a Megatron index"),
        ("huge_count", "disagrees with its header"),
    ],
)
def test_megatron_mismatched_sizes_are_corrupt(damage: str, message: str, tmp_path: Path) -> None:
    idx, bin_ = write_megatron(tmp_path / "c", docs())
    raw, data = bytearray(idx.read_bytes()), bin_.read_bytes()
    if damage == "bin_short":
        bin_.write_bytes(data[:-2])
    elif damage == "bin_long":
        bin_.write_bytes(data + b"\0\0")
    elif damage == "idx_short":
        idx.write_bytes(raw[:-8])
    elif damage == "pointer":
        at = 34 + 4 * 50 + 8 * 7
        raw[at : at + 8] = struct.pack("<q", 3)
        idx.write_bytes(raw)
    elif damage == "magic":
        idx.write_bytes(b"XX" + raw[2:])
    elif damage == "huge_count":
        raw[18:26] = struct.pack("<Q", 2**62)  # a lying sequence count: nothing allocated
        idx.write_bytes(raw)
    entry = scan(tmp_path).data["files"][0]
    assert entry["status"] == "corrupt" and message in entry["error"], entry["error"]


def test_flat_uint16_out_of_vocab(tmp_path: Path) -> None:
    ids = np.random.default_rng(1).integers(0, 50257, 100_000).astype(np.uint16)
    ids[12_345] = 50257
    ids[99_999] = 60000
    (tmp_path / "train.bin").write_bytes(ids.tobytes())
    s = schema(tmp_path, "tokens:\n  vocab_size: 50257\n  dtype: uint16\n")
    report = scan(tmp_path / "train.bin", schema=s)
    entry = report.data["files"][0]
    assert entry["format"] == "tokens" and entry["rows"] == 100_000
    assert sites(report) == {(12_345, "tokens", "out_of_range"), (99_999, "tokens", "out_of_range")}


def test_flat_token_file_needs_a_dtype(tmp_path: Path) -> None:
    (tmp_path / "train.bin").write_bytes(b"\0" * 10)
    entry = scan(tmp_path / "train.bin").data["files"][0]
    assert entry["status"] == "corrupt" and "tokens: {dtype: uint16" in entry["error"]
    s = schema(tmp_path, "tokens:\n  dtype: uint32\n")
    entry = scan(tmp_path / "train.bin", schema=s).data["files"][0]
    assert entry["status"] == "corrupt" and "whole number of uint32" in entry["error"]


def test_tokens_schema_mistakes(tmp_path: Path) -> None:
    with pytest.raises(datacheck.SchemaError, match="did you mean 'vocab_size'"):
        datacheck.load_schema(schema(tmp_path, "tokens:\n  vocab: 5\n"))
    with pytest.raises(datacheck.SchemaError, match="positive integer"):
        datacheck.load_schema(schema(tmp_path, "tokens:\n  vocab_size: -1\n"))
