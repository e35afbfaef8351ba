"""Each rank its share under DDP, whoever runs the loop: how GuardedLoader draws in a world.

Trainers shard a DataLoader by rebuilding it: Lightning injects a ``DistributedSampler``,
accelerate wraps the batch sampler and builds a loader of its own. A GuardedLoader is not a
DataLoader to them (accelerate passes it through untouched, Lightning leaves it as it is), and
a rebuilt loader would lose the guard, so the GuardedLoader shards itself, once a process group
of several ranks is initialised (at its first ``len()`` or ``iter()`` there, since a trainer
builds the group after the user builds the loader):

- a ``DistributedSampler`` already in the DataLoader (or its batch sampler): kept as it is;
- the DataLoader's own samplers (``shuffle=True``/``False``): a ``DistributedSampler`` replaces
  them, shuffling as they did, with a seed every rank agrees on (rank 0's), re-seeded every
  epoch, as Lightning does;
- any other sampler: its first batch is compared across the ranks at every epoch. The same on
  every rank means every rank would read every sample: the batches are dealt out in turn (rank
  ``r`` takes batches ``r, r + W, ...``, as accelerate's ``BatchSamplerShard`` does). Different
  batches mean the sampler gives each rank its own already, and it is kept.

Every rank yields the same number of batches: a shorter share is padded with its first batch,
as ``DistributedSampler`` pads with repeated samples. ``shard=False`` keeps every rank reading
everything; ``shard=True`` refuses a sampler that cannot be sharded.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
)

from datacheck.errors import UsageError
from datacheck.torch._loader_batches import SkipIndices
from datacheck.torch._loader_config import LoaderStats

logger = logging.getLogger("datacheck.torch")

DEFAULT_SEED = 0
"""Seed of an injected DistributedSampler when the DataLoader's RandomSampler has no generator
(DistributedSampler's own default; the order still changes with every epoch)."""


@dataclass(frozen=True)
class Draw:
    """Where a GuardedLoader's batches come from, in a world of ``world`` ranks."""

    world: int
    source: Iterable[Any]
    """The batch sampler drawn from (its index lists)."""
    within: bool
    """Exclusion filters within batches, keeping their boundaries (every rank the same steps)."""
    sampler: Any
    """The sampler the batches come from (what ``GuardedLoader.sampler`` shows)."""
    injected: DistributedSampler[Any] | None = None
    """The DistributedSampler put in place of the DataLoader's own samplers."""
    compare: bool = False
    """A sampler of unknown sharding: its first batch is compared across ranks every epoch."""


def plan(
    loader: DataLoader, exclude: set[int], stats: LoaderStats, world: tuple[int, int], shard: Any
) -> Draw:
    """How to draw from ``loader`` on rank ``world[0]`` of ``world[1]``."""
    rank, size = world
    bs: Any = loader.batch_sampler
    plain = type(bs) is BatchSampler
    inner: Any = bs.sampler if plain else getattr(bs, "sampler", None)
    if size <= 1:
        if plain and not isinstance(inner, DistributedSampler):  # full batches re-formed
            batches = BatchSampler(SkipIndices(inner, exclude, stats), bs.batch_size, bs.drop_last)
            return Draw(size, batches, False, inner)
        return Draw(size, bs, True, inner)
    if isinstance(inner, DistributedSampler) or shard is False:
        return Draw(size, bs, True, inner)
    if plain and _default_sampler(inner, loader):
        sampler: DistributedSampler[Any] = DistributedSampler(
            loader.dataset,
            num_replicas=size,
            rank=rank,
            shuffle=isinstance(inner, RandomSampler),
            seed=_seed_of(inner),
        )
        batches = BatchSampler(sampler, bs.batch_size, bs.drop_last)
        return Draw(size, batches, True, sampler, injected=sampler)
    return Draw(size, bs, True, inner, compare=True)


def _default_sampler(sampler: Any, loader: DataLoader) -> bool:
    """The sampler a DataLoader builds for ``shuffle=False`` / ``shuffle=True`` (a permutation
    of the whole dataset): one a DistributedSampler can stand in for."""
    if type(sampler) is SequentialSampler:
        return True
    if type(sampler) is not RandomSampler or sampler.replacement:
        return False
    try:
        return sampler.num_samples == len(loader.dataset)  # type: ignore[arg-type]
    except TypeError:
        return False


def _seed_of(sampler: Any) -> int:
    generator = getattr(sampler, "generator", None)
    return int(generator.initial_seed()) if generator is not None else DEFAULT_SEED


def agree_seed(sampler: DistributedSampler[Any]) -> None:
    """Give the injected sampler rank 0's seed on every rank (one broadcast)."""
    box = [sampler.seed]
    dist.broadcast_object_list(box, src=0)
    sampler.seed = int(box[0])


def share_first(source: Iterable[Any], rank: int, size: int, shard: Any) -> Iterable[Any]:
    """This epoch's batches of a sampler of unknown sharding: its first batch is compared
    across the ranks (one all-gather); the same on all means it does not shard, so the batches
    are dealt out in turn; else they are kept. Every rank must call this at the same time."""
    it = iter(source)
    first = next(it, None)
    got: list[Any] = [None] * size
    dist.all_gather_object(got, None if first is None else [int(i) for i in first])
    rest: Iterator[Any] = it if first is None else _chain(first, it)
    if first is None or any(g != got[0] for g in got):
        if shard is True:
            raise UsageError(
                f"GuardedLoader(shard=True): the ranks' samplers ({type(source).__name__}) "
                "already give different batches, so they cannot be dealt out again; pass "
                "shard=None to keep them as they are"
            )
        return rest
    return Strided(rest, rank, size)


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


class Strided:
    """Batch ``rank``, ``rank + size``, ... of a sequence every rank draws alike; a share one
    batch short of the longest is padded with its first batch (every rank the same steps)."""

    def __init__(self, batches: Iterable[Any], rank: int, size: int) -> None:
        self.batches, self.rank, self.size = batches, rank, size

    def __iter__(self) -> Iterator[Any]:
        n, first = 0, None
        for batch in self.batches:
            if n % self.size == self.rank:
                first = batch if first is None else first
                yield batch
            n += 1
        if len(range(self.rank, n, self.size)) < math.ceil(n / self.size):
            yield first if first is not None else []

    def __len__(self) -> int:
        return math.ceil(len(self.batches) / self.size)  # type: ignore[arg-type]


def describe(draw: Draw, rank: int) -> None:
    """One info line on what the loader does under DDP (once, at the first epoch)."""
    if draw.injected is not None:
        logger.info(
            "rank %d of %d: GuardedLoader draws from a DistributedSampler (shuffle=%s, seed=%d) "
            "in place of the DataLoader's own sampler",
            rank,
            draw.world,
            draw.injected.shuffle,
            draw.injected.seed,
        )
