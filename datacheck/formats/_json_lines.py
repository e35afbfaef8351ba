"""JSON Lines: parsed a line-aligned block at a time, so that a line that does not parse is a
row-level finding at its row and the rest of the file is read and checked.

Arrow's JSON reader stops a whole file at the first bad line ("JSON parse error: Missing a
comma ... in row 2"); here each block (:data:`BLOCK_BYTES`, cut at a newline) is parsed alone,
and when it fails at a row the reader names, that line is left out, kept as a ``corrupt``
finding at its row (its line number, what the parser said, a short escaped excerpt) and the
block parsed again.  Rows are the file's non-empty lines (one JSON object per line).  A failure
the reader names no row for, more than :data:`MAX_BAD_LINES` bad lines in one block, or bad
lines for most of the rows (a JSON document, not JSON Lines) make the file ``corrupt`` whole.  Types are inferred from the first block and held for the others
(new fields are inferred where they appear), as Arrow's streaming reader does.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson

from datacheck.formats import Chunk, Opened, WorkUnit, _storage, memory_budget, mib, register
from datacheck.formats._csv import MOSTLY_BAD, Bad, excerpt, place
from datacheck.formats._tabular import _open_text, _TextFormat

__all__ = ["MAX_BAD_LINES", "MAX_JSON_DEPTH", "JsonLinesFormat", "check_nesting"]

BLOCK_BYTES = 16 << 20
MAX_BAD_LINES = 100
"""Bad lines one block may hold before the file is corrupt whole (each costs a re-parse)."""
_ROW = re.compile(r"^(.*?)\s*in row (\d+)$", re.DOTALL)


class _Blocks:
    """A JSON Lines file as parsed blocks: ``schema`` (the first block's), iteration over the
    blocks' record batches, ``close``; bad lines go to ``pending`` as (row, message)."""

    def __init__(self, path: str, options: Mapping[str, Any], types: dict[str, pa.DataType]):
        self.stream = _storage.stream(path)
        self.block = int(options.get("block_bytes", BLOCK_BYTES))
        self.budget = memory_budget(options)
        self.pending: deque[Bad] = deque()
        self.bad = 0
        self.row = 0  # rows (non-empty lines) before the next block
        self.line = 0  # physical lines before the next block
        self.carry = b""
        self.explicit = pa.schema(list(types.items())) if types else None
        self.first = self._next()
        self.schema = self.first.schema if self.first is not None else pa.schema([])

    def _read_block(self) -> bytes | None:
        """The next run of whole lines (the last line of the file may lack its newline)."""
        while True:
            data = self.stream.read(self.block)
            buf = self.carry + data
            if not data:
                self.carry = b""
                return buf or None
            cut = buf.rfind(b"\n") + 1
            if cut:
                self.carry = buf[cut:]
                return buf[:cut]
            if len(buf) > self.budget:
                raise ValueError(f"a line longer than {mib(self.budget)}: not JSON Lines?")
            self.carry = buf  # a line longer than a block: read on

    def _next(self) -> pa.Table | None:
        block = self._read_block()
        if block is None:
            return None
        table = self._parse(block)
        self.explicit = table.schema  # later blocks keep the first block's types
        return table

    def _parse(self, block: bytes) -> pa.Table:
        lines: list[bytes] | None = None
        kept: list[int] = []  # indices (in ``lines``) of the non-empty lines still in ``data``
        data, removed = block, 0
        while True:
            try:
                table = self._read(data)
                break
            except pa.ArrowInvalid as exc:
                m = _ROW.match(str(exc))
                if m is None or removed >= MAX_BAD_LINES:
                    raise
                if lines is None:
                    lines = block.split(b"\n")
                    kept = [i for i, ln in enumerate(lines) if ln.strip()]
                at = int(m.group(2))
                if at >= len(kept):
                    raise
                self._bad(lines, kept, at, m.group(1))
                del kept[at]
                removed += 1
                data = b"\n".join(lines[i] for i in kept) + b"\n"
        self.row += table.num_rows + removed
        self.bad += removed
        self.line += block.count(b"\n")
        return table

    def _bad(self, lines: list[bytes], kept: list[int], at: int, reason: str) -> None:
        """Keep line ``kept[at]`` of the block as a finding at its row in the file."""
        i = kept[at]
        before = sum(1 for ln in lines[:i] if ln.strip())  # rows of the block before it
        text = lines[i].decode("utf-8", "replace").rstrip("\r")
        reason = reason.removeprefix("JSON parse error: ").rstrip(". ")
        message = f"line {self.line + i + 1}: {reason}: {excerpt(text)}"
        row = self.row + before
        at_row = next((k for k, (r, _) in enumerate(self.pending) if r > row), None)
        if at_row is None:
            self.pending.append((row, message))
        else:
            self.pending.insert(at_row, (row, message))

    def _read(self, data: bytes) -> pa.Table:
        parse = pajson.ParseOptions(
            explicit_schema=self.explicit, unexpected_field_behavior="infer"
        )
        read = pajson.ReadOptions(block_size=max(len(data), 1) + 1)
        return pajson.read_json(pa.BufferReader(data), read_options=read, parse_options=parse)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        table = self.first
        while table is not None:
            yield from table.to_batches()
            del table
            table = self._next()

    def close(self) -> None:
        self.stream.close()

    def check_total(self, rows: int) -> None:
        """Raise when most lines did not parse: not JSON Lines (a JSON document, say)."""
        if self.bad and self.bad >= MOSTLY_BAD * rows:
            raise ValueError(
                f"{self.bad:,} of {rows:,} lines do not parse as JSON objects: not JSON Lines "
                "(one object per line)? A JSON document such as an array is not read"
            )


class _JsonLinesWriter:
    """One JSON object per line (Python's json: NaN/Infinity as the reader accepts them)."""

    def __init__(self, stream: pa.NativeFile) -> None:
        self.stream = stream

    def write_table(self, table: pa.Table) -> None:
        for rec in table.to_pylist():
            self.stream.write((json.dumps(rec, default=str) + "\n").encode())

    def close(self) -> None:
        pass


class JsonLinesFormat(_TextFormat):
    name = "jsonl"
    extensions = (".jsonl", ".ndjson", ".json")

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        with _storage.stream(unit.path) as head:
            check_nesting(head.read(options.get("block_bytes", BLOCK_BYTES)))
        declared = dict(options.get("arrow_types") or {})
        keep = bool(options.get("keep_integers"))
        readers: list[_Blocks] = []

        def make(types: dict[str, pa.DataType]) -> _Blocks:
            readers[:] = [_Blocks(unit.path, options, types)]
            return readers[0]

        def chunker(batches: Iterator[pa.RecordBatch]) -> Iterator[Chunk]:
            return place(batches, readers[0].pending, unit.path, readers[0].check_total)

        return _open_text(make, declared, keep, check_utf8=True, chunker=chunker)

    def _writer(self, path: str, stream: pa.NativeFile, schema: pa.Schema) -> Any:
        return _JsonLinesWriter(stream)


MAX_JSON_DEPTH = 64
"""JSON nested deeper than this is refused before parsing: Arrow's JSON reader takes time
quadratic in the depth (10,000 levels: minutes), and no dataset nests numbers that deep."""


def check_nesting(block: bytes) -> None:
    """Raise if brackets outside strings nest deeper than :data:`MAX_JSON_DEPTH` in ``block``
    (the block Arrow infers the types from), vectorised: no Python loop per byte."""
    b = np.frombuffer(block, dtype=np.uint8)
    if not len(b):
        return
    quote = b == ord('"')
    quote[1:] &= b[:-1] != ord("\\")  # an escaped quote does not end a string
    outside = (np.cumsum(quote) % 2 == 0) & ~quote
    step = np.zeros(len(b), dtype=np.int32)
    step[outside & ((b == ord("[")) | (b == ord("{")))] = 1
    step[outside & ((b == ord("]")) | (b == ord("}")))] = -1
    depth = np.cumsum(step)
    if depth.max() > MAX_JSON_DEPTH:
        at = int(np.argmax(depth > MAX_JSON_DEPTH))
        raise ValueError(
            f"JSON nested deeper than {MAX_JSON_DEPTH} levels (at byte {at}): not read"
        )


register(JsonLinesFormat())
