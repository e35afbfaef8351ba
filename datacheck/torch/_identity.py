"""What names a sample across runs: a dataset index, a stream key, or a key within a source.

Three shapes reach the quarantine, from the loader and from :class:`TrainingGuard`:

- an ``int``: a map-style dataset index (what the sampler handed out);
- a ``str``: a key the pipeline or the user gave (WebDataset's ``__key__``, a ``key_fn``), kept
  as text (``'000007'`` is not index 7);
- a :class:`SampleId`: a key within a named source (a shard, chunk or file and the sample's key
  or row in it), what streams record.

Each becomes the record fields ``index`` / ``sample`` / ``source`` (:func:`record_fields`).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from datacheck.errors import UsageError


@dataclass(frozen=True, slots=True)
class SampleId:
    """A stream sample's identity: its key (or row) within a source (shard, chunk, file)."""

    source: str | None
    """The shard, chunk or file the sample comes from (None: the key is unique on its own)."""
    sample: str
    """The sample's key, or its row within ``source``, as text."""

    def __str__(self) -> str:
        return self.sample if self.source is None else f"{self.source}#{self.sample}"


SampleKey = int | str | SampleId
"""How a sample is named: a dataset index, a key, or a :class:`SampleId`."""


def as_sample_key(value: Any) -> SampleKey:
    """A sample's name from what a loader or a user passes: integers (Python, NumPy, 0-d torch)
    are dataset indices, text is a key (never parsed as a number), :class:`SampleId` stays."""
    if isinstance(value, SampleId | str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        return int(value.item())
    if isinstance(value, numbers.Integral | np.integer) and not isinstance(value, bool):
        return int(value)
    raise UsageError(
        f"a sample is named by a dataset index (int) or a key (str), not {value!r} "
        f"({type(value).__name__})"
    )


def as_sample_keys(values: Any) -> list[SampleKey]:
    """:func:`as_sample_key` of each value (a 1-d integer tensor or array is a list of indices)."""
    if isinstance(values, torch.Tensor | np.ndarray):
        values = values.reshape(-1).tolist()
    values = list(values)
    if all(type(v) is int or type(v) is str for v in values):  # the common case: as they are
        return values
    return [as_sample_key(v) for v in values]


def record_fields(key: SampleKey) -> dict[str, Any]:
    """The quarantine fields naming ``key``: ``index``, or ``sample`` (and ``source``)."""
    if isinstance(key, SampleId):
        return {"index": None, "sample": key.sample, "source": key.source}
    if isinstance(key, str):
        return {"index": None, "sample": key, "source": None}
    return {"index": int(key), "sample": None, "source": None}


def json_key(key: SampleKey) -> int | str:
    """``key`` as a JSON value for logs (an index stays a number)."""
    return key if isinstance(key, int | str) else str(key)
