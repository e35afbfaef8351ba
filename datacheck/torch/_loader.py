"""GuardedLoader: re-check each batch where it will be used and quarantine bad samples.

How a batch's dataset indices are known without touching the Dataset: see
:mod:`._loader_batches` (a recorded batch sampler, matched in order). How a sample that raises
while loading becomes a ``load_error`` instead of the end of the run: see :mod:`._fetch`.
This module is the loop: unpack each fetched batch, check it, judge it against ``drop_on``,
quarantine, and yield what is left; under DDP the ranks agree on skips and exclusions.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from torch.utils.data import DataLoader

from datacheck.checks._registry import LOAD_ERROR
from datacheck.errors import BadSampleError, UsageError
from datacheck.torch import _loader_batches as _b
from datacheck.torch import _loader_shard as _s
from datacheck.torch._checks import (
    LeafRules,
    PendingCheck,
    SampleFinding,
    launch_check,
    take,
    worker_check,
)
from datacheck.torch._checks import to_device as _to_device
from datacheck.torch._fetch import Fetched, GuardedCollate, LoadFailure, SafeDataset
from datacheck.torch._identity import SampleId, record_fields
from datacheck.torch._loader_config import LoaderConfig, LoaderStats, as_index_set, over_budget
from datacheck.torch._quarantine import QuarantineWriter, quarantined_ids, quarantined_indices
from datacheck.torch._sample_paths import SamplePaths, resolve_exclude
from datacheck.torch.stream._collate import Excluded, batch_ids
from datacheck.torch.stream._wire import StreamSide, is_stream, stream_ids

logger = logging.getLogger("datacheck.torch")

YIELDED_KEPT = 256
"""Batches whose indices :meth:`GuardedLoader.take_indices` keeps for a trainer (a bound: a loop
that never takes them holds no more)."""


@dataclass
class _Job:
    step: int
    indices: list[Any]
    """Dataset indices of the batch's rows (those that loaded); a stream's SampleIds."""
    batch: Any = None
    check: PendingCheck | None = None
    failures: tuple[LoadFailure, ...] = ()


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
        loader: a map-style DataLoader with batching (``batch_size`` or ``batch_sampler``), or
            a stream loader: a DataLoader over an ``IterableDataset`` (WebDataset, ``datasets``
            streaming, MosaicML or litdata ``StreamingDataset``, your generator), WebDataset's
            ``WebLoader``, MosaicML's or litdata's ``StreamingDataLoader``, a
            ``torchdata.nodes.Loader``. Stream samples are named by the identity their
            pipeline gives them (see :mod:`datacheck.torch.stream`).
        config: a :class:`LoaderConfig`; or pass its fields as keyword arguments.
        **options: fields of :class:`LoaderConfig`.

    Raises:
        UsageError: the loader cannot be guarded (no batching, out of order, not a loader).
    """

    def __init__(self, loader: DataLoader, config: LoaderConfig | None = None, **options: Any):
        if config is not None and options:
            raise UsageError("GuardedLoader: pass either config= or keyword options, not both")
        self.config = config if config is not None else LoaderConfig(**options)
        cfg = self.config
        self.inner = loader
        self.stats = LoaderStats()
        self.epoch = -1
        self._epoch_set = False
        self._warned: set[tuple[str, str]] = set()
        self.rules_for = LeafRules(cfg.max_abs, cfg.ranges, cfg.fits)  # type: ignore[arg-type]
        """The rules run on a batch leaf: ``rules_for(key, dtype)`` (None: not checked)."""
        self.in_workers = self._checks_in_workers(loader)
        self._stream: StreamSide | None = None
        self._unshared: set[Any] = set()  # excluded here since the ranks last agreed
        if is_stream(loader):
            self._init_stream(loader)
        else:
            self._init_map(loader)
        self._writer: QuarantineWriter | None = None
        self.batch_indices: list[Any] = []
        """Dataset indices of the rows of the batch last yielded (pass them to TrainingGuard)."""
        self._yielded: deque[list[Any]] = deque(maxlen=YIELDED_KEPT)
        self.step = -1
        """Position in the epoch (sampler order, as in the manifest) of the batch last yielded."""

    def _init_map(self, loader: DataLoader) -> None:
        _b.refuse_unguardable(loader)
        cfg = self.config
        self.paths = SamplePaths(loader.dataset, cfg.path_of)
        """The file of each dataset index, when the dataset lists them (``paths(i)``)."""
        self._exclude: Any = resolve_exclude(cfg.exclude, self.paths)
        self._exclude |= self._previously_quarantined()
        self._late: Any = set()  # excluded this epoch: batches already drawn drop them
        self._dataset = SafeDataset(loader.dataset, cfg.load_errors) if cfg.load_errors else None
        self._collate = GuardedCollate(
            loader.collate_fn, self.rules_for if self.in_workers else None
        )
        self._draw: _s.Draw | None = None
        self._strided = False  # this epoch's batches dealt out in turn across the ranks
        self._seeded = False
        self._forwarded: int | None = None  # the epoch last given to the samplers
        self._plan(_b.world())

    def _init_stream(self, loader: Any) -> None:
        cfg = self.config
        self.paths = SamplePaths(None, None)  # a stream lists no files by index
        found = (
            quarantined_ids(cfg.quarantine) if cfg.quarantine and cfg.skip_quarantined else set()
        )
        if found:
            logger.info("skipping %d stream samples quarantined in %s", len(found), cfg.quarantine)
        self._exclude = Excluded(found | stream_ids(cfg.exclude or ()))
        self._late = Excluded()  # excluded since the workers started: dropped on arrival
        rules = self.rules_for if self.in_workers else None
        self._stream = StreamSide(
            loader, cfg.key_fn, cfg.load_errors, rules, self._exclude, self.stats
        )
        self.loader = self._stream.loader

    @property
    def dataset(self) -> Any:
        """The wrapped loader's dataset."""
        return getattr(self.inner, "dataset", None)

    @property
    def sampler(self) -> Any:
        """The sampler batches come from: the DataLoader's, or the DistributedSampler put in
        its place under DDP (what trainers call ``set_epoch`` on)."""
        if self._stream is not None:
            return getattr(self.inner, "sampler", None)
        return self._plan(_b.world()).sampler

    @property
    def batch_sampler(self) -> Any:
        """The DataLoader's batch sampler, or the one over the injected DistributedSampler."""
        if self._stream is not None:
            return getattr(self.inner, "batch_sampler", None)
        draw = self._plan(_b.world())
        return draw.source if draw.injected is not None else self.inner.batch_sampler

    @property
    def batch_size(self) -> int | None:
        """The wrapped loader's ``batch_size`` (None with a custom ``batch_sampler``)."""
        return getattr(self.inner, "batch_size", None)

    @property
    def excluded_indices(self) -> frozenset[Any]:
        """Dataset indices the sampler skips (quarantined, excluded, or found this run); a
        stream's sample identities."""
        return frozenset(self._exclude)

    def __len__(self) -> int:
        """Batches per epoch (this rank's, under DDP) before any skip (an upper bound)."""
        if self._stream is not None:
            return len(self.loader)
        draw = self._plan(_b.world())
        n = len(self.loader)
        return -(-n // draw.world) if self._strided else n

    def take_indices(self) -> list[Any] | None:
        """The dataset indices of the oldest batch yielded this epoch and not yet taken, for a
        trainer that fetches batches ahead of using them (Hugging Face gathers a whole gradient
        accumulation's batches first); None when every batch was taken."""
        return self._yielded.popleft() if self._yielded else None

    def exclude(self, indices: Iterable[Any]) -> None:
        """Never load or yield these dataset indices again in this run.

        The sampler skips them from now on; batches already drawn (prefetched) lose them when
        they arrive. Under DDP the ranks share exclusions at the next batch they agree on and at
        the start of every epoch, so a sample named on one rank is excluded on every rank.
        Nothing is written to the quarantine: the caller records why (e.g. TrainingGuard).
        A stream takes the identities of its ``batch_indices``, or keys (any source).
        """
        if self._stream is not None:
            new: set[Any] = self._exclude.add(stream_ids(indices))
        else:
            new = set(as_index_set(indices)) - self._exclude
            self._exclude |= new  # in place: the batch sampler holds this set
        self._late |= new
        self._unshared |= new

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch of the manifest and of the sampler (a DistributedSampler's order).

        Without a call, the loader counts epochs itself and gives each to the sampler; an
        epoch set on the sampler directly (``loader.sampler.set_epoch(e)``, as Lightning does)
        is taken as the loader's.
        """
        self.epoch, self._epoch_set = epoch, True
        if self._stream is not None:
            self._stream.set_epoch(epoch)
            return
        self._forward_epoch(epoch)

    def _samplers(self) -> list[Any]:
        """The samplers that take an epoch (``set_epoch``), each once."""
        found: dict[int, Any] = {}
        bs = self.inner.batch_sampler
        injected = self._draw.injected if self._draw is not None else None
        for obj in (self.inner.sampler, bs, getattr(bs, "sampler", None), injected):
            if obj is not None and callable(getattr(obj, "set_epoch", None)):
                found.setdefault(id(obj), obj)
        return list(found.values())

    def _forward_epoch(self, epoch: int) -> None:
        for obj in self._samplers():
            obj.set_epoch(epoch)
        self._forwarded = epoch

    def _next_epoch(self) -> int:
        """This epoch: as set, else one set on a sampler directly, else the last one + 1."""
        if self._epoch_set:
            return self.epoch
        for obj in self._samplers():
            seen = getattr(obj, "epoch", None)
            if isinstance(seen, int) and seen != self._forwarded:
                return seen
        return self.epoch + 1

    def state_dict(self) -> Any:
        """The stream loader's own resumption state (MosaicML's or litdata's
        ``StreamingDataLoader``, a ``torchdata.nodes.Loader``); None when it keeps none. Its
        sample counts include the samples the guard left out (they were consumed)."""
        fn = getattr(self.loader, "state_dict", None) if self._stream is not None else None
        return fn() if callable(fn) else None

    def load_state_dict(self, state: Any) -> None:
        """Resume the stream loader from :meth:`state_dict` (where it keeps one)."""
        fn = getattr(self.loader, "load_state_dict", None) if self._stream is not None else None
        if state is not None and callable(fn):
            fn(state)

    def close(self) -> None:
        """Close the manifest file (every record is already flushed; it reopens on demand)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __iter__(self) -> Iterator[Any]:
        if self._stream is not None and self._stream.stages:
            return self._staged()
        return self._epoch()

    def _epoch(self) -> Iterator[Any]:
        rank, size = _b.world()
        if self._stream is None:
            self._start_map_epoch(rank, size)
        elif not self._epoch_set:
            self.epoch += 1
        self._epoch_set = False
        self._yielded.clear()
        run = _EpochRun(self, rank, size)
        if run.share:
            self._take_shared(_b.share(self._unshared))
        if not self._persistent_workers():
            self._late.clear()
        pairs = self._stream.batches() if self._stream is not None else self._drawn()
        lag = 1 if self.config.deferred else 0
        try:
            for indices, fetched in pairs:
                run.push(indices, fetched)
                yield from run.drain(lag)
            yield from run.drain(0)
        finally:
            self.close()
            logger.info("epoch %d: %s", self.epoch, self.stats.as_dict())

    def _start_map_epoch(self, rank: int, size: int) -> None:
        """This epoch's number and sampler order; under DDP, this rank's share (collectives:
        every rank starts its epoch here)."""
        draw = self._plan((rank, size))
        if draw.injected is not None and not self._seeded:
            _s.agree_seed(draw.injected)
            _s.describe(draw, rank)
            self._seeded = True
        self.epoch = self._next_epoch()
        self._forward_epoch(self.epoch)
        if draw.compare:
            batches = _s.share_first(draw.source, rank, size, self.config.shard)
            self._strided = isinstance(batches, _s.Strided)
            self._batches.prime(batches)

    def _drawn(self) -> Iterator[tuple[list[int] | None, Fetched | None]]:
        """Each fetched batch with the indices the sampler drew for it (None: a batch the
        exclusions emptied, never fetched)."""
        inner = iter(self.loader)
        fifo = self._batches.fifo  # the one iter() just started
        for fetched in inner:
            while fifo[0] is _b.SKIPPED:
                yield fifo.popleft(), None
            indices = fifo.popleft()
            assert indices is not None and len(indices) > 0
            yield indices, fetched
        while fifo:
            yield fifo.popleft(), None

    def _staged(self) -> Iterator[Any]:
        """WebLoader's stages after its DataLoader, on the guarded batches."""
        assert self._stream is not None
        for batch in self._stream.staged(self._epoch()):
            self.batch_indices = batch_ids(batch)
            yield batch

    def _persistent_workers(self) -> bool:
        """Stream workers that outlive the epoch hold the exclusions of when they started."""
        return self._stream is not None and bool(getattr(self.loader, "persistent_workers", 0))

    # ------------------------------------------------------------------ internals

    def _take_shared(self, indices: set[Any]) -> None:
        """Exclusions every rank now knows (their union)."""
        if self._stream is not None:
            new: set[Any] = self._exclude.add(indices)
        else:
            new = indices - self._exclude
            self._exclude |= new
        self._late |= new
        self._unshared.clear()

    def _previously_quarantined(self) -> set[int]:
        folder = self.config.quarantine
        if folder is None or not self.config.skip_quarantined:
            return set()
        found = quarantined_indices(folder)
        if found:
            logger.info("skipping %d dataset indices quarantined in %s", len(found), folder)
        return found

    def _plan(self, world: tuple[int, int]) -> _s.Draw:
        """How batches are drawn in this world (re-planned when the world changes: a trainer
        initialises the process group after the loader is built)."""
        if self._draw is not None and self._draw.world == world[1]:
            return self._draw
        draw = _s.plan(self.inner, self._exclude, self.stats, world, self.config.shard)
        self._draw, self._strided, self._seeded = draw, False, False
        self._batches = _b.RecordedBatches(draw.source, self._exclude, self.stats, draw.within)
        self.loader = _b.rebuild(
            self.inner, self._batches, self._dataset or self.inner.dataset, self._collate
        )
        return draw

    def _checks_in_workers(self, loader: Any) -> bool:
        """Flag in the workers when batches stay on the CPU (parallel with training)."""
        if self.config.check_in_workers is not None:
            return self.config.check_in_workers
        device = self.config.device
        workers = _b.num_workers(loader)
        return workers > 0 and (device is None or device.type == "cpu")  # type: ignore[union-attr]

    def _judge(self, findings: list[SampleFinding]) -> list[SampleFinding]:
        """The findings that make a sample bad (``drop_on``); the rest are counted and logged."""
        floor = self.config.drop_severity.rank
        bad = [f for f in findings if f.severity.rank >= floor]
        if len(bad) < len(findings):
            below = [f for f in findings if f.severity.rank < floor]
            bad_pos = {f.pos for f in bad}
            self.stats.warned += len({f.pos for f in below} - bad_pos)
            for f in below:
                if (f.key, f.check) not in self._warned:
                    self._warned.add((f.key, f.check))
                    logger.warning(
                        "%s in %r (e.g. value %s): kept, since drop_on=%r; set drop_on='warning' "
                        "to drop such samples, or fits='fp16' to drop what overflows fp16",
                        f.check,
                        f.key,
                        f.value,
                        self.config.drop_on,
                    )
        return bad

    def _record(self, job: _Job, findings: list[SampleFinding], rank: int) -> list[Any]:
        """Quarantine the bad and unloadable samples of a batch; returns their names (dataset
        indices; a stream's identities, None where the pipeline names none), one per sample."""
        rows = sorted({f.pos for f in findings})
        bad = [job.indices[p] for p in rows] + [f.index for f in job.failures]
        named = [b for b in bad if b is not None]
        if self._stream is not None:
            self._exclude.add(named)
            if len(named) < len(bad):
                self._unnamed()
        else:
            bad.sort()
            self._exclude.update(named)
        if _b.world()[1] > 1:
            self._unshared.update(named)
        if self.config.quarantine is not None:
            if self._writer is None:
                self._writer = QuarantineWriter(self.config.quarantine, rank, self.config.fsync)
            now = datetime.now(timezone.utc).isoformat()
            head = {"rank": rank, "epoch": self.epoch, "step": job.step, "time": now}
            records = [_finding_record(job.indices[f.pos], f, head) for f in findings]
            records += [self._failure_record(f, head) for f in job.failures]
            self._writer.write(records)
        self._log(job, findings, bad, rank)
        return bad

    def _unnamed(self) -> None:
        if ("", "unnamed") not in self._warned:
            self._warned.add(("", "unnamed"))
            logger.warning(
                "bad stream samples without a name (no key_fn, no __key__, and the pipeline "
                "gives none, e.g. after a datasets map()): they are dropped and recorded, but "
                "the next run cannot leave them out; pass key_fn= (e.g. an id field)"
            )

    def _failure_record(self, f: LoadFailure, head: dict[str, Any]) -> dict[str, Any]:
        where = f.where if self._stream is not None else self.paths(f.index)
        return {
            **_names(f.index),
            "check": LOAD_ERROR.name,
            "severity": LOAD_ERROR.severity.value,
            "key": where,
            "value": f.error,
            "count": 1,
            **head,
        }

    def _log(self, job: _Job, findings: list[SampleFinding], bad: list[Any], rank: int) -> None:
        if job.failures:
            f = job.failures[0]
            where = self._where(f)
            logger.warning(
                "rank %d epoch %d step %d: %d sample(s) failed to load, %s %s (first: %s%s: %s)",
                rank,
                self.epoch,
                job.step,
                len(job.failures),
                "samples" if self._stream is not None else "dataset indices",
                [show(x.index) for x in job.failures][:20],
                _named(self, f.index),
                f" {where!r}" if where else "",
                f.error,
            )
        if findings:
            first = findings[0]
            logger.warning(
                "rank %d epoch %d step %d: %d bad sample(s), %s %s (first: %s in %r, value %s)",
                rank,
                self.epoch,
                job.step,
                len({f.pos for f in findings}),
                "samples" if self._stream is not None else "dataset indices",
                [show(b) for b in bad[:20]],
                first.check,
                first.key,
                first.value,
            )

    def _where(self, f: LoadFailure) -> str | None:
        """The file (map-style) or stream position a failure names."""
        return f.where if self._stream is not None else self.paths(f.index)


def show(name: Any) -> Any:
    """A sample's name as logs and messages show it ("?": a stream sample without one)."""
    if name is None:
        return "?"
    return str(name) if isinstance(name, SampleId) else name


def _named(g: GuardedLoader, name: Any) -> str:
    """``index 7`` (map-style) or ``sample 'key'`` (a stream)."""
    return f"sample {show(name)!r}" if g._stream is not None else f"index {name}"


def _names(name: Any) -> dict[str, Any]:
    if name is None:
        return {"index": None, "sample": None, "source": None}
    return record_fields(name)


def _finding_record(name: Any, f: SampleFinding, head: dict[str, Any]) -> dict[str, Any]:
    return {
        **_names(name),
        "check": f.check,
        "severity": f.severity.value,
        "key": f.key,
        "value": f.value,
        "count": f.count,
        **head,
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
        self.share = world > 1 and cfg.coordinate is not False
        """Share exclusions across ranks (at epoch start; per batch when coordinating)."""
        self.queue: deque[_Job] = deque()
        self.step = 0

    def push(self, indices: list[int] | None, fetched: Fetched | None) -> None:
        """Queue a batch and launch its check (None: a batch the sampler emptied)."""
        job = _Job(self.step, indices or [])
        if fetched is not None:
            batch, flags, keys, failures = fetched
            if failures:
                failed = {f.pos for f in failures}
                job.failures = failures
                job.indices = [i for p, i in enumerate(job.indices) if p not in failed]
            if batch is not None:
                n, rules_for = len(job.indices), self.guard.rules_for
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

    def _agree(self, skip: bool, stop: bool) -> tuple[bool, bool]:
        """Skip and stop if any rank does; share pending exclusions (coordinated runs only)."""
        if not self.coordinate:
            return skip, stop
        skip, stop, pending = _b.agree(skip, stop, bool(self.guard._unshared))
        if pending:
            self.guard._take_shared(_b.share(self.guard._unshared))
        return skip, stop

    def _resolve(self, job: _Job) -> Any:
        g, stats = self.guard, self.guard.stats
        findings = job.check.result() if job.check is not None else []
        n = len(job.indices)
        if job.batch is not None:
            stats.batches += 1
            stats.checked += n
        clean = not findings and not job.failures and not g._late
        if clean and job.batch is not None and not self.coordinate:
            return self._yield(job, job.batch)  # the common case, kept lean
        if job.batch is None and not job.failures:  # the sampler emptied it
            self._agree(True, False)
            return None
        return self._settle(job, g._judge(findings) if findings else [])

    def _settle(self, job: _Job, findings: list[SampleFinding]) -> Any:
        """A batch with something to act on: quarantine, drop or skip, agree across ranks."""
        g, stats, cfg = self.guard, self.guard.stats, self.cfg
        n = len(job.indices)
        bad = g._record(job, findings, self.rank) if findings or job.failures else []
        stats.bad += len(bad)
        stats.load_errors += len(job.failures)
        if bad and cfg.on_bad == "raise":
            raise BadSampleError(_raise_message(g, job, findings, bad), tuple(bad))
        drop = {f.pos for f in findings}
        late = {p for p, i in enumerate(job.indices) if i in g._late} - drop if g._late else set()
        keep = [p for p in range(n) if p not in drop and p not in late]
        empty = job.batch is None or (not keep and not cfg.allow_empty)
        stop = over_budget(
            cfg.max_load_errors, stats.load_errors, stats.checked + stats.load_errors
        )
        skip, stop = self._agree(bool(bad) if cfg.on_bad == "skip_batch" else empty, stop)
        if stop:
            raise BadSampleError(_budget_message(g, job), tuple(f.index for f in job.failures))
        stats.dropped += len(bad)
        stats.excluded += len(late)
        if skip:
            stats.skipped_batches += 1
            stats.skipped_samples += len(keep)
            return None
        return self._yield(job, take(job.batch, keep) if len(keep) < n else job.batch, keep)

    def _yield(self, job: _Job, batch: Any, keep: list[int] | None = None) -> Any:
        g = self.guard
        g.batch_indices = job.indices if keep is None else [job.indices[p] for p in keep]
        g.step = job.step
        g.stats.yielded += len(g.batch_indices)
        g._yielded.append(g.batch_indices)
        return batch


def _raise_message(
    g: GuardedLoader, job: _Job, findings: list[SampleFinding], bad: list[Any]
) -> str:
    parts = []
    if findings:
        what = ", ".join(sorted({f"{f.check} in {f.key!r}" for f in findings}))
        parts.append(f"bad values ({what})")
    stream = g._stream is not None
    if job.failures:
        f = job.failures[0]
        where = g._where(f)
        parts.append(
            f"{len(job.failures)} failed to load ({_named(g, f.index)}"
            + (f", {'at' if stream else 'file'} {where!r}" if where else "")
            + f": {f.error})"
        )
    names = "samples" if stream else "dataset indices"
    text = (
        f"batch {job.step} holds {len(bad)} bad sample(s), {names} "
        f"{[show(b) for b in bad[:50]]}: "
        f"{'; '.join(parts)}. They are quarantined and will be skipped on the next run. Use "
        "on_bad='drop' to train on without them."
    )
    if job.failures:
        text += f"\nWhere the first one raised:\n{job.failures[0].trace}"
    return text


def _budget_message(g: GuardedLoader, job: _Job) -> str:
    s, budget = g.stats, g.config.max_load_errors
    seen = s.checked + s.load_errors
    if not job.failures and s.load_errors <= (budget or 0):
        return "another rank stopped: it had more load errors than max_load_errors allows"
    last = job.failures[-1] if job.failures else None
    where = g._where(last) if last else None
    limit = f"{budget:.2%} of the samples seen" if isinstance(budget, float) else f"{budget}"
    return (
        f"{s.load_errors} of {seen} samples seen failed to load, over max_load_errors "
        f"({limit}); the last: "
        + (
            f"{_named(g, last.index)}{f' ({where})' if where else ''}: {last.error}"
            if last
            else "?"
        )
        + ". So many failures usually mean the data itself is unreachable (an unmounted or "
        "stale network volume, a moved folder, missing permissions), not a few bad files. "
        "Fix the data and rerun (the quarantine keeps the failed indices: delete its "
        "load_error records if they were not really bad), or raise max_load_errors (None: no "
        "limit)."
    )
