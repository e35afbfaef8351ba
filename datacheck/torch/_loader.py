"""GuardedLoader: re-check each batch where it will be used and quarantine bad samples.

How a batch's dataset indices are known without touching the Dataset: the wrapper rebuilds the
user's DataLoader around a *recorded* batch sampler (:class:`_RecordedBatches`).  The loader
draws index lists from it in the main process, in order, ahead of the workers (prefetching);
each list is appended to a FIFO as it is drawn, and since the DataLoader yields batches in the
order their indices were drawn (``in_order=True``, the default), the FIFO's head is always the
batch that just arrived.  The same sampler wrapper skips quarantined indices, so the workers
never load them.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, IterableDataset

from datacheck.checks._registry import FP16_MAX, OUT_OF_RANGE
from datacheck.checks._rules import Range
from datacheck.errors import BadSampleError, UsageError
from datacheck.torch._checks import (
    CheckingCollate,
    LeafRules,
    PendingCheck,
    SampleFinding,
    launch_check,
    take,
    worker_check,
)
from datacheck.torch._checks import to_device as _to_device
from datacheck.torch._quarantine import QuarantineWriter, quarantined_indices

logger = logging.getLogger("datacheck.torch")

ON_BAD = ("drop", "raise", "skip_batch")
_SKIPPED = None
"""FIFO entry of a batch whose indices were all quarantined: nothing was sent to the workers."""


@dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    """What :class:`GuardedLoader` checks and what it does with bad samples."""

    quarantine: str | os.PathLike[str] | None = None
    """Folder of the per-rank append-only manifests (None: nothing written)."""
    device: str | torch.device | None = None
    """Where to check; batches are moved there and yielded there (None: left where they are)."""
    on_bad: str = "drop"
    """``drop`` the bad samples, ``raise`` BadSampleError, or ``skip_batch`` (whole batch)."""
    max_abs: float | None | Mapping[str, float | None] = FP16_MAX
    """Bound on |x| of floating leaves (``extreme``); or per key / glob pattern; None: none."""
    ranges: Mapping[str, tuple[float | None, float | None] | Range] = field(default_factory=dict)
    """Inclusive ``(min, max)`` per key or glob pattern (``out_of_range``), e.g. token ids."""
    skip_quarantined: bool = True
    """Do not load indices the quarantine folder already holds (sampler-level filtering)."""
    exclude: Iterable[int] = frozenset()
    """More dataset indices never to load, e.g. from :func:`indices_from_scan`."""
    allow_empty: bool = False
    """With ``drop``, yield a zero-size batch instead of skipping a batch that lost every sample."""
    deferred: bool = False
    """Resolve each batch one batch later so the host never waits on the check (lags one step)."""
    coordinate: bool | None = None
    """All-reduce each batch's skip flag so all ranks skip together; None: auto under DDP."""
    check_in_workers: bool | None = None
    """Flag bad samples in the DataLoader workers; None: when batches stay on CPU with workers."""
    fsync: bool = False
    """fsync the manifest after each bad batch (survives power loss, not just a crash)."""
    non_blocking: bool = True
    """Copy batches to ``device`` with ``non_blocking`` (asynchronous from pinned memory)."""

    def __post_init__(self) -> None:
        if self.on_bad not in ON_BAD:
            raise UsageError(f"on_bad={self.on_bad!r} is not valid; use one of {', '.join(ON_BAD)}")
        bounds = self.max_abs.values() if isinstance(self.max_abs, Mapping) else [self.max_abs]
        for b in bounds:
            if b is not None and not float(b) > 0:
                raise UsageError(f"max_abs={b!r} must be a positive number or None")
        object.__setattr__(self, "ranges", {k: _as_range(k, v) for k, v in self.ranges.items()})
        object.__setattr__(self, "exclude", frozenset(int(i) for i in self.exclude))
        if self.device is not None:
            try:
                object.__setattr__(self, "device", torch.device(self.device))
            except (RuntimeError, TypeError) as exc:
                raise UsageError(f"device={self.device!r} is not a torch device: {exc}") from exc


def _as_range(key: str, value: Any) -> Range:
    if isinstance(value, Range):
        return value
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise UsageError(
            f"ranges[{key!r}]={value!r}: give (min, max), either may be None"
        ) from None
    if lo is not None and hi is not None and lo > hi:
        raise UsageError(f"ranges[{key!r}]: min {lo} is above max {hi}")
    return Range(check=OUT_OF_RANGE.name, severity=OUT_OF_RANGE.severity, min=lo, max=hi)


@dataclass
class LoaderStats:
    """Counters since the loader was built; read them from the training loop."""

    batches: int = 0
    """Batches checked."""
    checked: int = 0
    """Samples checked."""
    bad: int = 0
    """Samples that failed a check (quarantined)."""
    dropped: int = 0
    """Bad samples removed from yielded batches (``drop``) or from skipped batches."""
    skipped_batches: int = 0
    """Batches not yielded (``skip_batch``, emptied by ``drop``, or skipped by another rank)."""
    skipped_samples: int = 0
    """Good samples not yielded because their batch was skipped."""
    excluded: int = 0
    """Quarantined indices the sampler did not hand to the workers."""
    yielded: int = 0
    """Samples yielded to the training loop."""

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class _SkipIndices:
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


class _RecordedBatches:
    """The loader's batch sampler, recording the indices of each batch in a FIFO."""

    def __init__(self, source: Iterable[Any], exclude: set[int], stats: LoaderStats, within: bool):
        self.source, self.exclude, self.stats, self.within = source, exclude, stats, within
        self.fifo: deque[list[int] | None] = deque()

    def __iter__(self) -> Iterator[list[int]]:
        self.fifo = deque()  # one per DataLoader iterator; the guard takes it right after iter()
        return self._walk(self.fifo)

    def _walk(self, fifo: deque[list[int] | None]) -> Iterator[list[int]]:
        for batch in self.source:
            ids = _as_indices(batch)
            if self.within and self.exclude:
                kept = [i for i in ids if i not in self.exclude]
                self.stats.excluded += len(ids) - len(kept)
                ids = kept
            fifo.append(ids or _SKIPPED)
            if ids:
                yield ids

    def __len__(self) -> int:
        return len(self.source)  # type: ignore[arg-type]


def _as_indices(batch: Iterable[Any]) -> list[int]:
    try:
        return list(map(int, batch))
    except (TypeError, ValueError):
        raise UsageError(
            f"GuardedLoader needs integer dataset indices; the sampler gave {list(batch)[:5]!r}"
        ) from None


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _agree(flag: bool) -> bool:
    """True on every rank if any rank passes True (one tiny all-reduce)."""
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    t = torch.tensor([int(flag)], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


@dataclass
class _Job:
    step: int
    indices: list[int]
    batch: Any = None
    check: PendingCheck | None = None


class GuardedLoader:
    """A DataLoader wrapper that checks every batch per sample and quarantines bad samples.

    Example:
        >>> loader = GuardedLoader(DataLoader(ds, batch_size=256, num_workers=8),
        ...                        quarantine="runs/exp1/quarantine", device="cuda")
        >>> for epoch in range(E):
        ...     loader.set_epoch(epoch)
        ...     for batch in loader:
        ...         ...

    Args:
        loader: a map-style DataLoader with batching (``batch_size`` or ``batch_sampler``).
        config: a :class:`LoaderConfig`; or pass its fields as keyword arguments.
        **options: fields of :class:`LoaderConfig`.

    Raises:
        UsageError: the loader cannot be guarded (iterable dataset, no batching, out of order).
    """

    def __init__(self, loader: DataLoader, config: LoaderConfig | None = None, **options: Any):
        if config is not None and options:
            raise UsageError("GuardedLoader: pass either config= or keyword options, not both")
        self.config = config if config is not None else LoaderConfig(**options)
        _refuse_unguardable(loader)
        self.inner = loader
        self.stats = LoaderStats()
        self.epoch = -1
        self._epoch_set = False
        self._exclude = set(self.config.exclude) | self._previously_quarantined()
        source, within = self._index_source(loader)
        self._batches = _RecordedBatches(source, self._exclude, self.stats, within)
        self.rules_for = LeafRules(self.config.max_abs, self.config.ranges)  # type: ignore[arg-type]
        """The rules run on a batch leaf: ``rules_for(key, dtype)`` (None: not checked)."""
        self.in_workers = self._checks_in_workers(loader)
        collate = CheckingCollate(loader.collate_fn, self.rules_for) if self.in_workers else None
        self.loader = _rebuild(loader, self._batches, collate)
        self._writer: QuarantineWriter | None = None

    @property
    def dataset(self) -> Any:
        return self.inner.dataset

    @property
    def excluded_indices(self) -> frozenset[int]:
        """Dataset indices the sampler skips (quarantined before or during this run)."""
        return frozenset(self._exclude)

    def __len__(self) -> int:
        """Batches per epoch before any skip (an upper bound)."""
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch of the manifest and forward it to the sampler (DistributedSampler)."""
        self.epoch, self._epoch_set = epoch, True
        seen: set[int] = set()
        for obj in (
            self.inner.sampler,
            self.inner.batch_sampler,
            getattr(self.inner.batch_sampler, "sampler", None),
        ):
            if obj is not None and id(obj) not in seen and hasattr(obj, "set_epoch"):
                seen.add(id(obj))
                obj.set_epoch(epoch)

    def close(self) -> None:
        """Close the manifest file (every record is already flushed; it reopens on demand)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __iter__(self) -> Iterator[Any]:
        if not self._epoch_set:
            self.epoch += 1
        self._epoch_set = False
        run = _EpochRun(self, *_world())
        inner = iter(self.loader)
        fifo = self._batches.fifo
        lag = 1 if self.config.deferred else 0
        try:
            for batch in inner:
                while fifo[0] is _SKIPPED:
                    run.push(fifo.popleft(), None)
                indices = fifo.popleft()
                assert indices is not None and len(indices) > 0
                run.push(indices, batch)
                yield from run.drain(lag)
            while fifo:
                run.push(fifo.popleft(), None)
            yield from run.drain(0)
        finally:
            self.close()
            logger.info("epoch %d: %s", self.epoch, self.stats.as_dict())

    # ------------------------------------------------------------------ internals

    def _previously_quarantined(self) -> set[int]:
        folder = self.config.quarantine
        if folder is None or not self.config.skip_quarantined:
            return set()
        found = quarantined_indices(folder)
        if found:
            logger.info("skipping %d dataset indices quarantined in %s", len(found), folder)
        return found

    def _index_source(self, loader: DataLoader) -> tuple[Iterable[Any], bool]:
        """The batch source, and whether exclusion filters within batches (keeps boundaries).

        A plain BatchSampler is re-formed over a filtered sampler (full batches).  Under DDP,
        batch boundaries are kept so every rank yields the same number of steps.
        """
        bs = loader.batch_sampler
        distributed = isinstance(getattr(bs, "sampler", None), DistributedSampler)
        if type(bs) is BatchSampler and not (distributed or _world()[1] > 1):
            sampler = _SkipIndices(bs.sampler, self._exclude, self.stats)
            return BatchSampler(sampler, bs.batch_size, bs.drop_last), False
        return bs, True

    def _checks_in_workers(self, loader: DataLoader) -> bool:
        """Flag in the workers when batches stay on the CPU (parallel with training)."""
        if self.config.check_in_workers is not None:
            return self.config.check_in_workers
        device = self.config.device
        return loader.num_workers > 0 and (device is None or device.type == "cpu")  # type: ignore[union-attr]

    def _record(self, job: _Job, findings: list[SampleFinding], rank: int) -> list[int]:
        """Quarantine the bad samples of a batch; returns their dataset indices."""
        bad = sorted({job.indices[f.pos] for f in findings})
        self._exclude.update(bad)
        if self.config.quarantine is not None:
            if self._writer is None:
                self._writer = QuarantineWriter(self.config.quarantine, rank, self.config.fsync)
            now = datetime.now(timezone.utc).isoformat()
            self._writer.write(_record_dict(job, f, rank, self.epoch, now) for f in findings)
        first = findings[0]
        logger.warning(
            "rank %d epoch %d step %d: %d bad sample(s), dataset indices %s (first: %s in %r, value %s)",
            rank,
            self.epoch,
            job.step,
            len(bad),
            bad[:20],
            first.check,
            first.key,
            first.value,
        )
        return bad


def _record_dict(job: _Job, f: SampleFinding, rank: int, epoch: int, now: str) -> dict[str, Any]:
    return {
        "index": job.indices[f.pos],
        "check": f.check,
        "severity": f.severity.value,
        "key": f.key,
        "value": f.value,
        "count": f.count,
        "rank": rank,
        "epoch": epoch,
        "step": job.step,
        "time": now,
    }


class _EpochRun:
    """One pass over the loader: the queue of launched checks, resolved in sampler order."""

    def __init__(self, guard: GuardedLoader, rank: int, world: int) -> None:
        cfg = guard.config
        self.guard, self.cfg, self.rank = guard, cfg, rank
        auto = (
            world > 1 and cfg.on_bad != "raise" and not (cfg.on_bad == "drop" and cfg.allow_empty)
        )
        self.coordinate = auto if cfg.coordinate is None else cfg.coordinate
        self.queue: deque[_Job] = deque()
        self.step = 0

    def push(self, indices: list[int] | None, batch: Any) -> None:
        """Queue a batch and launch its check (None: a batch the sampler emptied)."""
        job = _Job(self.step, indices or [])
        if batch is not None:
            n, rules_for = len(job.indices), self.guard.rules_for
            if self.guard.in_workers:
                batch, flags, keys = batch
            job.batch = _to_device(batch, self.cfg.device, self.cfg.non_blocking)  # type: ignore[arg-type]
            if self.guard.in_workers:
                job.check = worker_check(job.batch, n, flags, keys, rules_for)
            else:
                job.check = launch_check(job.batch, n, rules_for)
        self.queue.append(job)
        self.step += 1

    def drain(self, lag: int) -> Iterator[Any]:
        """Resolve queued jobs in order, leaving at most ``lag`` batches in flight."""
        while self.queue and (
            self.queue[0].check is None or sum(j.check is not None for j in self.queue) > lag
        ):
            out = self._resolve(self.queue.popleft())
            if out is not None:
                yield out

    def _skip(self, flag: bool) -> bool:
        return _agree(flag) if self.coordinate else flag

    def _resolve(self, job: _Job) -> Any:
        stats = self.guard.stats
        if job.check is None:
            self._skip(True)
            return None
        findings = job.check.result()
        n = len(job.indices)
        stats.batches += 1
        stats.checked += n
        if not findings and not self.coordinate:
            stats.yielded += n  # the common case, kept lean
            return job.batch
        bad = self.guard._record(job, findings, self.rank) if findings else []
        stats.bad += len(bad)
        if bad and self.cfg.on_bad == "raise":
            raise BadSampleError(_raise_message(job, findings, bad), tuple(bad))
        bad_pos = {f.pos for f in findings}
        keep = [p for p in range(n) if p not in bad_pos]
        empty = not keep and not self.cfg.allow_empty
        if self._skip(bool(bad) if self.cfg.on_bad == "skip_batch" else empty):
            stats.skipped_batches += 1
            stats.skipped_samples += len(keep)
            stats.dropped += len(bad)
            return None
        stats.dropped += len(bad)
        stats.yielded += len(keep)
        return take(job.batch, keep) if bad else job.batch


def _raise_message(job: _Job, findings: list[SampleFinding], bad: list[int]) -> str:
    what = ", ".join(sorted({f"{f.check} in {f.key!r}" for f in findings}))
    return (
        f"batch {job.step} holds {len(bad)} bad sample(s) at dataset indices {bad[:50]} ({what}); "
        "they are quarantined and will be skipped on the next run. Use on_bad='drop' to "
        "train on without them."
    )


def _refuse_unguardable(loader: Any) -> None:
    if not isinstance(loader, DataLoader):
        raise UsageError(f"GuardedLoader wraps a torch DataLoader, not {type(loader).__name__}")
    if isinstance(loader.dataset, IterableDataset):
        raise UsageError(
            "GuardedLoader needs a map-style Dataset: bad samples are named by dataset index, "
            "and an IterableDataset has none. Check the batches with datacheck.torch's "
            "TrainingGuard instead, or index your dataset."
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


def _rebuild(loader: DataLoader, batches: _RecordedBatches, collate: Any) -> DataLoader:
    """The same DataLoader, drawing its batches from the recorded batch sampler."""
    kwargs: dict[str, Any] = {
        "batch_sampler": batches,
        "num_workers": loader.num_workers,
        "collate_fn": collate or loader.collate_fn,
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
    return DataLoader(loader.dataset, **kwargs)
