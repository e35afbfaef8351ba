"""Text training logs, as trainers print them, read in one pass in linear time.

A line yields ``key value`` pairs (``loss 2.3``, ``loss=2.3``, ``loss: 2.3``, ``lm loss: 2.3``,
``Loss is Infinity``, printed dicts), a step counter, a train/eval tag, and signals:

* **counters**: any key of :data:`~datacheck.history._table.COUNTERS`, mmengine
  ``Epoch(train) [e][i/n]`` (global iteration ``(e-1)*n+i``) and ``Iter(train) [i/n]``, Keras
  ``Epoch i/n`` headers with ``k/n [===]`` batch lines (epoch ``i-1+k/n``), Lightning progress
  bars ``Epoch e: ..| k/n [`` (epoch ``e+k/n``);
* **evaluation lines** (a separate series): a line with the word ``valid``/``val``/``eval``/
  ``test``/``validation`` (fairseq ``| valid |``, nanoGPT ``step N: train loss, val loss``,
  Megatron ``validation loss at iteration``), or whose only losses are evaluation keys;
* **signals**: fp16 overflow skips (DeepSpeed ``OVERFLOW! ... Skipping step``, fairseq ``overflow
  detected, setting loss scale to``, apex ``Gradient overflow``), saved checkpoints (Megatron,
  DeepSpeed ``global_stepN``, Hugging Face ``checkpoint-N``, fairseq ``@ N updates``, mmengine,
  Keras, Lightning, nanoGPT) and non-finite losses in prose (``NaN loss detected``);
* **boxed records**: a record printed as a box of ``| key | value |`` lines between dashed
  rules (stable-baselines3's ``HumanOutputFormat``, with ``| train/ |  |`` section lines), one
  row per box; a section names a group, and only an evaluation section's keys keep it
  (``eval/mean_reward`` -> ``eval_mean_reward``).

Every pattern is anchored or possessive, so no line makes the parser backtrack quadratically.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datacheck.history._fields import (
    Found,
    TableHeader,
    header_of,
    line_fields,
    table_row,
)
from datacheck.history._signals import PROSE_NONFINITE, signal
from datacheck.history._table import (
    MISSING,
    Columns,
    Table,
    is_eval_key,
    is_positional,
    norm_key,
    role_of,
)

__all__ = ["parse_line", "read_text"]

_E = r"(?:[eE][-+]?+\d++)?+"
_NAN = r"[nN][aA][nN]"
_INF = r"[iI][nN][fF](?:[iI][nN][iI][tT][yY])?+"
_EVAL_WORD = re.compile(
    r"(?<![\w/.-])(?:valid|validation|val|eval|evaluate|evaluation|evaluating|test|testing)"
    r"(?![\w/.-])|测试|验证|评估|评测",
    re.IGNORECASE,
)
_MMENGINE = re.compile(r"\b(Epoch|Iter)\((\w++)\)\s*+\[\s*+(\d++)\s*+\](?:\[\s*+(\d++)/(\d++)\])?")
_KERAS_HEADER = re.compile(r"\s*+Epoch\s++(\d++)/(\d++)\s*+$")
_KERAS_BATCH = re.compile(r"\s*+(\d++)/(\d++)\s++(?:\[|\u2501|-\s)")
"""A Keras batch line under its ``Epoch i/n`` header: a progress bar (``50/938 [==>...]``, Keras
3's ``━``) or, with ``verbose=2``, the epoch's one line (``938/938 - 3s - loss: ..``)."""
_LIGHTNING = re.compile(r"Epoch\s++(\d++):\s*+\d++%\|[^|]*+\|\s*+(\d++)/(\d++)\s*+\[")
_ANSI = re.compile(r"\x1b\[[0-9;?]*+[A-Za-z]|\x1b\][^\x07]*+\x07|[\x08]")
"""Terminal colour and cursor codes (torchtitan, Keras 3, rich consoles) and backspaces."""
_BOX_CELL = re.compile(r"\|(\s*+)([A-Za-z_][^|]*?)\s*+\|\s*+([^|]*?)\s*+\|\s*+")
"""``|    loss     | 12.3     |``: a key and its value in a boxed record (indented under its
section; a section line has no value: ``| train/   |          |``)."""
_BOX_RULE = re.compile(r"\s*+-{8,}\s*+")
"""The dashed rule a box opens and closes with (nothing else opens one: a two-column table's
``| 10 | 2.34 |`` rows are no box)."""
_BOX_EVAL = re.compile(r"(?:eval|evaluation|val|valid|validation|test)/?", re.IGNORECASE)
_ANSI_LEFT = re.compile(r"\[[0-9;]{0,12}m")
"""What is left of a colour code whose escape character was lost (a log pasted from a
terminal: ``[1mValid Summary | ...[0m``); only taken out of a line that has a reset."""

_FULLWIDTH = str.maketrans(
    {"：": ":", "，": ", ", "（": "(", "）": ")", "［": "[", "］": "]", "＝": "=", "｜": "|",
     "；": ";", "　": " ", "！": "!", "％": "%", "／": "/"}
)  # fmt: skip
"""Full-width punctuation as ASCII (``训练次数：100, Loss：1.98``)."""
_TRACEBACK = re.compile(r'\s*+File "[^"]*+", line \d')
"""A traceback's frame line: never data (its line numbers rise like a counter)."""


def _plain(line: str) -> str:
    """The line without colour codes that lost their escape character, and with full-width
    punctuation as ASCII."""
    if "[0m" in line or "[m" in line:
        line = _ANSI_LEFT.sub("", line)
    return line if line.isascii() else line.translate(_FULLWIDTH)


_UNIT = r"(?:ms|us|ns|s|min|m|h|it|x|[kKMGT]i?B|[kKMBT])(?![\w.])"
"""A unit glued to a number (``120.30ms``, ``4.2it/s``, ``1.5x``, ``12GB``)."""
_TOKEN = re.compile(  # NUM where nothing word-like precedes it, split by its first character
    r"([-+.\dnNiI](?<![\w.].)"  # a first character that can start a number: a fast scan
    rf"(?:(?<=\d)\d*+(?:\.\d*+)?+{_E}"
    rf"|(?<=\.)\d++{_E}"
    rf"|(?<=[-+])(?:(?:\d++(?:\.\d*+)?+|\.\d++){_E}|{_NAN}|{_INF})"
    r"|(?<=[nN])[aA][nN]"
    r"|(?<=[iI])[nN][fF](?:[iI][nN][iI][tT][yY])?+"
    rf")(?:(?!\w|\.\w)|(?<=\d)(?={_UNIT})|(?<=\d)(?=[A-Z][a-z])))"
)
"""A number, or digits glued to a unit (never a value: ``NUM`` wants no word character
after it), so ``time 120.30ms`` and ``time 98.10ms`` are lines of one shape; digits glued to
a capitalised word end there, as in ``NUM``."""
_CACHE_LIMIT = 4096


class _Context:
    """State carried from line to line: the Keras epoch header, a table's header line, the
    line number, and the parse plans."""

    def __init__(self) -> None:
        self.keras_epoch: int | None = None
        self.plans: dict[str, _Plan | None] = {}
        self.header: TableHeader | None = None
        self.header_line = -2
        self.line_no = 0


@dataclass(frozen=True)
class _Plan:
    """How to read every line of one shape (the line with its numbers blanked out)."""

    values: tuple[tuple[str, int], ...]
    """(key, number index) for each kept value."""
    computed: tuple[tuple[str, str, tuple[int, ...]], ...]
    """(key, op, number indices): ``mm`` (e-1)*n+i, ``frac`` a+k/n, ``keras`` epoch-1+k/n."""
    tag: str
    data: bool
    """The row is data (has a value with a role other than the step)."""


def _counters(
    line: str, row: Found, ctx: _Context
) -> tuple[str | None, list[tuple[str, str, tuple[int, ...]]]]:
    """Counters from the trainer's own shapes: (mode said by the line, how they were computed)."""
    if (m := _MMENGINE.search(line)) is not None:
        kind, mode, first, i, n = m.groups()
        if kind == "Iter":
            row["iteration"] = (float(first), m.start(3))
            return mode.lower(), []
        if i is not None:
            row["iteration"] = ((int(first) - 1) * int(n) + float(i), -1)
            return mode.lower(), [("iteration", "mm", (m.start(3), m.start(4), m.start(5)))]
        return mode.lower(), []
    if (m := _LIGHTNING.search(line)) is not None:
        row["epoch"] = (int(m.group(1)) + int(m.group(2)) / int(m.group(3)), -1)
        return None, [("epoch", "frac", (m.start(1), m.start(2), m.start(3)))]
    if ctx.keras_epoch is not None and (m := _KERAS_BATCH.match(line)) is not None:
        row["epoch"] = (ctx.keras_epoch - 1 + int(m.group(1)) / int(m.group(2)), -1)
        return None, [("epoch", "keras", (m.start(1), m.start(2)))]
    return None, []


def _columns(line: str, ctx: _Context) -> tuple[Found, bool]:
    """A row of numbers (named by the header line just above it, if any); or the header line
    itself.  Returns (fields, whether the line must be parsed each time: a row named by a
    header, or a header)."""
    header = ctx.header if ctx.header_line == ctx.line_no - 1 else None
    row = table_row(line, header)
    if row is not None:
        if header is not None:
            ctx.header_line = ctx.line_no  # the next row is under the same header
        return row, header is not None
    if (found := header_of(line)) is not None:  # parsed each time: the rows under it need it
        ctx.header, ctx.header_line = found, ctx.line_no
        return {}, True
    return {}, False


def _is_eval(line: str, row: Found, mode: str | None) -> bool:
    """A line of an evaluation: its mode says so (mmengine), or its only losses are
    evaluation keys, or it has the word and no loss named a training one, or an evaluation
    loss beside it (litgpt's ``loss train: .., val: ..`` is a training line, nanoGPT's ``train
    loss .., val loss ..`` an evaluation)."""
    if mode is not None:
        return mode in ("val", "test")
    losses = [k for k in row if role_of(k) == "loss"]
    if losses and all(map(is_eval_key, losses)):
        return True
    if _EVAL_WORD.search(line) is None:
        return False
    trained = any({"train", "training"} & set(k.split("_")) for k in losses)
    return not trained or any(map(is_eval_key, losses))


def _parse(line: str, ctx: _Context) -> tuple[Found, str, list[dict[str, Any]], list[Any]]:
    low = line.lower()
    if (m := _KERAS_HEADER.match(line)) is not None:
        ctx.keras_epoch = int(m.group(1))
        return {}, "train", [], [None]
    if (event := signal(line, low)) is not None:
        # a progress bar redrawn before it (``98/24128 [00:40<..]OVERFLOW! ...``) says its step
        found = line_fields(line) if event["kind"] == "overflow" else {}
        counters = {k: v for k, v in found.items() if k == "bar" or role_of(k) == "step"}
        return counters, "train", [event], [None]
    if _TRACEBACK.match(line) is not None:
        return {}, "train", [], []
    row = line_fields(line)
    named = False
    if all(is_positional(k) for k in row):  # nothing named: a row of a table?
        cells, named = _columns(line, ctx)
        if cells:  # a cell's own name wins over a bare counter read at the same place
            taken = {at for _, at in cells.values()}
            row = {**{k: v for k, v in row.items() if v[1] not in taken}, **cells}
    mode, computed = _counters(line, row, ctx)
    events = []
    if (
        ("invalid" in low or not any(role_of(k) == "loss" and not is_eval_key(k) for k in row))
        and ("nan" in low or "inf" in low or "finite" in low or "invalid" in low)
        and PROSE_NONFINITE.search(line)
    ):
        events.append({"kind": "nonfinite", "text": line.strip()[:200]})
    tag = "eval" if _is_eval(line, row, mode) else "train"
    return row, tag, events, [None] if named else computed


def parse_line(
    line: str, ctx: _Context | None = None
) -> tuple[dict[str, float], str, list[dict[str, Any]]]:
    """One line: ``(values by normalised key, 'train'|'eval', signal events)``."""
    row, tag, events, _ = _parse(line, ctx or _Context())
    return {k: v for k, (v, _) in row.items()}, tag, events


def _plan(
    parts: list[str], row: Found, tag: str, computed: list[Any], cols: Columns
) -> _Plan | None:
    """A plan for this line's shape, or ``None`` when its shape must be parsed each time."""
    if computed == [None]:
        return None
    index, pos = {}, 0
    for j, part in enumerate(parts):
        if j % 2:
            index[pos] = j // 2
        pos += len(part)
    values, ops = [], []
    for key, (_, at) in row.items():
        if not cols.wanted(key):
            continue
        if at in index:
            values.append((key, index[at]))
        elif not any(c[0] == key for c in computed):
            return None
    for key, op, positions in computed:
        if not all(p in index for p in positions):
            return None
        ops.append((key, op, tuple(index[p] for p in positions)))
    skeleton = "\x00".join(parts[0::2]).lower()
    has_train_loss = any(role_of(k) == "loss" and not is_eval_key(k) for k in row)
    if (not has_train_loss or "invalid" in skeleton) and "loss" in skeleton:
        return None  # a line that may say "NaN loss" in words: parse it each time
    keys = [k for k, _ in values] + [c[0] for c in ops]
    return _Plan(tuple(values), tuple(ops), tag, bool(keys))


def _apply(plan: _Plan, numbers: Sequence[str], ctx: _Context) -> dict[str, float] | None:
    row = {key: float(numbers[i]) for key, i in plan.values}
    for key, op, idx in plan.computed:
        a, b, *c = (float(numbers[i]) for i in idx)
        if op == "mm":
            row[key] = (a - 1) * c[0] + b
        elif op == "frac":
            row[key] = a + b / c[0]
        elif ctx.keras_epoch is not None:
            row[key] = ctx.keras_epoch - 1 + a / b
        else:
            return None
    return row


class _Shapes:
    """The plans of the line shapes seen, and whole-line patterns for the repeated ones.

    A shape is the line with its numbers blanked (the pieces between :data:`_TOKEN` matches).
    A shape that comes in runs of lines also gets a pattern: its pieces verbatim with a
    :data:`_TOKEN` group for each number, so a line of the shape last used is recognised and
    its numbers taken by one ``fullmatch`` (3x faster than splitting a Megatron line).  A line
    matches that pattern exactly when it splits into the same pieces: no number can start
    inside a piece (each ends before a number, so not in a word character or ``.``), and no
    attempt to start one reads past a piece's end unless the piece ends in ``+``/``-``; shapes
    with such a piece get no pattern.  Plans and patterns are bounded in number and size.
    """

    def __init__(self) -> None:
        self.ctx = _Context()
        self.chars = 0
        self.patterns: dict[str, re.Pattern[str] | None] = {}
        self.runs: dict[str, int] = {}
        self.previous = ""
        self.last: tuple[re.Pattern[str], _Plan] | None = None

    def lookup(self, parts: list[str]) -> _Plan | None:
        """The shape of a split line and its plan (``None``: new, or parsed each time)."""
        skeleton = "\x00".join(parts[0::2])
        plan = self.ctx.plans.get(skeleton)
        pattern = None
        if plan is not None and skeleton == self.previous:  # a run of lines of one shape
            pattern = self.patterns.get(skeleton)
            if pattern is None and skeleton not in self.patterns:
                runs = self.runs[skeleton] = self.runs.get(skeleton, 0) + 1
                if runs >= _RUNS:
                    pattern = self.patterns[skeleton] = _whole_line(parts, len(self.patterns))
        self.previous = skeleton
        self.last = None if pattern is None or plan is None else (pattern, plan)
        return plan

    def learn(
        self, parts: list[str], found: Found, tag: str, computed: list[Any], cols: Columns
    ) -> None:
        """Make a plan for a new shape (within the bounds)."""
        skeleton, plans = "\x00".join(parts[0::2]), self.ctx.plans
        if skeleton in plans or len(plans) >= _CACHE_LIMIT or self.chars > _CACHE_CHARS:
            return
        self.chars += len(skeleton)
        plans[skeleton] = _plan(parts, found, tag, computed, cols)


_CACHE_CHARS = 1 << 22
"""Characters of shapes kept at most (4,096 shapes of 1,000 characters)."""
_LINE_CHARS = 1 << 20
"""A line is read this many characters at a time at most: a file without line breaks is read
in pieces, never whole."""
_PATTERNS = 64
_RUNS = 64
"""A shape gets its pattern once a line of it has followed one of it this many times (a log
whose shapes alternate line by line would pay the compiling and the failed matches)."""
_PATTERN_CHARS = 2000


def _whole_line(parts: list[str], made: int) -> re.Pattern[str] | None:
    pieces = parts[0::2]
    if made >= _PATTERNS or sum(map(len, pieces)) > _PATTERN_CHARS:
        return None
    if any(piece.endswith(("+", "-")) for piece in pieces[:-1]):
        return None  # a number attempt from inside the piece could read the next number
    return re.compile(_TOKEN.pattern.join(map(re.escape, pieces)))


class _Direct:
    """Where a plan's values go when the table already has a column for each: then a line of
    the plan is its values appended to their arrays and ``MISSING`` to the others, what
    ``Columns.add`` does with its row."""

    __slots__ = ("columns", "counting", "into", "keys", "pad", "train", "width")

    def __init__(self, plan: _Plan, table: Table) -> None:
        self.columns = table.eval if plan.tag == "eval" else table.train
        cols = self.columns.cols
        self.width = len(cols)
        self.train = plan.tag != "eval"
        self.keys = keys = {key for key, _ in plan.values}
        fits = plan.data and not plan.computed and keys <= cols.keys()
        self.into = tuple((cols[key], i) for key, i in plan.values) if fits else ()
        self.pad = tuple(col for key, col in cols.items() if key not in keys)
        self.counting = self.columns.probing or bool(self.columns.pending)


class _Reader:
    """One pass over a text log's lines: shapes read by their plans, rows into the table."""

    def __init__(self, keep: set[str]) -> None:
        self.table = Table("text", Columns(keep), Columns(keep))
        self.shapes = _Shapes()
        self.pending: list[dict[str, Any]] = []
        """Signal events waiting for the training row they come before."""
        self.direct: dict[int, _Direct] = {}
        """By the ``id`` of the plan (plans stay in the context's cache: ids are not reused)."""
        self.line_no = 0
        self.box: dict[str, float] | None = None
        """The boxed record being read (see the module doc), from its opening rule on; None
        outside one."""
        self.section = ""

    def line(self, line: str) -> None:
        self.line_no += 1
        if "\x1b" in line or "\x08" in line:
            line = _ANSI.sub("", line)
        if (self.box is not None or line[:1] == "-") and self._boxed(line):
            return
        parts: list[str] | None = None
        last = self.shapes.last  # a line of the last shape: its plan and numbers in one match
        known = None if last is None else last[0].fullmatch(line)
        if known is not None and self._append(last[1], known.groups()):  # type: ignore[index]
            return
        if known is None:
            line = _plain(line)  # after the match: a pattern is made from plain lines only
            parts = _TOKEN.split(line)
            plan = self.shapes.lookup(parts)
            numbers: Sequence[str] = parts[1::2]
        else:
            plan, numbers = last[1], known.groups()  # type: ignore[index]
        row = None if plan is None else _apply(plan, numbers, self.shapes.ctx)
        if plan is None or row is None:
            tag, row = self._parse(line, parts)
        else:
            tag = plan.tag if plan.data else ""
        if tag:
            self._add(tag, row)

    def _boxed(self, line: str) -> bool:
        """A line of a boxed record read (True), or the record ended before another line. A
        rule ends the record before it (boxes follow each other) and opens the next."""
        if _BOX_RULE.fullmatch(line) is not None:
            self._end_box()
            self.box = {}
            return True
        if self.box is None:
            return False
        if (m := _BOX_CELL.fullmatch(line)) is None:
            self._end_box()
            return False
        indent, key, value = m.groups()
        if not value:  # a section line: the group of the keys under it
            self.section = key if _BOX_EVAL.fullmatch(key) else ""
            return True
        try:
            number = float(value)
        except ValueError:
            return True  # text in a cell (a truncated name): no reading
        self.box.setdefault(norm_key(self.section + key if indent else key), number)
        return True

    def _end_box(self) -> None:
        box, self.box, self.section = self.box, None, ""
        if not box:
            return
        losses = [k for k in box if role_of(k) == "loss"]
        tag = "eval" if losses and all(is_eval_key(k) for k in losses) else "train"
        cols = self.table.eval if tag == "eval" else self.table.train
        row = {k: v for k, v in box.items() if cols.wanted(k)}
        if row:
            self._add(tag, row)

    def _append(self, plan: _Plan, numbers: Sequence[str]) -> bool:
        """Append a line of ``plan`` straight to the columns, if :class:`_Direct` can."""
        direct = self.direct.get(id(plan))
        if direct is None or len(direct.columns.cols) != direct.width:
            direct = self.direct[id(plan)] = _Direct(plan, self.table)
        if not direct.into or (direct.train and self.pending):
            return False  # signal events wait for this row: Columns.add and _add
        for col, i in direct.into:
            col.append(float(numbers[i]))
        for col in direct.pad:
            col.append(MISSING)
        columns = direct.columns
        columns.n += 1
        if direct.counting:
            generation = columns.generation
            columns.count(direct.keys)
            if columns.generation != generation:
                self._stale()
        return True

    def _stale(self) -> None:
        """The wanted keys changed (the columns settled): plans made before are forgotten."""
        shapes = self.shapes
        shapes.ctx.plans.clear()
        shapes.patterns.clear()
        shapes.runs.clear()
        shapes.chars = 0
        shapes.last = None
        shapes.previous = ""
        self.direct.clear()

    def _parse(self, line: str, parts: list[str] | None) -> tuple[str, dict[str, float]]:
        """Parse a line in full (and plan its shape); ``tag`` is ``""`` when it is no data."""
        table = self.table
        self.shapes.ctx.line_no = self.line_no
        found, tag, events, computed = _parse(line, self.shapes.ctx)
        cols = table.eval if tag == "eval" else table.train
        if not events:
            self.shapes.learn(parts or _TOKEN.split(line), found, tag, computed, cols)
        for ev in events:
            ev["prev_row"] = table.train.n - 1 if table.train.n else None
        self.pending.extend(events)
        row = {k: v for k, (v, _) in found.items() if cols.wanted(k)}
        return tag if row else "", row

    def _add(self, tag: str, row: dict[str, float]) -> None:
        table = self.table
        columns = table.eval if tag == "eval" else table.train
        generation = columns.generation
        index = columns.add(row)
        if columns.generation != generation:
            self._stale()
        if tag == "train" and self.pending:
            for ev in self.pending:
                ev["row"] = index
            table.events.extend(self.pending)
            self.pending = []

    def finish(self) -> Table:
        """The table, with the events after the last training row attached to it."""
        self._end_box()
        table = self.table
        for ev in self.pending:
            ev["row"] = table.train.n - 1 if table.train.n else None
        table.events.extend(self.pending)
        return table


def read_text(path: Path, keep: set[str]) -> Table:
    """Read a text log line by line, streamed (only keys with a role are kept, in arrays).

    Most lines of a log share a few shapes; each shape (the line with its numbers blanked) is
    parsed once into a plan, and later lines of that shape are read by the plan.
    """
    return _read(path, _Reader(keep))


def _read(path: Path, reader: _Reader) -> Table:
    with path.open(encoding="utf-8", errors="replace", newline="") as fh:
        read = fh.readline
        while physical := read(_LINE_CHARS):
            if "\r" in physical:  # progress bars redraw with carriage returns
                for line in physical.split("\r"):
                    if line and not line.isspace():
                        reader.line(line)
            elif not physical.isspace():
                reader.line(physical)
    return reader.finish()
