"""Token datasets: Megatron indexed datasets (``.idx`` + ``.bin``) and flat token files.

Megatron (``MMIDIDX``): the ``.idx`` holds a 34-byte header (magic, version 1, dtype code,
sequence and document counts) then ``int32`` sequence lengths, ``int64`` byte pointers into the
``.bin`` and ``int64`` document indices.  It is parsed here, every count checked against the
bytes that exist before an array is mapped; pointers that do not follow the lengths, document
indices out of order, or a ``.bin`` whose size is not what the index says -> ``corrupt``.  One
row per sequence: an id outside ``[0, vocab_size)`` -> ``out_of_range`` at the sequence (value:
its first bad id, count: how many), an empty sequence -> ``empty`` (a warning by default); in a
float dataset (``IndexedDatasetBuilder(dtype=np.float32)``) NaN/Inf -> ``nan``/``inf`` at the
sequence.  Written against megatron-core 0.16's ``IndexedDatasetBuilder``; its
``IndexedDataset`` is the oracle in the tests.

Flat files (nanoGPT's ``train.bin``): raw ids without a header, so the schema says the dtype
(``tokens: {dtype: uint16, vocab_size: 50304}``); one row per token (the row is the token
offset).  A ``.bin`` beside an ``.idx`` of the same name is the Megatron pair.

Both are memory-mapped and read a few MiB at a time (pages dropped behind the read, so RSS
stays bounded); when nothing is out of range the cost is one ``max()`` (and ``min()`` for
signed ids) per block: the memory-bandwidth floor.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from datacheck.checks._numpy import Hits
from datacheck.checks._registry import Severity
from datacheck.formats import Format, Opened, WorkUnit, register
from datacheck.formats._tensor_common import MappedFile, SampleChunk, TensorFileError
from datacheck.schema._media import TokenRules, media_rules

__all__ = ["IDX_MAGIC", "MEGATRON_DTYPES", "FlatTokenFormat", "MegatronFormat"]

IDX_MAGIC = b"MMIDIDX\x00\x00"
MEGATRON_DTYPES = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}
"""Megatron-LM's ``DType`` codes (``indexed_dataset.py``)."""
_HEADER = struct.Struct("<9sQBQQ")
BLOCK_TOKENS = 8 << 20
"""Token ids checked per block (16 MiB of uint16)."""
TOKEN_KEY = "tokens"


def _hits(
    rows: np.ndarray, counts: np.ndarray, values: np.ndarray, check: str, sev: Severity
) -> Hits:
    return Hits(check, sev, rows.astype(np.int64), counts.astype(np.int64), values)


def _bad_ids(block: np.ndarray, vocab: int | None) -> np.ndarray | None:
    """Positions in ``block`` of ids outside ``[0, vocab)``; None when there are none (cheap)."""
    if vocab is None or not block.size:
        return None
    signed = block.dtype.kind in "if"
    if block.max() < vocab and (not signed or block.min() >= 0):
        return None
    bad = block >= vocab
    if signed:
        bad |= block < 0
    return np.flatnonzero(bad)


def _non_finite(block: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    """("nan" / "inf", positions) in a block of a float dataset (IndexedDatasetBuilder writes
    float32/float64 too); nothing for ids, and one ``isfinite`` pass when all are finite."""
    if block.dtype.kind != "f" or not block.size or np.isfinite(block).all():
        return
    for check, bad in (("nan", np.isnan(block)), ("inf", np.isinf(block))):
        if (pos := np.flatnonzero(bad)).size:
            yield check, pos


def _by_sequence(pos: np.ndarray, values: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, ...]:
    """Group bad token positions by sequence: (sequences, counts, first bad value of each)."""
    seq = np.searchsorted(starts, pos, side="right") - 1
    rows, first, counts = np.unique(seq, return_index=True, return_counts=True)
    return rows, counts, values[first].astype(np.float64)


class _Index:
    """A parsed, validated ``.idx``: dtype, sequence lengths, token starts, document indices."""

    def __init__(self, path: str) -> None:
        mf = MappedFile(path)
        if mf.size < _HEADER.size:
            raise TensorFileError(f"truncated index: {mf.size} bytes, the header alone is 34")
        magic, version, code, n_seq, n_doc = _HEADER.unpack(mf.bytes(0, _HEADER.size))
        if magic != IDX_MAGIC:
            raise TensorFileError(f"not a Megatron index: magic {magic!r}, expected {IDX_MAGIC!r}")
        if version != 1 or code not in MEGATRON_DTYPES:
            raise TensorFileError(f"unsupported index: version {version}, dtype code {code}")
        need = _HEADER.size + 12 * n_seq + 8 * n_doc
        if not need <= mf.size <= need + n_seq:  # + n_seq: the optional int8 sequence modes
            raise TensorFileError(
                f"index size {mf.size} bytes disagrees with its header ({n_seq} sequences, "
                f"{n_doc} document indices need {need}): truncated or damaged"
            )
        self.dtype = np.dtype(MEGATRON_DTYPES[code])
        off = _HEADER.size
        self.lengths = mf.array(off, np.dtype("<i4"), (n_seq,))
        self.pointers = mf.array(off + 4 * n_seq, np.dtype("<i8"), (n_seq,))
        self.docs = mf.array(off + 12 * n_seq, np.dtype("<i8"), (n_doc,))
        self._validate()

    def _validate(self) -> None:
        lengths = self.lengths.astype(np.int64)
        if len(lengths) and lengths.min() < 0:
            raise TensorFileError(f"sequence {int(np.argmin(lengths))}: negative length")
        self.starts = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.starts[1:])
        expected = self.starts[:-1] * self.dtype.itemsize
        wrong = np.flatnonzero(self.pointers != expected)
        if len(wrong):
            i = int(wrong[0])
            raise TensorFileError(
                f"sequence {i}: pointer {int(self.pointers[i])}, the lengths before it put it "
                f"at {int(expected[i])} ({len(wrong)} sequences disagree)"
            )
        docs = self.docs
        n = len(lengths)
        if len(docs) and (docs[0] != 0 or docs[-1] != n or np.any(np.diff(docs) < 0)):
            raise TensorFileError(
                f"document indices must rise from 0 to the {n} sequences; they run "
                f"{int(docs[0])}..{int(docs[-1])}"
            )

    @property
    def tokens(self) -> int:
        return int(self.starts[-1])


def _token_blocks(
    mf: MappedFile, dtype: np.dtype, count: int, bounds: np.ndarray | None = None
) -> Iterator[tuple[int, np.ndarray]]:
    """``(first token, ids)`` blocks of a mapped token array, pages dropped behind the read.

    With ``bounds`` (sequence starts), blocks end on a sequence boundary, so each sequence's
    findings come from one block (a sequence longer than a block is one block of its own).
    """
    data = mf.array(0, dtype, (count,))
    lo = 0
    while lo < count:
        hi = min(count, lo + BLOCK_TOKENS)
        if bounds is not None and hi < count:
            hi = int(bounds[np.searchsorted(bounds, hi, side="left")])
        yield lo, data[lo:hi]
        mf.release(lo * dtype.itemsize, hi * dtype.itemsize)
        lo = hi


def _megatron_chunks(idx: _Index, mf: MappedFile, rules: TokenRules) -> Iterator[SampleChunk]:
    n_seq = len(idx.lengths)
    if rules.empty is not None and n_seq:
        empty = np.flatnonzero(idx.lengths == 0)
        if len(empty):
            ones = np.ones(len(empty))
            h = _hits(empty, ones, np.zeros(len(empty)), "empty", rules.empty)
            yield SampleChunk(row_offset=0, tensors={}, hits=[(TOKEN_KEY, h)])
    done = 0  # sequences accounted for
    for lo, block in _token_blocks(mf, idx.dtype, idx.tokens, idx.starts):
        hi = lo + len(block)
        upto = int(np.searchsorted(idx.starts, hi, side="right")) - 1  # sequences ended by hi
        upto = n_seq if hi == idx.tokens else min(upto, n_seq)
        chunk = SampleChunk(row_offset=done, tensors={}, samples=upto - done)
        bad = _bad_ids(block, rules.vocab_size)
        if bad is not None:
            rows, counts, values = _by_sequence(bad + lo, block[bad], idx.starts)
            h = _hits(rows - done, counts, values, "out_of_range", Severity.ERROR)
            chunk.hits.append((TOKEN_KEY, h))
        for check, pos in _non_finite(block):
            rows, counts, values = _by_sequence(pos + lo, block[pos], idx.starts)
            chunk.hits.append(
                (TOKEN_KEY, _hits(rows - done, counts, values, check, Severity.ERROR))
            )
        done = upto
        yield chunk
    if done < n_seq:  # trailing empty sequences (or no tokens at all)
        yield SampleChunk(row_offset=done, tensors={}, samples=n_seq - done)


def _bin_path(idx_path: str) -> str:
    return idx_path[: -len(".idx")] + ".bin"


def open_megatron(idx_path: str, rules: TokenRules) -> Opened:
    """A Megatron pair opened from its ``.idx`` path."""
    idx = _Index(idx_path)
    bin_path = _bin_path(idx_path)
    if not os.path.exists(bin_path):
        raise TensorFileError(f"no {os.path.basename(bin_path)} beside the index")
    mf = MappedFile(bin_path)
    need = idx.tokens * idx.dtype.itemsize
    if mf.size != need:
        raise TensorFileError(
            f"{os.path.basename(bin_path)} holds {mf.size} bytes, the index says {need} "
            f"({idx.tokens} {idx.dtype.name} tokens in {len(idx.lengths)} sequences): "
            "truncated, or not this index's data"
        )
    columns = {TOKEN_KEY: idx.dtype.name}
    return Opened(columns, _megatron_chunks(idx, mf, rules), expected_rows=len(idx.lengths))


class MegatronFormat(Format):
    """A Megatron indexed dataset, named by its ``.idx`` (the ``.bin`` beside it is read)."""

    name = "megatron"
    extensions = (".idx",)
    tabular = False

    def sniff(self, head: bytes) -> bool:
        return head.startswith(IDX_MAGIC)

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        return open_megatron(unit.path, media_rules(options).tokens)


def _flat_chunks(mf: MappedFile, dtype: np.dtype, rules: TokenRules) -> Iterator[SampleChunk]:
    for lo, block in _token_blocks(mf, dtype, mf.size // dtype.itemsize):
        chunk = SampleChunk(row_offset=lo, tensors={}, samples=len(block))
        bad = _bad_ids(block, rules.vocab_size)
        if bad is not None:
            ones = np.ones(len(bad))
            h = _hits(bad, ones, block[bad].astype(np.float64), "out_of_range", Severity.ERROR)
            chunk.hits.append((TOKEN_KEY, h))
        yield chunk


class FlatTokenFormat(Format):
    """A headerless ``.bin`` of token ids (nanoGPT); its dtype comes from the schema."""

    name = "tokens"
    extensions = (".bin",)
    tabular = False

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        rules = media_rules(options).tokens
        idx_path = unit.path[: -len(".bin")] + ".idx"
        if unit.path.endswith(".bin") and os.path.exists(idx_path):
            return open_megatron(idx_path, rules)
        if rules.dtype is None:
            raise TensorFileError(
                "a flat token file has no header to say its dtype; declare it in the schema, "
                "e.g. tokens: {dtype: uint16, vocab_size: 50257}"
            )
        dtype = np.dtype(rules.dtype).newbyteorder("<")
        mf = MappedFile(unit.path)
        if mf.size % dtype.itemsize:
            raise TensorFileError(
                f"{mf.size} bytes is not a whole number of {dtype.name} ids: truncated, or "
                "another dtype than the schema's"
            )
        n = mf.size // dtype.itemsize
        return Opened({TOKEN_KEY: dtype.name}, _flat_chunks(mf, dtype, rules), expected_rows=n)


register(MegatronFormat())
register(FlatTokenFormat())
