"""How a stream loader is wired for the guard, and its batches unpacked in the main process.

A ``torch.utils.data.DataLoader`` (or a subclass: MosaicML's and litdata's
``StreamingDataLoader``) is *copied*, never rebuilt, so every option and the subclass's own
bookkeeping (resumption state) stay; the copy collates with :class:`StreamCollate`. On a plain
``DataLoader`` the dataset is also wrapped in :class:`StreamSource` (errors from ``next()``
become failures); a subclass checks its dataset's type, so its dataset stays, and a library hook
(the stream's own decode stage reporting to the loader, see :mod:`._hooks`) is installed in each
worker (``worker_init_fn``) or, without workers, around the epoch.

WebDataset's ``WebLoader`` is a DataLoader followed by pipeline stages: the DataLoader is
guarded and the stages run on the batches it yields. ``torchdata.nodes`` loaders: see
:mod:`._nodes`.
"""

from __future__ import annotations

import copy
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from datacheck.errors import UsageError
from datacheck.torch._checks import RulesFor
from datacheck.torch._fetch import Fetched, LoadFailure
from datacheck.torch._identity import SampleId
from datacheck.torch._loader_config import LoaderStats
from datacheck.torch.stream import _hooks
from datacheck.torch.stream._collate import (
    Excluded,
    Identify,
    KeyFn,
    StreamCollate,
    StreamFetched,
)
from datacheck.torch.stream._items import Failed
from datacheck.torch.stream._nodes import NodesTap
from datacheck.torch.stream._source import Hook, StreamSource
from datacheck.torch.stream._wds import tuple_names

logger = logging.getLogger("datacheck.torch")


def is_stream(loader: Any) -> bool:
    """Whether ``loader`` streams (no dataset indices): a DataLoader over an IterableDataset,
    a WebDataset ``WebLoader`` or a ``torchdata.nodes`` loader."""
    if isinstance(loader, DataLoader):
        return isinstance(loader.dataset, IterableDataset)
    return _hooks.web_loader_stages(loader) is not None or _hooks.is_nodes_loader(loader)


class _WorkerInit:
    """The user's ``worker_init_fn``, after the library hook is installed on the worker's copy."""

    def __init__(self, hook: Hook, user: Callable[[int], None] | None) -> None:
        self.hook, self.user = hook, user

    def __call__(self, worker_id: int) -> None:
        info = get_worker_info()
        if info is not None:
            self.hook(info.dataset)
        if self.user is not None:
            self.user(worker_id)


class StreamSide:
    """The stream half of a :class:`~datacheck.torch.GuardedLoader`.

    Args:
        loader: the user's stream loader.
        key_fn: the user's ``key_fn(sample)`` (None: the pipeline's own identities).
        catch: exceptions that make a sample a load error (``()``: none caught).
        rules_for: flag in the collate (workers); None: the main process checks.
        excluded: identities never to deliver (the quarantine, ``exclude=``, this run's finds).
    """

    def __init__(
        self,
        loader: Any,
        key_fn: KeyFn | None,
        catch: tuple[type[BaseException], ...],
        rules_for: RulesFor | None,
        excluded: Excluded,
        stats: LoaderStats,
    ) -> None:
        self.excluded, self.identify, self.catch = excluded, Identify(key_fn), catch
        self.stats = stats
        self.stages: list[Any] = []
        self.repetitions, self.nsamples = 1, -1
        self.names: tuple[str, ...] = ()
        """The pipeline's names of a tuple batch's positions (WebDataset's ``to_tuple``)."""
        self._main_hook: Hook | None = None
        self._nodes: Any = None
        if _hooks.is_nodes_loader(loader):
            self._nodes = NodesTap(loader, self.identify, catch, excluded, stats)
            self.loader: Any = loader
            return
        stages = _hooks.web_loader_stages(loader)
        if stages is not None:  # its .repeat() / .with_epoch(n) too
            self.repetitions, self.nsamples = loader.repetitions, loader.nsamples
            loader, self.stages = stages[0], stages[1:]
        self.loader = self._wire(loader, rules_for)

    def _wire(self, loader: DataLoader, rules_for: RulesFor | None) -> DataLoader:
        hook = _hooks.hook_for(loader.dataset, self.catch, self.excluded)
        self.names = tuple_names(loader.dataset)
        out = copy.copy(loader)
        out._iterator = None
        out.collate_fn = StreamCollate(
            loader.collate_fn,
            self.identify,
            rules_for,
            self.excluded,
            loader._auto_collation,
            self.names,
        )
        if type(loader) is DataLoader:
            items = _hooks.items_for(loader.dataset, self.catch, self.excluded, self.identify)
            source = StreamSource(loader.dataset, self.catch, hook, self.identify, items)
            object.__setattr__(out, "dataset", source)  # past DataLoader's guard on `dataset`
        elif hook is not None and loader.num_workers > 0:
            out.worker_init_fn = _WorkerInit(hook, loader.worker_init_fn)
        elif hook is not None:
            self._main_hook = hook
        return out

    @property
    def num_workers(self) -> int:
        return int(getattr(self.loader, "num_workers", 0))

    def batches(self) -> Iterator[tuple[list[Any], Fetched]]:
        """``(identities, fetched)`` of each batch, in the order the loader yields them."""
        if self._nodes is not None:
            yield from self._nodes.batches()
            return
        with self._hooked():
            for out in self.loader:
                if not isinstance(out, StreamFetched):
                    raise UsageError(
                        "GuardedLoader: the stream loader yielded a batch its collate_fn did "
                        "not make; build the loader with its collate_fn before wrapping it"
                    )
                self.stats.excluded += out.skipped
                failures = self._new(out.failures)
                yield out.ids, Fetched(out.batch, out.flags, out.keys, _failures(failures))
                _hooks.after_batch(self.loader, out)

    def _new(self, failures: tuple[Failed, ...]) -> tuple[Failed, ...]:
        """Failures not already excluded (a worker started before they were found reports
        them again); those count as excluded."""
        if not failures or not self.excluded:
            return failures
        new = tuple(f for f in failures if not self.excluded.holds(f.id))
        self.stats.excluded += len(failures) - len(new)
        return new

    @contextmanager
    def _hooked(self) -> Iterator[None]:
        undo = self._main_hook(self.loader.dataset) if self._main_hook is not None else None
        try:
            yield
        finally:
            if undo is not None:
                undo()

    def set_epoch(self, epoch: int) -> None:
        """Forward the epoch to the dataset (HF and litdata reshuffle by it)."""
        dataset = getattr(self.loader, "dataset", None)
        if dataset is not None and hasattr(dataset, "set_epoch"):
            dataset.set_epoch(epoch)

    def staged(self, batches: Iterable[Any]) -> Iterable[Any]:
        """WebLoader's stages after its DataLoader, run on the guarded batches (as
        ``DataPipeline.invoke`` runs them)."""
        for stage in self.stages:
            batches = stage.run(batches) if hasattr(stage, "run") else stage(batches)
        return batches

    def passes(self, epoch: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        """WebLoader's repetitions of the staged epochs, cut at ``with_epoch``'s count (as
        ``DataPipeline.__iter__``)."""

        def repeated() -> Iterator[Any]:
            for _ in range(self.repetitions):
                count = 0
                for batch in self.staged(epoch()):
                    count += 1
                    yield batch
                if count == 0:
                    return

        it = repeated()
        if self.repetitions != 1 and self.nsamples > 0:
            return itertools.islice(it, self.nsamples)
        return it


def _failures(items: tuple[Failed, ...]) -> tuple[LoadFailure, ...]:
    return tuple(LoadFailure(-1, f.id, f.error, f.trace, f.where) for f in items)


def stream_ids(values: Iterable[Any]) -> set[SampleId]:
    """Identities a user or a guard passes to ``exclude()``: SampleIds, or keys (any source)."""
    out: set[SampleId] = set()
    for v in values:
        if isinstance(v, SampleId):
            out.add(v)
        elif isinstance(v, str | int) and not isinstance(v, bool):
            out.add(SampleId(None, str(v)))
        else:
            raise UsageError(f"exclude: {v!r} is not a stream sample's key")
    return out
