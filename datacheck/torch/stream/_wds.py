"""WebDataset's ``to_tuple``: its fields name the batch's positions, and its samples keep their key.

``.to_tuple("jpg", "cls")`` turns each sample dict into a tuple, dropping ``__key__`` and
``__url__``: the batch would be checked as ``item 0``, ``item 1`` and its bad samples recorded
unnamed. So:

- :func:`tuple_names` reads the fields off the pipeline's last ``to_tuple`` stage (``jpg``,
  ``cls``) when only stages that keep the positions follow it (``map_tuple``, ``shuffle``,
  ``batched``);
- :class:`TupleKeys` (a hook, installed where the dataset is iterated) runs that stage sample by
  sample and tags each tuple with its sample's key and shard; the ``map_tuple``, ``map`` and
  ``shuffle`` stages after it carry the tag along, and a last ``batched`` stage makes each batch
  from the tagged samples as it would (its own size, ``partial`` and collation) and hands it on
  as a :class:`~datacheck.torch.stream._items.TaggedBatch` with its rows' names, quarantined
  samples left out before the batch is made. After any other stage the samples go untagged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from datacheck.torch._identity import SampleId
from datacheck.torch.stream._items import Tagged, TaggedBatch

_KEEP_POSITIONS = frozenset({"_map_tuple", "_shuffle", "_batched"})
"""Stages after ``to_tuple`` that keep its positions (names hold)."""
_ITEMWISE = frozenset({"_map_tuple", "_map", "_shuffle"})
"""Stages after ``to_tuple`` that take one item at a time (a tag can be carried through)."""


def _stage(stage: Any) -> str | None:
    """The name of a WebDataset ``FilterFunction`` stage's function (``_to_tuple``, ...)."""
    return getattr(getattr(stage, "f", None), "__name__", None)


def _tuple_at(dataset: Any, allowed: frozenset[str], last: str | None = None) -> int | None:
    """Where the last ``to_tuple`` of a WebDataset pipeline is, when only ``allowed`` stages
    follow it (and, given ``last``, that stage at the very end); None otherwise (or for
    anything that is not a WebDataset pipeline)."""
    pipeline = getattr(dataset, "pipeline", None)
    if type(dataset).__module__.split(".")[0] != "webdataset" or not isinstance(pipeline, list):
        return None
    names = [_stage(s) for s in pipeline]
    if "_to_tuple" not in names:
        return None
    at = len(names) - 1 - names[::-1].index("_to_tuple")
    after = names[at + 1 :]
    if last is not None and after and after[-1] == last:
        after = after[:-1]
    return at if all(n in allowed for n in after) else None


def tuple_names(dataset: Any) -> tuple[str, ...]:
    """The fields of the pipeline's ``to_tuple`` (``("jpg", "cls")``), or ``()``."""
    at = _tuple_at(dataset, _KEEP_POSITIONS)
    if at is None:
        return ()
    return tuple(str(a) for a in dataset.pipeline[at].args)


def _id_of(sample: Any) -> SampleId | None:
    key = sample.get("__key__") if isinstance(sample, dict) else None
    if key is None:
        return None
    url = sample.get("__url__")
    return SampleId(None if url is None else str(url), str(key))


def _tagging(stage: Callable[[Iterable[Any]], Iterator[Any]]) -> Callable[..., Iterator[Any]]:
    """``stage`` run on each sample alone, its outputs tagged with that sample's key."""

    def run(data: Iterable[Any]) -> Iterator[Any]:
        for sample in data:
            id = _id_of(sample)
            for out in stage([sample]):
                yield out if id is None else Tagged(out, id)

    return run


def _carrying(stage: Callable[[Iterable[Any]], Iterator[Any]]) -> Callable[..., Iterator[Any]]:
    """An item-wise ``stage`` applied to the sample inside each tag, the tag kept."""

    def run(data: Iterable[Any]) -> Iterator[Any]:
        for item in data:
            if type(item) is Tagged:
                for out in stage([item.sample]):
                    yield Tagged(out, item.id)
            else:
                yield from stage([item])

    return run


def _batching(stage: Any, excluded: Any) -> Callable[..., Iterator[Any]]:
    """WebDataset's ``batched`` stage over tagged samples: each batch made by the stage itself
    from exactly its samples, tagged with their names; quarantined ones left out first."""
    size = int(stage.args[0] if stage.args else stage.kw.get("batchsize", 20))
    partial = bool(stage.kw.get("partial", True))

    def run(data: Iterable[Any]) -> Iterator[Any]:
        group: list[Any] = []
        ids: list[SampleId | None] = []
        skipped = 0
        for item in data:
            if type(item) is Tagged:
                if excluded and excluded.holds(item.id):
                    skipped += 1
                    continue
                group.append(item.sample)
                ids.append(item.id)
            else:
                group.append(item)
                ids.append(None)
            if len(group) == size:
                yield TaggedBatch(next(iter(stage(group))), tuple(ids), skipped)
                group, ids, skipped = [], [], 0
        if group and partial:
            yield TaggedBatch(next(iter(stage(group))), tuple(ids), skipped)

    return run


class TupleKeys:
    """A hook: the dataset's ``to_tuple`` stage (and the item-wise stages after it) tag each
    sample with its ``__key__`` and ``__url__``, and a last ``batched`` stage tags its batches
    (leaving ``excluded`` out); returns the undo."""

    def __init__(self, excluded: Any = None) -> None:
        self.excluded = excluded

    def __call__(self, dataset: Any) -> Callable[[], None]:
        at = _tuple_at(dataset, _ITEMWISE, last="_batched")
        if at is None:
            return lambda: None
        own = dataset.pipeline
        after = []
        for s in own[at + 1 :]:
            name = _stage(s)
            if name == "_batched":
                after.append(_batching(s, self.excluded))
            else:
                after.append(s if name == "_shuffle" else _carrying(s))
        dataset.pipeline = [*own[:at], _tagging(own[at]), *after]

        def undo() -> None:
            dataset.pipeline = own

        return undo


def has_tuple_stage(dataset: Any) -> bool:
    """Whether :class:`TupleKeys` has a ``to_tuple`` stage to tag in ``dataset``."""
    return _tuple_at(dataset, _ITEMWISE, last="_batched") is not None
