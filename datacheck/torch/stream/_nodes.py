"""``torchdata.nodes`` pipelines: a tap under the ``Batcher`` names each sample in order.

A nodes pipeline has no collate hook to carry identities: samples are batched by a
``Batcher`` node and collated by whatever ``Mapper`` follows it, in the main process or its
threads, in order. The guard puts a tap between the ``Batcher`` and its source (the graph is
walked through each node's ``source``): the tap takes :class:`Failed`/:class:`Skipped` items
(from a :func:`~datacheck.torch.stream.reporting` map function) out of the stream, names each
sample, leaves quarantined ones out, and records the names in a FIFO in delivery order; the
guard takes as many names as each batch it receives has rows (as the map-style path matches
batches with the indices its sampler drew).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

from datacheck.errors import UsageError
from datacheck.torch._fetch import Fetched, LoadFailure
from datacheck.torch._identity import SampleId
from datacheck.torch._loader_config import LoaderStats
from datacheck.torch.stream._collate import Excluded, Identify, rows
from datacheck.torch.stream._items import Failed, Skipped, Tagged, failure


def _find_batcher(root: Any) -> tuple[Any, int]:
    """The one ``Batcher`` of the graph under ``root``, and how many nodes lie above it."""
    from torchdata.nodes import Batcher

    node, depth, seen = root, 0, set()
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        if isinstance(node, Batcher):
            return node, depth
        node, depth = getattr(node, "source", None), depth + 1
    raise UsageError(
        "GuardedLoader on a torchdata.nodes pipeline needs a Batcher node (its samples are "
        "named and checked per row of the batches it makes): batch with nodes.Batcher, then "
        "collate with a Mapper"
    )


def _tap_class() -> Any:
    from torchdata.nodes import BaseNode

    class Tap(BaseNode):
        """Between the ``Batcher`` and its source: see the module doc."""

        def __init__(self, source: Any, owner: NodesTap) -> None:
            super().__init__()
            self.source, self.owner = source, owner

        def reset(self, initial_state: dict[str, Any] | None = None) -> None:
            super().reset(initial_state)
            self.owner.clear()
            self.source.reset(initial_state)

        def next(self) -> Any:
            return self.owner.take(self.source)

        def get_state(self) -> dict[str, Any]:
            return self.source.state_dict()

    return Tap


class NodesTap:
    """The tap's state, shared by the tap (loading side) and the guard (batch side)."""

    def __init__(
        self,
        loader: Any,
        identify: Identify,
        catch: tuple[type[BaseException], ...],
        excluded: Excluded,
        stats: LoaderStats,
    ) -> None:
        self.loader, self.identify, self.catch, self.excluded = loader, identify, catch, excluded
        self.stats = stats
        self.ids: deque[SampleId | None] = deque()
        self.failures: deque[Failed] = deque()
        self._lock = threading.Lock()
        batcher, _depth = _find_batcher(loader.root)
        if getattr(batcher.source, "owner", None) is not self:
            batcher.source = _tap_class()(batcher.source, self)

    def clear(self) -> None:
        with self._lock:
            self.ids.clear()
            self.failures.clear()

    def take(self, source: Any) -> Any:
        """The next sample for the Batcher (failures and quarantined samples set aside)."""
        while True:
            try:
                item = next(source)
            except StopIteration:
                raise
            except self.catch as exc:
                self.failures.append(failure(exc, None, "a node above the Batcher"))
                continue
            kind = type(item)
            if kind is Failed and not self.excluded.holds(item.id):
                self.failures.append(item)
                continue
            if kind is Failed or kind is Skipped:
                self.stats.excluded += 1
                continue
            sample, id = (item.sample, item.id) if kind is Tagged else (item, self.identify(item))
            if self.excluded.holds(id):
                self.stats.excluded += 1
                continue
            self.ids.append(id)
            return sample

    def batches(self) -> Iterator[tuple[list[Any], Fetched]]:
        for batch in self.loader:
            n = rows(batch)
            if n > len(self.ids):
                raise UsageError(
                    f"GuardedLoader: a torchdata.nodes batch has {n} rows but only "
                    f"{len(self.ids)} samples reached its Batcher; the nodes after the Batcher "
                    "must keep one batch per Batcher batch and one row per sample"
                )
            ids = [self.ids.popleft() for _ in range(n)]
            failures = []
            while self.failures:
                f = self.failures.popleft()
                failures.append(LoadFailure(-1, f.id, f.error, f.trace, f.where))
            yield ids, Fetched(batch, None, [], tuple(failures))
