"""The numbers of one text-log line, under the names the line gives them.

Trainers print a value after its name (``loss 2.3``, ``loss=2.3``, ``loss: 2.3``, ``lm loss:
2.3``, ``Loss is Infinity``, ``Cost 3.14``, ``Learning Rate 1e-05``, ``lr=[9.6e-06, ...]``,
printed dicts), a counter after its name with its total (``iteration 5/ 1000``, ``Epoch
[1/5]``, ``Epoch:[0/2]``, ``[step=8/100,epoch=0]``), a counter before its name (``06000 iter``,
``15000/  300000 steps``, ESPnet's ``1epoch:train:101-200batch``), bare in brackets (CLU's
``[1000] loss=..``, ``Epoch:[0/2](7000/293491)``, timm's ``Train: 3 [ 100/1251 ( 8%)]``), in a
progress bar (``45%|####| 45/100 [``), or in columns (a headerless ``76930 2.6496577``, or
rows under a header line of names: YOLOv5, fastai, MLX-LM).  Each is a field here; which one is
the step, the loss and the rest is decided later from what the columns do
(:mod:`datacheck.history._counters`, :mod:`datacheck.history._keys`).

Every pattern is anchored or possessive, so no line makes the parser backtrack quadratically.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from datacheck.history._table import fields_of, norm_key

__all__ = ["Found", "TableHeader", "line_fields", "table_row"]

Found = dict[str, tuple[float, int]]
"""Values by normalised key, with where the value starts in the line (-1: not known)."""

_E = r"(?:[eE][-+]?+\d++)?+"
_NAN = r"[nN][aA][nN]"
_INF = r"[iI][nN][fF](?:[iI][nN][iI][tT][yY])?+"
_GLUED = r"(?<=\d)(?-i:(?=[A-Z][a-z])(?![KMGTPE]iB(?![A-Za-z])))"
"""A number glued to the capitalised word after it (``44.4110Batch``) still ends there; case
counts even in the patterns that ignore it, so a glued unit (``97.30ms``, ``12.5GB``, ``80.1MiB``) keeps its
number from being a value and never becomes a key of the number after it (``time 97.30ms 1
step``: the ``1`` is the step's)."""
NUM = rf"(?>[-+]?+(?:(?:\d++(?:\.\d*+)?+|\.\d++){_E}|(?-i:{_NAN}|{_INF})))(?:(?!\w|\.\w)|{_GLUED})"
"""A number as ``float()`` reads it (``nan``/``inf`` in any ASCII case: never a dotless ``ı``,
which ``re.IGNORECASE`` would take for an ``i``)."""
_QUAL = r"(?:(?:train|training|val|valid|validation|eval|test|lm)\s++)?+"
_TWO_WORDS = (
    r"learning\s++rate|gradient\s++norm|grad\s++norm|loss\s++scale"
    r"|[A-Za-z]{1,12}\s++loss(?![\w./-])"
)
"""Keys of two words: the LR, the grad norm, the loss scale, and a loss with its qualifier
(a GAN's ``D loss: 0.5 G loss: 1.2``, ``total loss 2.3``, ``Train loss 2.3``)."""
_WRAP = (
    r"(?:(?:np|numpy|jnp|torch)\.)?+(?:float|int|uint|bfloat)\d*+\(\s*+"
    r"|(?:tensor|Array|array|DeviceArray)\(\s*+\[?+\s*+"
)
"""A value inside its type's repr: numpy 2's ``np.float32(2.31)`` (in printed dicts), torch's
``tensor(2.31, device='cuda:0')`` / ``tensor([2.3100])``, JAX's ``Array(2.31, dtype=float32)``."""
_SPAN = r"\s*+,?\s*+(?:days?|hours?|hrs?|minutes?|mins?|seconds?|secs?)(?![\w./-])"
"""A number followed by a unit of time is a duration, never a value of its key (mmcv's ``eta:
6 days, 15:22:46``: ``str(datetime.timedelta(...))``)."""
_EXT = r"(?:py|pyx|cpp|cc|cxx|cu|c|h|hpp|java|kt|scala|go|rs|jl|lua):"
_SOURCE = re.compile(
    rf"(?<![\w./-])[\w/-]++(?:\.(?!{_EXT})[\w/-]++)*+\.(?={_EXT})\w++"
    r"(?::[A-Za-z_<][\w<>.-]*+)?+:(\d++)"
    r"|\|\s*+[\w.]++:[\w<>]++:(\d++)\s++-\s"
)
"""A source location: glog's ``solver.cpp:218]``, DeepSpeed's ``[stage2.py:1628:step]``,
loguru's ``| trainers.base_trainer:train_epochs:256 - `` (its line number alternates between
call sites: never a counter)."""
_NOT_KEYS = (
    r"(?:is|at|of|to|in|on|by|for|the|and|or|was|from|with|after|nan|inf|infinity"
    r"|info|debug|warning|warn|error|critical|trace)"
)
"""Words that are never a key: the copula and prepositions of prose (DL4J's ``Score at
iteration 5 is 2.3``), the non-finite numbers, and log levels (``[INFO] 0 step ..``)."""
_PAIR = re.compile(
    rf"(?:(?<![\w./-])|{_GLUED})(?<!=')(?<!=\")(?!{_NOT_KEYS}(?![\w./-]))"
    rf"({_QUAL}(?:{_TWO_WORDS}|[^\W\d][\w./-]*+))['\"\]]?+"
    rf"(?:\s++is\s++|\s*+[:=]\s*+|\s++)(?:{_WRAP}|[\[(]\s*+|['\"])?+({NUM})(?!:\d|{_SPAN}|%\|)"
    rf"(?:\s*+/\s*+(\d++))?+",
    re.IGNORECASE,
)
"""``key value`` in every spelling; the key may be quoted or bracketed (PaddleDetection's
``'loss': '1.02'``, LION's ``[Loss] 2.3``), the value quoted or opening a list or a tensor's
repr (``lr=[9.6e-06, ..]``, ``loss=tensor(2.34, device='cuda:0')``) and followed by its total;
a clock (``eta: 8:56:30``) is no value, nor the percentage opening a tqdm bar (diffusers'
``Steps:  75%|###  | 46/60 [..]``: the description names the bar, whose ``46/60`` is the
count), and nothing inside a quoted string value is a key (``device='cuda:0'``)."""
_NUM_AT = re.compile(
    rf"\s*+(?:{_WRAP})?+[\[(]?+['\"]?+\s*+({NUM})(?!:\d)(?:\s*+/\s*+(\d++))?+", re.IGNORECASE
)
_WORD = re.compile(r"\(?+[^\W\d][\w./()-]*+(?<!\.)")
"""A word of a key of several words (``lm``, ``loss``, ``(ms)``, ``(curr)``; not one ending a
sentence)."""
_LEVELS = frozenset({"INFO", "DEBUG", "WARNING", "WARN", "ERROR", "CRITICAL", "TRACE"})
_PROSE = frozenset({"is", "was", "at", "or", "and", "became", "if", "when", "then"})
"""Words of a sentence, never of a key (``Loss became infinite or NaN at iteration=2137``)."""
_QUOTED_PAIR = re.compile(
    rf"['\"]([A-Za-z_][^'\"]*+)['\"]\s*+:\s*+(?:{_WRAP})?+'?({NUM})", re.IGNORECASE
)
_SEGMENTS = re.compile(r"\s[|,]\s?|,\s|\t|\.\s(?=[A-Z])")
_BARE = re.compile(r"[\[(]\s*+(\d++)(?:\s*+/\s*+(\d++))?+(?=\s*+[\])]|\s++\()")
"""A counter bare in brackets: ``[1000]``, ``(7000/293491)``, ``[ 100/1251 ( 8%)]``."""
_BEFORE = re.compile(
    r"(?<![\w.])(\d++)(?:(-)(\d++)|\s*+(/)\s*+(\d++))?+(\s?)(epochs?|iters?|iterations?"
    r"|steps?|updates?|batch(?:es)?)(?![A-Za-z])",
    re.IGNORECASE,
)
"""A counter before its word: ``06000 iter``, ``15000/ 300000 steps``, ``101-200batch``."""
_RATIO = re.compile(r"(?<![\w./:-])(\d++)\s*+/\s*+(\d++)(?![\w./:%-])")
"""A counter and its total, bare: fairseq's ``epoch 001:   5000 / 331737 loss=..``."""
_BAR = re.compile(r"\d++%\|[^|\n]*+\|\s*+(\d++)/(\d++)\s*+\[")
"""A tqdm bar: ``45%|####5     | 45/100 [``."""
_LEADING = re.compile(r"\s*+(\d++)\|(\d++)\|(?=[A-Za-z])")
"""torchtune's bar description ``1|25|Loss: 2.34``: epoch and global step, bare."""
_LEADING_ONE = re.compile(r"\s*+(\d++)\s*+[:|]\s++(?=[^\W\d])")
"""A bare counter opening the line: ``12: loss=..`` (``print(f"{iter}: {loss=}")``), ``100 |
loss 2.3 | lr ..`` (``print(f"{iter_num} | loss {loss:.4f} | ...")``)."""
_AT_COUNTER = re.compile(
    r"(?<![\w./-])([^\W\d][\w./-]*+)\s++at\s++(step|iteration|iter|epoch|batch|update)\s*+[=:]?"
    rf"\s*+(\d++)\s*+(?:is|was|:|=)\s*+({NUM})",
    re.IGNORECASE,
)
"""``KEY at COUNTER N is VALUE``: DL4J's ``ScoreIterationListener`` (``"Score at iteration {}
is {}"``)."""
_LONE = re.compile(
    rf"tensor\(\s*+\[?+\s*+({NUM})[^()]*+(?:\([^()]*+\)[^()]*+)*+\)"
    r"|\[?+\s*+([-+]?+(?:\d++\.\d*+|\.\d++)(?:[eE][-+]?+\d++)?+|[-+]?+(?:nan|inf))\s*+\]?+",
    re.IGNORECASE,
)
"""A line that is one value and nothing else: a tensor's repr (``print(loss)``: ``tensor(3.2207,
device='cuda:0')``) or a number with a decimal point (``print(loss.item())``); a whole number
alone says too little (a counter? a count?)."""


def _wordy(segment: str) -> tuple[str, int] | None:
    """``lm loss: 2.3`` / ``Current learning rate is 0.04`` / OLMo-core's ``train/CE loss=2.3``
    / litgpt's ``step 1: loss train (curr): 1.657``: a key of several words, the words just
    before a separator that a number follows (a log level opening them is no part of it)."""
    for sep in (":", " is ", "="):
        at = segment.find(sep)
        tries = 0
        while at > 0 and tries < 8:
            tries += 1
            words: list[str] = []
            before = segment[max(0, at - 160) : at].split()  # 6 words at most: no long scan
            for i in range(len(before) - 1, -1, -1):
                word = before[i]
                if len(words) == 6 or _WORD.fullmatch(word) is None or word.lower() in _PROSE:
                    break
                if "_" in word or (
                    i and word.lower() in _COUNTER_WORDS and before[i - 1].isdigit()
                ):
                    break  # a key of its own (``grad_norm``), a counter's word (``0 step``)
                words.append(word)
            while words and words[-1] in _LEVELS:
                words.pop()
            if len(words) > 1 and _NUM_AT.match(segment, at + len(sep)) is not None:
                return " ".join(reversed(words)), at + len(sep)
            at = segment.find(sep, at + len(sep))
    return None


def _dict_line(text: str) -> dict[str, Any] | None:
    """A printed dict (Hugging Face Trainer: ``{'loss': '2.41', 'grad_norm': nan, ...}``)."""
    try:
        rec = ast.literal_eval(text)  # literals only, never eval
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        pairs = _QUOTED_PAIR.findall(text)  # bare nan/inf are no Python literals
        return {k: v for k, v in pairs} or None
    return rec if isinstance(rec, dict) else None


def _segments(line: str) -> list[tuple[int, str]]:
    out, start = [], 0
    for m in _SEGMENTS.finditer(line):
        out.append((start, line[start : m.start()]))
        start = m.end()
    out.append((start, line[start:]))
    return out


def _put(row: Found, key: str, value: float, at: int, total: str | None, total_at: int) -> None:
    if key in row:
        return
    row[key] = (value, at)
    if total is not None:
        row.setdefault(key + "_total", (float(total), total_at))


def _dict_fields(text: str) -> Found | None:
    at = max(text.rfind("{'"), text.rfind('{"'))
    if at > 0 and text.endswith("}"):
        text = text[at:]  # a printed dict after a progress bar's last redraw or a log prefix
    if not (text.startswith("{") and text.endswith("}")):
        return None
    rec = _dict_line(text)
    if rec is None:
        return None
    row: Found = {}
    for key, value in rec.items():
        for k, num in fields_of(str(key), value):
            row.setdefault(k, (num, -1))
    return row


def line_fields(line: str) -> Found:
    """Every named number of a line (see the module docstring)."""
    text = line.strip()
    if "{" in text and (row := _dict_fields(text)) is not None:
        return row
    row = {}
    used: set[int] = set()
    if ":" in line:  # the line number of a source location is no value
        used.update(m.start(1) if m.group(1) else m.start(2) for m in _SOURCE.finditer(line))
    low = line.lower()
    counter_words = any(w in low for w in _COUNTER_WORDS)
    if counter_words:  # glued to its word (``1epoch``, ``101-200batch``): before any pair
        _before(line, row, used, glued=True)
    if " at " in line and (m := _AT_COUNTER.search(line)) is not None:
        _put(row, norm_key(m.group(2)), float(m.group(3)), m.start(3), None, -1)
        _put(row, norm_key(m.group(1)), float(m.group(4)), m.start(4), None, -1)
        used.update((m.start(3), m.start(4)))
    for start, segment in _segments(line):
        wordy = _wordy(segment)
        if wordy is not None:
            key, at = wordy
            m = _NUM_AT.match(segment, at)
            assert m is not None
            if start + m.start(1) not in used:
                _put(row, norm_key(key), float(m.group(1)), start + m.start(1), m.group(2), -1)
                used.add(start + m.start(1))
        for m in _PAIR.finditer(segment):
            value_at = start + m.start(2)
            if value_at in used:
                continue
            total_at = start + m.start(3) if m.group(3) else -1
            _put(row, norm_key(m.group(1)), float(m.group(2)), value_at, m.group(3), total_at)
            used.add(value_at)
    if counter_words:
        _before(line, row, used, glued=False)
    _bare(line, row, used)
    if not row and (m := _LONE.fullmatch(text)) is not None:
        _put(row, "column_1", float(m.group(1) or m.group(2)), -1, None, -1)
    return row


_COUNTER_WORDS = ("epoch", "iter", "step", "update", "batch")


def _before(line: str, row: Found, used: set[int], *, glued: bool) -> None:
    """Counters before their word: glued (``1epoch``, ``101-200batch``, read before the pairs
    so ``train:101`` is not one) or spaced (``06000 iter``, after the pairs, so the ``5`` of
    ``Epoch 5 step 100`` stays the epoch's)."""
    for m in _BEFORE.finditer(line):
        if m.start(1) in used or (m.group(6) == "") != glued:
            continue
        word = norm_key(m.group(7))
        used.add(m.start(1))
        if m.group(2):  # a range of batches (``101-200batch``): the reading is at its end
            _put(row, word, float(m.group(3)), -1, None, -1)
        else:
            _put(row, word, float(m.group(1)), m.start(1), m.group(5), m.start(5))


def _bare(line: str, row: Found, used: set[int]) -> None:
    """Counters bare: torchtune's leading ``1|25|``, in brackets, in a progress bar."""
    if (m := _LEADING.match(line)) is not None:
        _put(row, "column_1", float(m.group(1)), m.start(1), None, -1)
        _put(row, "column_2", float(m.group(2)), m.start(2), None, -1)
    elif (
        (line[:1].isdigit() or line[:1] == " ")
        and (m := _LEADING_ONE.match(line)) is not None
        and m.start(1) not in used
    ):
        _put(row, "column_1", float(m.group(1)), m.start(1), None, -1)
    k = 0
    if "[" in line or "(" in line:
        for m in _BARE.finditer(line):
            if m.start(1) in used:
                continue
            k += 1
            used.add(m.start(1))
            at = m.start(2) if m.group(2) else -1
            _put(row, f"bracket_{k}", float(m.group(1)), m.start(1), m.group(2), at)
    if "/" in line:
        for m in _RATIO.finditer(line):
            if m.start(1) in used:
                continue
            k += 1
            _put(row, f"bracket_{k}", float(m.group(1)), m.start(1), m.group(2), m.start(2))
    if "%|" in line and (m := _BAR.search(line)) is not None:
        _put(row, "bar", float(m.group(1)), m.start(1), m.group(2), m.start(2))


# -- columns: a headerless table, or rows under a header line of names -------------------

_CELL = re.compile(
    r"([-+]?+(?:\d++(?:,\d{3})*+(?:\.\d*+)?+|\.\d++)(?:[eE][-+]?+\d++)?+|[-+]?+(?:nan|inf))"
    r"(?:(/\d++)|(:\d\d(?::\d\d)?+)|([A-Za-z%]{1,3}))?+",
    re.IGNORECASE,
)
_NAME = re.compile(r"[A-Za-z_][\w/@.%()-]*+")
_SPLIT = re.compile(r"[\s|]++|,(?!\d{3}(?![\d.]))\s*+")
_TQDM_TAIL = re.compile(r":?\s*+\d++%\|")
_SYMBOLS = re.compile(r"[^\w.+-]++")
_ROW_CHARS = 4096
"""Longer lines are no rows of a table (and are not split into cells)."""


class TableHeader:
    """A header line of names (``Epoch GPU_mem box_loss ...``) for the rows of numbers under it."""

    __slots__ = ("names",)

    def __init__(self, names: list[str]) -> None:
        self.names = names


def header_of(line: str) -> TableHeader | None:
    """The names of a header line: two or more words, no numbers."""
    if len(line) > _ROW_CHARS:
        return None
    cells = [c for c in _SPLIT.split(line.strip()) if c]
    if len(cells) < 2 or len(cells) > 64 or not all(_NAME.fullmatch(c) for c in cells):
        return None
    names = [norm_key(c) for c in cells]
    if not any("loss" in n for n in names) and "epoch" in names:
        names = [f"{n}_loss" if n in _YOLO_PARTS else n for n in names]
    return TableHeader(names)


_YOLO_PARTS = frozenset({"box", "obj", "cls", "dfl", "seg", "total"})
"""YOLOv5 (to v6.0) heads its epoch rows with its loss components' bare names (``'Epoch',
'gpu_mem', 'box', 'obj', 'cls', 'total', 'labels', 'img_size'``): they are losses there."""


def table_row(line: str, header: TableHeader | None) -> Found | None:
    """A row of numbers only (a progress bar's tail aside), named by ``header`` when it has as
    many cells, else ``column_1``, ``column_2``, ...; ``None`` when the line is not one."""
    if len(line) > _ROW_CHARS:
        return None
    body = line
    if "%|" in line and (tail := _TQDM_TAIL.search(line)) is not None:
        body = line[: tail.start()]
    cells: list[tuple[str, int]] = []
    pos = 0
    for piece in _SPLIT.split(body):
        at = body.find(piece, pos) if piece else pos
        pos = at + len(piece)
        if not piece or _SYMBOLS.fullmatch(piece):
            continue  # an arrow, a bar: no cell
        cells.append((piece, at))
    if len(cells) < 2 or len(cells) > 64:
        return None
    values: list[tuple[float | None, int, str | None, int]] = []
    for piece, at in cells:
        m = _CELL.fullmatch(piece)
        if m is None:
            return None
        ratio, clock, unit = m.group(2), m.group(3), m.group(4)
        number = m.group(1).replace(",", "")
        plain = ratio is None and clock is None and unit is None and "," not in m.group(1)
        value = None if clock is not None or unit is not None else float(number)
        total = ratio[1:] if ratio is not None else None
        values.append((value, at if plain or ratio else -1, total, -1))
    names = (
        header.names
        if header is not None and len(header.names) == len(values)
        else [f"column_{i}" for i in range(1, len(values) + 1)]
    )
    row: Found = {}
    for name, (value, at, total, _) in zip(names, values, strict=True):
        if value is not None:
            _put(row, name, value, at, total, -1)
    return row or None
