"""The stream libraries' own decode stages, made to report to the loader and name their samples.

Each hook runs in the process that iterates the dataset (a DataLoader worker's private copy,
or the main process for the epoch) and is undone afterwards:

- **MosaicML** ``StreamingDataset.__iter__`` maps ``self.__getitem__`` over the sample ids it
  was given; the hook (an instance attribute, which that lookup finds first) names each sample
  by its shard and row, leaves quarantined ones undecoded and returns a failure instead of
  raising (the stream goes on).
- **litdata** ``StreamingDataset.__next__`` calls ``self.__getitem__(ChunkedIndex(...))``: the
  same, naming the sample by its chunk file and row in it. litdata decodes a window of items at
  once (``batch_decode="auto"``), so one bad item fails its whole window; the hook reads a
  failed item again on its own (per-item decoding), so its neighbours survive.
  A ``CombinedStreamingDataset`` gets the hook on each of its datasets.
- **Hugging Face** ``datasets.IterableDataset``: iterated in its stead (:mod:`._hf`).
- **WebDataset** ``to_tuple``: run sample by sample, each tuple tagged with its key (:mod:`._wds`).

Also here: the library loaders' own bookkeeping (MosaicML's sample count), WebDataset's
``WebLoader`` taken apart, and ``torchdata.nodes`` loaders recognised. No library module is
imported unless the dataset or loader comes from it.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from datacheck.torch._identity import SampleId
from datacheck.torch.stream._collate import Excluded, Identify, StreamFetched
from datacheck.torch.stream._items import Skipped, Tagged, failure
from datacheck.torch.stream._source import Hook, Items
from datacheck.torch.stream._wds import TupleKeys, has_tuple_stage

Namer = Callable[[Any, Any], "SampleId | None"]
"""The identity of the sample ``dataset.__getitem__(arg)`` reads, from ``(dataset, arg)``; None
for an argument that is not the stream's own (a slice, a list, a key)."""


def _from(module: str, name: str, obj: Any) -> bool:
    """Whether ``obj`` is an instance of ``module.name`` (only when that module is loaded)."""
    mod = sys.modules.get(module)
    cls = getattr(mod, name, None) if mod is not None else None
    return isinstance(cls, type) and isinstance(obj, cls)


def _mds_name(ds: Any, sample_id: Any) -> SampleId | None:
    if not isinstance(sample_id, int | np.integer):
        return None
    shard_id, row = ds.spanner[int(sample_id)]
    shard = ds.shards[shard_id]
    stream = ds.streams[int(ds.stream_per_shard[shard_id])]
    root = stream.remote or stream.local
    return SampleId(_join(root, shard.split, shard.raw_data.basename), str(int(row)))


class _LitdataNames:
    """A litdata item's chunk file and row: ``(dataset, ChunkedIndex) -> SampleId`` (a
    :data:`Namer`); each chunk's file and first index are looked up once, not per item."""

    def __init__(self) -> None:
        self._chunks: dict[int, tuple[Any, str, int]] = {}

    def __call__(self, ds: Any, index: Any) -> SampleId | None:
        if not hasattr(index, "chunk_index"):
            return None
        config, chunk = ds.cache._reader.config, int(index.chunk_index)
        known = self._chunks.get(chunk)
        if known is None or known[0] is not config:
            start = int(config.intervals[chunk][0])
            filename = config._chunks[chunk]["filename"]
            root = getattr(ds.input_dir, "url", None) or getattr(ds.input_dir, "path", None)
            known = (config, _join(root or "", "", filename), start)
            self._chunks[chunk] = known
        return SampleId(known[1], str(int(index.index) - known[2]))

    def __getstate__(self) -> dict[str, Any]:
        return {"_chunks": {}}  # a worker looks its chunks up itself


def _litdata_alone(ds: Any, read: Callable[[], Any]) -> Any:
    """``read()`` with litdata's item loader decoding one item at a time (its public
    ``set_batch_decode``), then as before."""
    reader = getattr(getattr(ds, "cache", None), "_reader", None)
    loader = getattr(reader, "_item_loader", None)
    setter = getattr(loader, "set_batch_decode", None)
    if setter is None:
        return read()
    before = getattr(loader, "_batch_decode", "auto")
    setter(0)
    try:
        return read()
    finally:
        setter(before)


def _join(root: str, split: str, name: str) -> str:
    if "://" in root:
        return "/".join(p.strip("/") for p in (root, split, name) if p)
    return os.path.join(root, split, name)


class GetItemHook:
    """Installs a naming, catching ``__getitem__`` on a dataset instance (see the module doc)."""

    def __init__(
        self,
        name: Namer,
        catch: tuple[type[BaseException], ...],
        excluded: Excluded,
        alone: Callable[[Any, Callable[[], Any]], Any] | None = None,
    ) -> None:
        self.name, self.catch, self.excluded, self.alone = name, catch, excluded, alone

    def __call__(self, ds: Any) -> Callable[[], None]:
        own = type(ds).__getitem__
        name, catch, excluded, alone = self.name, self.catch, self.excluded, self.alone

        def getitem(arg: Any) -> Any:
            id = name(ds, arg)
            if id is None:
                return own(ds, arg)  # slices, lists, keys: not the stream's own path
            if excluded.holds(id):
                return Skipped(id)
            if not catch:
                return Tagged(own(ds, arg), id)
            try:
                return Tagged(own(ds, arg), id)
            except catch as exc:
                if alone is None:
                    return failure(exc, id)
                error = exc
            try:  # read on its own: the error may be a neighbour's, decoded together
                return Tagged(alone(ds, lambda: own(ds, arg)), id)
            except catch:
                return failure(error, id)

        ds.__dict__["__getitem__"] = getitem
        return lambda: ds.__dict__.pop("__getitem__", None)


class EachHook:
    """One hook on each dataset a mixture draws from (litdata's ``CombinedStreamingDataset``
    iterates its ``StreamingDataset`` s itself, each through its own ``__next__``): every
    sample is named by its own dataset's chunk and row, by a namer of its own (chunk numbers
    repeat across datasets). Picklable: a DataLoader worker may be spawned."""

    def __init__(self, catch: tuple[type[BaseException], ...], excluded: Excluded) -> None:
        self.catch, self.excluded = catch, excluded

    def __call__(self, ds: Any) -> Callable[[], None]:
        undo = [
            GetItemHook(_LitdataNames(), self.catch, self.excluded, _litdata_alone)(d)
            for d in _litdata_parts(ds) or []
        ]

        def undo_all() -> None:
            for u in reversed(undo):
                u()

        return undo_all


def _litdata_parts(ds: Any) -> list[Any] | None:
    """The ``StreamingDataset`` s of a litdata mixture, or None (not one, or one of others).
    ``ParallelStreamingDataset`` is none: each of its items joins one sample of every part."""
    if not _from("litdata.streaming.combined", "CombinedStreamingDataset", ds):
        return None
    parts = list(getattr(ds, "_datasets", None) or [])
    ok = parts and all(_from("litdata.streaming.dataset", "StreamingDataset", d) for d in parts)
    return parts if ok else None


def hook_for(
    dataset: Any, catch: tuple[type[BaseException], ...], excluded: Excluded
) -> Hook | None:
    """The hook of the library ``dataset`` comes from (None: a plain iterable)."""
    if _from("streaming.base.dataset", "StreamingDataset", dataset):
        return GetItemHook(_mds_name, catch, excluded)
    if _from("litdata.streaming.dataset", "StreamingDataset", dataset):
        return GetItemHook(_LitdataNames(), catch, excluded, _litdata_alone)
    if _litdata_parts(dataset) is not None:
        return EachHook(catch, excluded)
    if has_tuple_stage(dataset):  # WebDataset's to_tuple: its samples keep their key
        return TupleKeys(excluded)
    return None


def items_for(
    dataset: Any, catch: tuple[type[BaseException], ...], excluded: Excluded, identify: Identify
) -> Items | None:
    """How to iterate ``dataset`` in its stead (None: as it iterates itself)."""
    from datacheck.torch.stream._hf import hf_items, is_hf_iterable

    if is_hf_iterable(dataset):
        return functools.partial(hf_items, catch=catch, excluded=excluded, identify=identify)
    return None


def after_batch(loader: Any, fetched: StreamFetched) -> None:
    """Keep a loader's own sample count right: MosaicML's ``StreamingDataLoader`` counts what it
    yields (for ``state_dict``), which must include the samples the guard left out."""
    if _from("streaming.base.dataloader", "StreamingDataLoader", loader):
        loader.num_samples_yielded += fetched.consumed - len(fetched.ids)


def web_loader_stages(loader: Any) -> list[Any] | None:
    """A WebDataset ``WebLoader``'s pipeline (its DataLoader first), else None."""
    if not _from("webdataset.compat", "WebLoader", loader):
        return None
    from torch.utils.data import DataLoader

    stages = list(loader.pipeline)
    if not stages or not isinstance(stages[0], DataLoader):
        return None
    return stages


def is_nodes_loader(loader: Any) -> bool:
    """Whether ``loader`` is a ``torchdata.nodes.Loader``."""
    return _from("torchdata.nodes.loader", "Loader", loader)
