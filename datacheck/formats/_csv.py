"""CSV / TSV: the dialect sniffed from the file's head, and a line that does not parse as a
row-level finding at its row (the rest of the file is read and checked).

* **Delimiter**: comma, tab, semicolon or pipe, whichever splits the head's lines into the
  same number of fields (the name's, ``.tsv`` -> tab, else comma, wins a tie).  The one used
  goes into the report (``dialect``).  A one-column file whose header holds one of them is
  never read as one text column: it is ``corrupt``, saying which delimiters were tried.
* **Decimal comma**: with a delimiter other than the comma, text fields that are all
  ``1,5``-shaped numbers in the head make the file read with ``,`` as the decimal mark (and
  the report says so).  A comma-separated file whose rows are ragged by decimal commas says so
  in its findings.
* **Bad lines**: a record with the wrong number of fields is skipped by the reader and reported
  as ``corrupt`` at its row, with its line number (as the parser counts lines: the header is
  line 1; empty lines are not counted, a quoted value spanning lines counts once), its field
  count, the expected count and delimiter, and a short escaped excerpt.  When most records do not parse the file
  is ``corrupt`` whole: the dialect is wrong, not a line.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from datacheck import findings as fnd
from datacheck._escape import printable
from datacheck.checks._registry import Severity
from datacheck.formats import Chunk, Opened, WorkUnit, _storage, is_tsv, register
from datacheck.formats._tabular import _open_text, _TextFormat

__all__ = [
    "CSV_NULLS",
    "Bad",
    "BadLines",
    "CsvFormat",
    "Dialect",
    "dialect_of",
    "excerpt",
    "place",
    "sniff",
]

DELIMITERS = (",", "\t", ";", "|")
"""The delimiters sniffed, in the order a tie is broken after the name's own."""
DELIMITER_NAMES = {",": "comma", "\t": "tab", ";": "semicolon", "|": "pipe"}
SNIFF_BYTES = 64 << 10
"""Bytes of the (decompressed) head the dialect is sniffed from."""
SNIFF_LINES = 200
BLOCK_BYTES = 16 << 20
"""Arrow's block for a file that fits in one (its types come from the whole file), and the
head whose rows give a larger file's types: Arrow infers them from the first block only (a
column empty there is typed ``null`` and fails further down)."""
STREAM_BLOCK = 1 << 20
"""The block a larger file is then streamed in, with its types given (at least 32 of the
head's longest lines): Arrow's streaming reader reads ~36 blocks ahead, so 16 MiB blocks
held ~585 MB for a 700 MB file, 1 MiB blocks ~37 MB."""
EXCERPT = 24
"""Characters of a bad line quoted in its finding (escaped; a CSV row could be a secret), as
many as a reader error may quote (``engine._unit``)."""
MOSTLY_BAD = 0.5
"""When at least this fraction of the records do not parse, the file is corrupt whole."""
# NaN is not null: the CSV spellings of NaN must parse as float NaN, so they are not listed.
CSV_NULLS = ["", "NULL", "null", "NA", "N/A", "None", "none", "#N/A"]
PANDAS_NULLS = ["", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "1.#IND", "1.#QNAN", "<NA>"]
PANDAS_NULLS += ["N/A", "NA", "NULL", "None", "n/a", "null"]
"""pandas' ``read_csv`` nulls (quoted or not), but its NaN spellings (``nan``, ``NaN``, ...):
read with a schema (option ``pandas_nulls``), a CSV means what pandera sees, and a NaN in a
number column stays NaN."""
_QUOTED = re.compile(rb'"(?:[^"]|"")*"')
_DECIMAL_COMMA = re.compile(rb"^\s*[-+]?\d+,\d+\s*$")


@dataclass(frozen=True)
class Dialect:
    """How a CSV file is read: what the report's ``dialect`` records."""

    delimiter: str
    decimal: str = "."
    decimal_columns: tuple[str, ...] = ()
    """Columns holding ``1,5``-shaped numbers in the head: read as numbers even where a
    schema has the scan read the column as text (to parse it cell by cell)."""
    sniffed: bool = False
    """The delimiter is not the one the file's name implies (``.tsv``: tab, else comma)."""

    def describe(self) -> dict[str, str]:
        out = {"delimiter": DELIMITER_NAMES[self.delimiter]}
        if self.decimal != ".":
            out["decimal"] = "comma"
        return out


def _head_lines(head: bytes, complete: bool) -> list[bytes]:
    """The head's lines (the last dropped when the head was cut), quoted text removed; a line
    with an odd number of quotes (a value spanning lines) is left out."""
    lines = head.replace(b"\r\n", b"\n").split(b"\n")
    if not complete:
        lines = lines[:-1]
    out = []
    for line in lines[:SNIFF_LINES]:
        if not line.strip():
            continue
        if b'"' in line:
            line = _QUOTED.sub(b"", line)
            if b'"' in line:
                continue
        out.append(line)
    return out


def _consistent(lines: list[bytes], d: bytes) -> int:
    """The number of ``d`` every line holds (the header's), or 0 when the lines disagree."""
    n = lines[0].count(d)
    if not n:
        return 0
    agree = sum(1 for ln in lines if ln.count(d) == n)
    return n if agree == len(lines) or (len(lines) >= 10 and agree >= 0.9 * len(lines)) else 0


def sniff(head: bytes, default: str, complete: bool = False) -> Dialect:
    """The dialect of a CSV file from its first bytes; ``default``: the name's delimiter.

    ``complete``: ``head`` is the whole file (its last line is not cut).
    """
    lines = _head_lines(head, complete)
    if not lines:
        return Dialect(default)
    counts = {d: _consistent(lines, d.encode()) for d in DELIMITERS}
    if counts[default]:
        delimiter = default
    else:
        found = [d for d in DELIMITERS if counts[d]]
        delimiter = max(found, key=lambda d: counts[d]) if found else default
    columns = () if delimiter == "," else _decimal_columns(lines, delimiter.encode())
    return Dialect(delimiter, "," if columns else ".", columns, sniffed=delimiter != default)


def _decimal_columns(lines: list[bytes], d: bytes) -> tuple[str, ...]:
    """The header names of the fields holding a ``1,5``-shaped number on every row of the
    head (quoted text was taken out of the lines: such fields are not seen)."""
    if len(lines) < 2:
        return ()
    names = [n.strip().strip(b'"').decode("utf-8", "replace") for n in lines[0].split(d)]
    fields = [r.split(d) for r in lines[1:]]
    width = min(len(names), *(len(f) for f in fields))
    return tuple(names[i] for i in range(width) if all(_DECIMAL_COMMA.match(f[i]) for f in fields))


def header_delimiters(names: list[str]) -> list[str]:
    """The sniffed delimiters a lone column's name holds (``"a;b;c"``: ``[";"]``)."""
    return [d for d in DELIMITERS if len(names) == 1 and d in names[0]]


Bad = tuple[int, str]
"""A record left out by its reader: (its row in the file, the finding's message)."""


class BadLines:
    """pyarrow's ``invalid_row_handler``: skips a record with the wrong number of fields and
    keeps it, numbered (the reader runs without threads, so the parser numbers rows: the
    header is row 1, empty lines do not count)."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.pending: deque[Bad] = deque()
        self.total = 0
        self.first: tuple[int, int, str] | None = None
        """(expected, actual, text) of the first bad record."""

    def __call__(self, row: Any) -> str:
        number = row.number - 2 if row.number is not None else -1
        expected, actual, text = row.expected_columns, row.actual_columns, row.text
        self.pending.append(
            (number, bad_line_message(number, expected, actual, text, self.dialect))
        )
        self.first = self.first or (expected, actual, text)
        self.total += 1
        return "skip"

    def check_total(self, rows: int) -> None:
        """Raise when most records did not parse: the dialect is wrong, not a line."""
        if self.first is None or self.total < MOSTLY_BAD * rows:
            return
        expected, actual, text = self.first
        d = self.dialect
        hint = (
            DECIMAL_HINT
            if _decimal_commas(text, actual, expected, d)
            else f"not a {DELIMITER_NAMES[d.delimiter]}-separated file? (tried "
            f"{', '.join(map(repr, DELIMITERS))})"
        )
        raise ValueError(
            f"{self.total:,} of {rows:,} records do not have the header's {expected} fields "
            f"with delimiter {d.delimiter!r}: {hint}"
        )


def excerpt(text: str) -> str:
    """A bad line as its finding quotes it: the first :data:`EXCERPT` characters, escaped."""
    return "'" + printable(text[:EXCERPT]) + ("..." if len(text) > EXCERPT else "") + "'"


def bad_line_message(row: int, expected: int, actual: int, text: str, dialect: Dialect) -> str:
    """``line 100002: 3 fields, expected 13 (delimiter ','): '!!garbage!! @@ ...'``."""
    hint = "; " + DECIMAL_HINT if _decimal_commas(text, actual, expected, dialect) else ""
    return (
        f"line {row + 2}: {actual} field{'s' if actual != 1 else ''}, expected {expected} "
        f"(delimiter {dialect.delimiter!r}): {excerpt(text)}{hint}"
    )


DECIMAL_HINT = "decimal commas? (1,5 for 1.5: write the file with another delimiter, e.g. ';')"


def _decimal_commas(text: str, actual: int, expected: int, dialect: Dialect) -> bool:
    """Whether a comma-separated line's extra fields look like numbers with decimal commas."""
    return dialect.delimiter == "," and actual > expected and bool(re.search(r"\d,\d", text))


def place(
    batches: Iterator[pa.RecordBatch],
    pending: deque[Bad],
    path: str,
    finish: Callable[[int], None] | None = None,
) -> Iterator[Chunk]:
    """A text reader's batches as chunks at their rows in the file: each record the reader
    left out (``pending``, in row order, filled as the reader parses) keeps its row, as a
    chunk of its own holding its ``corrupt`` finding (``skipped`` 1) between the batches'
    pieces.  ``finish(rows)`` runs once every row is placed."""
    row = 0
    for batch in batches:
        start = 0
        while start < batch.num_rows:
            if pending and pending[0][0] <= row:
                yield _bad_chunk(pending.popleft()[1], row, path)
                row += 1
                continue
            nxt = pending[0][0] if pending else row + batch.num_rows
            take = min(batch.num_rows - start, nxt - row)
            piece = batch if take == batch.num_rows else batch.slice(start, take)
            yield Chunk(row_offset=row, batch=piece)
            start, row = start + take, row + take
        del batch
    while pending:
        yield _bad_chunk(pending.popleft()[1], row, path)
        row += 1
    if finish is not None:
        finish(row)


def _bad_chunk(message: str, row: int, path: str) -> Chunk:
    found = fnd.Finding(path, "corrupt", Severity.ERROR, message, row=row)
    return Chunk(row_offset=row, findings=[found], skipped=1)


def dialect_of(path: str, options: Mapping[str, Any]) -> Dialect:
    """The file's dialect, sniffed from its decompressed head."""
    default = "\t" if is_tsv(path) else ","
    with _storage.stream(path) as stream:
        head = stream.read(SNIFF_BYTES)
    return sniff(head, default, complete=len(head) < SNIFF_BYTES)


def _convert(
    types: dict[str, pa.DataType], dialect: Dialect, options: Mapping[str, Any]
) -> pacsv.ConvertOptions:
    return pacsv.ConvertOptions(
        column_types=_numbers_kept(types, dialect),
        null_values=PANDAS_NULLS if options.get("pandas_nulls") else CSV_NULLS,
        strings_can_be_null=True,
        quoted_strings_can_be_null=bool(options.get("pandas_nulls")),
        decimal_point=dialect.decimal,
    )


@dataclass(frozen=True)
class Layout:
    """How a file is streamed: Arrow's block, and the column types found in its head (None
    for a file one block reads whole)."""

    block: int
    types: dict[str, pa.DataType] | None = None


def layout_of(path: str, options: Mapping[str, Any], dialect: Dialect) -> Layout:
    """A file past :data:`BLOCK_BYTES` gets its types from its head, parsed alone, and is
    streamed in small blocks; a smaller one (or a head that does not parse alone: a quoted
    value spanning its last line) is read as before, in one block of :data:`BLOCK_BYTES`."""
    if "block_bytes" in options:
        return Layout(int(options["block_bytes"]))
    with _storage.stream(path) as stream:
        head = stream.read(BLOCK_BYTES + 1)
    if len(head) <= BLOCK_BYTES:
        return Layout(BLOCK_BYTES)
    head = head[: head.rfind(b"\n") + 1]
    try:
        table = pacsv.read_csv(
            pa.BufferReader(head),
            read_options=pacsv.ReadOptions(block_size=len(head) + 1, use_threads=False),
            parse_options=pacsv.ParseOptions(
                delimiter=dialect.delimiter, invalid_row_handler=lambda row: "skip"
            ),
            convert_options=_convert({}, dialect, options),
        )
    except (pa.ArrowException, ValueError):
        return Layout(BLOCK_BYTES)
    ends = np.flatnonzero(np.frombuffer(head, dtype=np.uint8) == 10)
    longest = int(np.diff(ends, prepend=-1).max()) if ends.size else len(head)
    block = min(max(STREAM_BLOCK, 32 * longest), BLOCK_BYTES)
    return Layout(block, {f.name: f.type for f in table.schema})


def reader(
    path: str,
    options: Mapping[str, Any],
    types: dict[str, pa.DataType],
    dialect: Dialect,
    handler: BadLines,
    layout: Layout | None = None,
) -> pacsv.CSVStreamingReader:
    """Arrow's streaming CSV reader for the dialect; bad records go to ``handler``; the types
    the caller gives win over those found in the head (``layout``)."""
    layout = layout or Layout(int(options.get("block_bytes", BLOCK_BYTES)))
    given = {**(layout.types or {}), **types}
    return pacsv.open_csv(
        _storage.stream(path),
        read_options=pacsv.ReadOptions(block_size=layout.block, use_threads=False),
        parse_options=pacsv.ParseOptions(delimiter=dialect.delimiter, invalid_row_handler=handler),
        convert_options=_convert(given, dialect, options),
    )


def _numbers_kept(types: dict[str, pa.DataType], dialect: Dialect) -> dict[str, pa.DataType]:
    """A decimal-comma column is read as numbers, not as the text a schema asks for: only
    Arrow's reader knows the file's decimal mark."""
    if not dialect.decimal_columns:
        return types
    wide = {
        n: pa.float64()
        for n in dialect.decimal_columns
        if n in types and pa.types.is_string(types[n])
    }
    return {**types, **wide}


def open_csv(unit: WorkUnit, options: Mapping[str, Any], open_text: Any) -> Opened:
    """Open a CSV unit: sniff, read, place; ``open_text(make_reader, chunker)``: the text
    formats' shared opener (integer columns, types)."""
    dialect = dialect_of(unit.path, options)
    layout = layout_of(unit.path, options, dialect)
    handlers: list[BadLines] = []

    def make(types: dict[str, pa.DataType]) -> pacsv.CSVStreamingReader:
        handlers[:] = [BadLines(dialect)]
        return reader(unit.path, options, types, dialect, handlers[0], layout)

    def chunker(batches: Iterator[pa.RecordBatch]) -> Iterator[Chunk]:
        bad = handlers[0]
        return place(batches, bad.pending, unit.path, bad.check_total)

    opened = open_text(make, chunker)
    if found := header_delimiters(list(opened.columns)):
        raise ValueError(
            f"one column named {printable(next(iter(opened.columns)))[:60]!r}: its header "
            f"holds {', '.join(map(repr, found))} but the lines do not agree on a delimiter "
            f"(tried {', '.join(map(repr, DELIMITERS))})"
        )
    opened.dialect = dialect.describe()
    return opened


def writer_options(path: str) -> pacsv.WriteOptions:
    """A copy keeps the file's delimiter (a decimal comma is written as a point)."""
    return pacsv.WriteOptions(delimiter=dialect_of(path, {}).delimiter)


class CsvFormat(_TextFormat):
    name = "csv"
    extensions = (".csv", ".tsv")

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        declared = dict(options.get("arrow_types") or {})
        keep = bool(options.get("keep_integers"))
        return open_csv(
            unit, options, lambda make, chunker: _open_text(make, declared, keep, chunker=chunker)
        )

    def _writer(self, path: str, stream: pa.NativeFile, schema: pa.Schema) -> Any:
        return pacsv.CSVWriter(stream, schema, write_options=writer_options(path))


register(CsvFormat())
