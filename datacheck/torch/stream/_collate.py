"""Where a stream's samples become a batch: identities, failures and quarantined samples split
off, the user's collate over the rest, and (optionally) the flagging pass.

:class:`StreamCollate` replaces the loader's ``collate_fn``; it runs where the DataLoader
collates (a worker, or the main process) and returns one :class:`StreamFetched`, which the main
process unpacks.  Its first field is the list of identities, one per row of the batch, so a
loader that measures a batch by ``len(batch[0])`` (MosaicML's ``StreamingDataLoader``) counts
the samples it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import torch

from datacheck.errors import UsageError
from datacheck.torch._checks import RulesFor, flag_leaves, leaves
from datacheck.torch._identity import SampleId
from datacheck.torch.stream._items import Failed, Skipped, Tagged, TaggedBatch, drain

KEY_FIELD = "__key__"
"""The field of a sample (or of a batch) that names it, as WebDataset writes it."""
URL_FIELD = "__url__"
"""The field naming the shard a sample came from, as WebDataset writes it."""

KeyFn = Callable[[Any], Any]
"""A user's ``key_fn(sample)``: a key (str or int), or a ``(source, key)`` pair."""


def as_sample_id(key: Any) -> SampleId:
    """A ``key_fn`` result as a :class:`SampleId`."""
    if isinstance(key, SampleId):
        return key
    if isinstance(key, tuple) and len(key) == 2:
        return SampleId(None if key[0] is None else str(key[0]), str(key[1]))
    if isinstance(key, bytes):
        key = key.decode("utf-8", "replace")
    if isinstance(key, str | int):
        return SampleId(None, str(key))
    raise UsageError(
        f"key_fn returned {key!r} ({type(key).__name__}): return a str or int key, or a "
        "(source, key) pair"
    )


class Identify:
    """A stream sample's identity: ``key_fn(sample)``, else its ``__key__`` (and ``__url__``)."""

    def __init__(self, key_fn: KeyFn | None) -> None:
        self.key_fn = key_fn

    def __call__(self, sample: Any) -> SampleId | None:
        if self.key_fn is not None:
            return as_sample_id(self.key_fn(sample))
        if isinstance(sample, Mapping):
            key = sample.get(KEY_FIELD)
            if key is not None:
                url = sample.get(URL_FIELD)
                return SampleId(None if url is None else str(url), str(key))
        return None


class Excluded:
    """Stream identities never to deliver; a key recorded without a source matches any source."""

    def __init__(self, ids: Iterable[SampleId] = ()) -> None:
        self.ids: set[SampleId] = set(ids)

    def __bool__(self) -> bool:
        return bool(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[SampleId]:
        return iter(self.ids)

    def __contains__(self, id: object) -> bool:
        return isinstance(id, SampleId) and self.holds(id)

    def __ior__(self, ids: Iterable[SampleId]) -> Excluded:
        self.add(ids)
        return self

    def clear(self) -> None:
        self.ids.clear()

    def add(self, ids: Iterable[SampleId]) -> set[SampleId]:
        """Add ``ids``; returns the ones that were new."""
        new = set(ids) - self.ids
        self.ids |= new
        return new

    def holds(self, id: SampleId | None) -> bool:
        if id is None or not self.ids:
            return False
        return id in self.ids or (id.source is not None and SampleId(None, id.sample) in self.ids)


class StreamFetched(NamedTuple):
    """A stream batch as the guarded DataLoader yields it to the main process."""

    ids: list[SampleId | None]
    """The identity of each row of ``batch`` (None: the pipeline names it nowhere)."""
    batch: Any
    """The user's collated batch (None: no sample of it loaded)."""
    flags: torch.Tensor | None
    """Per-leaf, per-sample flags computed where it was collated (None: not flagged, or clean)."""
    keys: list[str]
    """Leaf keys of the rows of ``flags``."""
    failures: tuple[Failed, ...]
    """Samples that failed to load since the previous batch of this process."""
    skipped: int
    """Quarantined samples left out of this batch."""
    consumed: int
    """Items taken from the stream for this batch (samples, failures and skipped ones)."""


class StreamCollate:
    """The user's collate over a stream's samples, with their identities split off.

    Args:
        collate: the loader's ``collate_fn``.
        identify: the identity of a plain sample.
        rules_for: run the flagging pass here (None: the main process checks).
        exclude: identities to leave out (the quarantine and this run's finds).
        batched: the DataLoader batches (``batch_size`` set) and hands a list of samples; else
            each item is already a batch (``batch_size=None``, e.g. WebDataset's ``.batched``).
        names: the pipeline's names of a tuple batch's positions (see ``map_leaves``).
    """

    def __init__(
        self,
        collate: Callable[[Any], Any],
        identify: Identify,
        rules_for: RulesFor | None,
        exclude: Excluded,
        batched: bool,
        names: tuple[str, ...] = (),
    ) -> None:
        self.collate, self.identify, self.rules_for = collate, identify, rules_for
        self.exclude, self.batched, self.names = exclude, batched, names

    def __call__(self, items: Any) -> StreamFetched:
        if not self.batched:
            return self._prebatched(items)
        samples: list[Any] = []
        ids: list[SampleId | None] = []
        failures, skipped = self._reported()
        for item in items:
            kind = type(item)
            if kind is Tagged:  # the user's key_fn, when given, names it instead
                sample = item.sample
                id = item.id if self.identify.key_fn is None else self.identify(sample)
            elif kind is Failed:
                if self.exclude and self.exclude.holds(item.id):
                    skipped += 1  # quarantined already: not a new failure
                else:
                    failures.append(item)
                continue
            elif kind is Skipped:
                skipped += 1
                continue
            else:
                sample, id = item, self.identify(item)
            if self.exclude and self.exclude.holds(id):
                skipped += 1
                continue
            samples.append(sample)
            ids.append(id)
        batch = self.collate(samples) if samples else None
        return self._fetched(ids, batch, failures, skipped, len(items))

    def _reported(self) -> tuple[list[Failed], int]:
        """Failures a handler reported here since the last batch; known ones count as skipped
        (a WebDataset that reads the quarantined sample again reports it again)."""
        reported = drain()
        if not (reported and self.exclude):
            return reported, 0
        new = [f for f in reported if not self.exclude.holds(f.id)]
        return new, len(reported) - len(new)

    def _prebatched(self, item: Any) -> StreamFetched:
        failures, skipped = self._reported()
        if type(item) is Failed:
            if self.exclude and self.exclude.holds(item.id):
                return StreamFetched([], None, None, [], tuple(failures), skipped + 1, 1)
            return StreamFetched([], None, None, [], (*failures, item), skipped, 1)
        if type(item) is TaggedBatch:  # made in the pipeline from named samples
            batch = self.collate(item.batch)
            ids = list(item.ids)
            if len(ids) != rows(batch):  # a collation that does not keep rows: unnamed
                ids = [None] * rows(batch)
            consumed = len(item.ids) + item.skipped
            return self._fetched(ids, batch, failures, skipped + item.skipped, consumed)
        if type(item) is Tagged:
            item = item.sample
        batch = self.collate(item)
        return self._fetched(batch_ids(batch), batch, failures, skipped, 1)

    def _fetched(
        self,
        ids: list[SampleId | None],
        batch: Any,
        failures: list[Failed],
        skipped: int,
        consumed: int,
    ) -> StreamFetched:
        flags, keys = None, []
        if batch is not None and self.rules_for is not None:
            checked, found = flag_leaves(batch, len(ids), self.rules_for, self.names)
            flags = torch.stack(found) if found else None
            keys = [c.key for c in checked]
        return StreamFetched(ids, batch, flags, keys, tuple(failures), skipped, consumed)


def batch_ids(batch: Any) -> list[SampleId | None]:
    """The identities of a batch's rows from its ``__key__`` (and ``__url__``) leaves."""
    if isinstance(batch, Mapping) and isinstance(batch.get(KEY_FIELD), Sequence):
        keys = batch[KEY_FIELD]
        urls = batch.get(URL_FIELD)
        if not isinstance(urls, Sequence) or len(urls) != len(keys):
            urls = [None] * len(keys)
        return [
            SampleId(None if u is None else str(u), str(k)) for k, u in zip(keys, urls, strict=True)
        ]
    return [None] * rows(batch)


def rows(batch: Any) -> int:
    """The number of rows of a batch: the first dimension of its first tensor or list leaf."""
    for _key, leaf in leaves(batch):
        if isinstance(leaf, torch.Tensor) and leaf.ndim > 0:
            return int(leaf.shape[0])
        if isinstance(leaf, list | tuple):
            return len(leaf)
    return 1
