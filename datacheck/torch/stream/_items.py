"""What a guarded stream carries besides samples, from where they are loaded to the collate.

A library hook or a reporting decode stage puts these in the stream in place of a sample:

- :class:`Tagged`: a sample with the identity its pipeline gave it (MDS shard and row, litdata
  chunk and index, ...);
- :class:`Failed`: a sample whose loading raised, named where that is known;
- :class:`Skipped`: a sample the quarantine holds, dropped before it was decoded;
- :class:`TaggedBatch`: a batch the pipeline made itself, with the identities of its rows.

Errors that a pipeline reports through a hook instead (WebDataset's ``handler=``) go to the
*inbox* of the process they happen in (:func:`report`); the next collate in that process takes
them (:func:`drain`), so they reach the main process with the next batch.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

from datacheck.torch._identity import SampleId

_MESSAGE_LIMIT = 500
"""Characters of an exception's message kept in a record."""


@dataclass(frozen=True, slots=True)
class Tagged:
    """A sample with its identity."""

    sample: Any
    id: SampleId


@dataclass(frozen=True, slots=True)
class Failed:
    """A sample that could not be loaded."""

    id: SampleId | None
    """The sample, when the pipeline names it (None: only ``where`` is known)."""
    error: str
    """``Type: message`` of the exception (the record's value)."""
    trace: str
    """The formatted traceback (for logs and ``on_bad='raise'``)."""
    where: str | None = None
    """The shard or position it happened at, when the sample itself is not named."""


@dataclass(frozen=True, slots=True)
class TaggedBatch:
    """A batch made inside the pipeline (WebDataset's ``.batched``), with each row's identity
    and how many quarantined samples were left out of it before it was made."""

    batch: Any
    ids: tuple[SampleId | None, ...]
    skipped: int = 0


@dataclass(frozen=True, slots=True)
class Skipped:
    """A quarantined sample, left out before it was decoded."""

    id: SampleId


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception, cut to a record's size (its cause when it has none)."""
    if not str(exc) and exc.__cause__ is not None:
        exc = exc.__cause__
    text = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."


def failure(exc: BaseException, id: SampleId | None, where: str | None = None) -> Failed:
    """The :class:`Failed` item of ``exc``."""
    trace = "".join(traceback.format_exception(exc))
    return Failed(id, describe(exc), trace, where)


_INBOX: list[Failed] = []


def report(item: Failed) -> None:
    """Hand a failure to the next batch collated in this process."""
    _INBOX.append(item)


def drain() -> list[Failed]:
    """The failures reported in this process since the last call."""
    if not _INBOX:
        return []
    out = list(_INBOX)
    _INBOX.clear()
    return out
