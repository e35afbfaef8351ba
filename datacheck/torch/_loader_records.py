"""What a GuardedLoader writes and logs for a bad batch: one quarantine record per bad or
unloadable sample (its identity, the check, the leaf, the value), and one warning line per kind.

A record names a map-style sample by its dataset index, its file and row (or key, or content
fingerprint) and the dataset's fingerprint (:mod:`._map_identity`); a stream sample by the
identity its pipeline gives it (:mod:`datacheck.torch.stream`). The leaf is named as the batch
names it: dotted paths (``inputs.1.0``), ``item 0`` for the positions of a tuple batch, or the
pipeline's own field names (WebDataset's ``to_tuple``).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from datacheck.checks._registry import LOAD_ERROR
from datacheck.torch._checks import SampleFinding, row_of
from datacheck.torch._fetch import LoadFailure
from datacheck.torch._identity import record_fields
from datacheck.torch._loader_run import Job, named_as, show

logger = logging.getLogger("datacheck.torch")


class Recorded(Protocol):
    """What the records need from the loader."""

    epoch: int
    _stream: Any
    """The stream side (None: map-style)."""
    identity: Any
    """A map-style sample's identity fields (``MapIdentity``)."""

    def _where(self, f: LoadFailure) -> str | None: ...


def names(g: Recorded, name: Any, row: Any) -> dict[str, Any]:
    """The identity fields of a record: a stream's name; a map sample's index, its file and
    row (or key, or content fingerprint of its ``row`` of the batch) and the dataset's
    fingerprint."""
    if g._stream is not None or name is None:
        if name is None:
            return {"index": None, "sample": None, "source": None}
        return record_fields(name)
    return {"index": int(name), **g.identity.fields(int(name), row)}


def finding_record(g: Recorded, job: Job, f: SampleFinding, head: dict[str, Any]) -> dict[str, Any]:
    """The record of a check that failed on one sample of ``job``'s batch."""
    row = row_of(job.batch, f.pos) if g._stream is None else None
    return {
        **names(g, job.indices[f.pos], row),
        "check": f.check,
        "severity": f.severity.value,
        "key": f.key,
        "value": f.value,
        "count": f.count,
        **head,
    }


def failure_record(g: Recorded, f: LoadFailure, head: dict[str, Any]) -> dict[str, Any]:
    """The record of a sample that failed to load (``key``: its file, or stream position)."""
    return {
        **names(g, f.index, None),
        "check": LOAD_ERROR.name,
        "severity": LOAD_ERROR.severity.value,
        "key": g._where(f),
        "value": f.error,
        "count": 1,
        **head,
    }


def log_bad(
    g: Recorded, job: Job, findings: list[SampleFinding], bad: list[Any], rank: int
) -> None:
    """One warning for the batch's load failures, one for its bad values."""
    what = "samples" if g._stream is not None else "dataset indices"
    if job.failures:
        f = job.failures[0]
        where = g._where(f)
        logger.warning(
            "rank %d epoch %d step %d: %d sample(s) failed to load, %s %s (first: %s%s: %s)",
            rank,
            g.epoch,
            job.step,
            len(job.failures),
            what,
            [show(x.index) for x in job.failures][:20],
            named_as(g, f.index),
            f" {where!r}" if where else "",
            f.error,
        )
    if findings:
        first = findings[0]
        logger.warning(
            "rank %d epoch %d step %d: %d bad sample(s), %s %s (first: %s in %r, value %s)",
            rank,
            g.epoch,
            job.step,
            len({f.pos for f in findings}),
            what,
            [show(b) for b in bad[:20]],
            first.check,
            first.key,
            first.value,
        )
