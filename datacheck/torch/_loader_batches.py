"""How GuardedLoader draws batches: the recording batch sampler, exclusion, and the ranks' agreement.

The wrapper rebuilds the user's DataLoader around a *recorded* batch sampler
(:class:`RecordedBatches`). The loader draws index lists from it in the main process, in order,
ahead of the workers (prefetching); each list is appended to a FIFO as it is drawn, and since
the DataLoader yields batches in the order their indices were drawn (``in_order=True``, the
default), the FIFO's head is always the batch that just arrived. The same sampler wrapper skips
excluded indices (one shared, mutable set), so the workers never load them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from datacheck.errors import UsageError
from datacheck.torch._loader_config import LoaderStats

SKIPPED = None
"""FIFO entry of a batch whose indices were all excluded: nothing was sent to the workers."""


class SkipIndices:
    """A sampler without the excluded indices (so full batches are re-formed)."""

    def __init__(self, sampler: Iterable[Any], exclude: set[int], stats: LoaderStats) -> None:
        self.sampler, self.exclude, self.stats = sampler, exclude, stats

    def __iter__(self) -> Iterator[Any]:
        for i in self.sampler:
            if self.exclude and int(i) in self.exclude:
                self.stats.excluded += 1
                continue
            yield i

    def __len__(self) -> int:
        return len(self.sampler)  # type: ignore[arg-type]


class RecordedBatches:
    """The loader's batch sampler, recording the indices of each batch in a FIFO."""

    def __init__(self, source: Iterable[Any], exclude: set[int], stats: LoaderStats, within: bool):
        self.source, self.exclude, self.stats, self.within = source, exclude, stats, within
        self.fifo: deque[list[int] | None] = deque()
        self._primed: Iterable[Any] | None = None

    def prime(self, batches: Iterable[Any]) -> None:
        """Draw the next epoch from ``batches`` (already started) instead of ``source``."""
        self._primed = batches

    def __iter__(self) -> Iterator[list[int]]:
        self.fifo = deque()  # one per DataLoader iterator; the guard takes it right after iter()
        source, self._primed = (self.source if self._primed is None else self._primed), None
        return self._walk(source, self.fifo)

    def _walk(self, source: Iterable[Any], fifo: deque[list[int] | None]) -> Iterator[list[int]]:
        for batch in source:
            ids = as_indices(batch)
            if self.within and self.exclude:
                kept = [i for i in ids if i not in self.exclude]
                self.stats.excluded += len(ids) - len(kept)
                ids = kept
            fifo.append(ids or SKIPPED)
            if ids:
                yield ids

    def __len__(self) -> int:
        return len(self.source)  # type: ignore[arg-type]


def as_indices(batch: Iterable[Any]) -> list[int]:
    try:
        return list(map(int, batch))
    except (TypeError, ValueError):
        raise UsageError(
            f"GuardedLoader needs integer dataset indices; the sampler gave {list(batch)[:5]!r}"
        ) from None


# --------------------------------------------------------------------------- ranks


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _collective_device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def agree(*flags: bool) -> list[bool]:
    """Each flag, true on every rank if any rank passes it true (one all-reduce)."""
    t = torch.tensor([int(f) for f in flags], dtype=torch.int32, device=_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]


def share(indices: set[Any]) -> set[Any]:
    """The union over ranks of every rank's ``indices`` (one all-gather of small lists)."""
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, sorted(indices, key=str))
    return {i if not isinstance(i, int) else int(i) for part in gathered for i in part}


# --------------------------------------------------------------------------- the DataLoader


def num_workers(loader: Any) -> int:
    """A loader's worker processes (a WebLoader's are its DataLoader's; 0 when it has none)."""
    if not isinstance(loader, DataLoader):
        loader = next(
            (s for s in getattr(loader, "pipeline", ()) if isinstance(s, DataLoader)), None
        )
    return int(getattr(loader, "num_workers", 0) or 0)


def refuse_unguardable(loader: Any) -> None:
    """Refuse a map-style loader the guard cannot match with its indices."""
    if not isinstance(loader, DataLoader):
        raise UsageError(
            f"GuardedLoader wraps a torch DataLoader (map-style or over an IterableDataset), "
            f"WebDataset's WebLoader or a torchdata.nodes Loader, not {type(loader).__name__}"
        )
    if type(loader).__module__.split(".")[0] == "accelerate":
        raise UsageError(
            f"GuardedLoader wraps the DataLoader you give accelerate, not the "
            f"{type(loader).__name__} accelerator.prepare() returns (rebuilt, it would lose "
            "accelerate's sharding and seeding): use accelerator.prepare(GuardedLoader("
            "DataLoader(...), device=accelerator.device)); GuardedLoader shards itself across "
            "the processes, and accelerate passes it through"
        )
    if loader.batch_sampler is None:
        raise UsageError(
            "GuardedLoader needs batches: build the DataLoader with batch_size or batch_sampler"
        )
    if not getattr(loader, "in_order", True):
        raise UsageError(
            "GuardedLoader needs in_order=True: batches must arrive in the order their indices "
            "were drawn to be matched with them"
        )


def rebuild(loader: DataLoader, batches: RecordedBatches, dataset: Any, collate: Any) -> DataLoader:
    """The same DataLoader, drawing from the recorded batch sampler, ``dataset`` and ``collate``."""
    kwargs: dict[str, Any] = {
        "batch_sampler": batches,
        "num_workers": loader.num_workers,
        "collate_fn": collate,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    if loader.pin_memory_device:
        kwargs["pin_memory_device"] = loader.pin_memory_device
    if hasattr(loader, "in_order"):
        kwargs["in_order"] = loader.in_order
    return DataLoader(dataset, **kwargs)
