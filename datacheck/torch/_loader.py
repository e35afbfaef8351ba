"""GuardedLoader: re-check each batch where it will be used and quarantine bad samples.

How a batch's dataset indices are known without touching the Dataset: see
:mod:`._loader_batches` (a recorded batch sampler, matched in order). How a sample that raises
while loading becomes a ``load_error`` instead of the end of the run: see :mod:`._fetch`. How a
stream (no indices) is wired and its samples named: :mod:`datacheck.torch.stream`. What names a
map-style sample across runs: :mod:`._map_identity`. The pass over the batches (check, judge,
quarantine, drop; the ranks' agreement): :mod:`._loader_run`. What a bad batch's records and
log lines hold: :mod:`._loader_records`. This module is the face: the wiring, the exclusions,
and writing the records.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

from torch.utils.data import DataLoader

from datacheck.errors import UsageError
from datacheck.torch import _loader_batches as _b
from datacheck.torch import _loader_records as _r
from datacheck.torch import _loader_shard as _s
from datacheck.torch._checks import LeafRules, SampleFinding
from datacheck.torch._fetch import Fetched, GuardedCollate, LoadFailure, SafeDataset
from datacheck.torch._loader_config import LoaderConfig, LoaderStats, as_index_set
from datacheck.torch._loader_run import EpochRun, Job
from datacheck.torch._map_identity import MapIdentity, Match, Skips, plan_skips
from datacheck.torch._quarantine import QuarantineWriter, quarantined_ids, read_quarantine
from datacheck.torch._sample_paths import SamplePaths, resolve_exclude
from datacheck.torch.stream._collate import Excluded, batch_ids
from datacheck.torch.stream._wire import StreamSide, is_stream, stream_ids

logger = logging.getLogger("datacheck.torch")

YIELDED_KEPT = 256
"""Batches whose indices :meth:`GuardedLoader.take_indices` keeps for a trainer (a bound: a loop
that never takes them holds no more)."""


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
        self._keys_seen = False
        self.leaf_names: tuple[str, ...] = ()
        """Names of the positions of a tuple batch: the pipeline's own (WebDataset's
        ``to_tuple``), else ``item 0``, ``item 1``, ... (in messages and the quarantine)."""
        self._stream: StreamSide | None = None
        self._match: Match | None = None
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
        excluded = resolve_exclude(cfg.exclude, self.paths)
        self.identity = MapIdentity(loader.dataset, self.paths, cfg.key_fn, set(excluded))
        """What names each sample across runs (records' ``source``/``sample``/``dataset``)."""
        skips = self._previously_quarantined()
        self._exclude: Any = excluded | skips.indices
        self._late: Any = set()  # excluded this epoch: batches already drawn drop them
        self._match = Match(cfg.key_fn, skips.keys, skips.contents)
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
        self.leaf_names = self._stream.names

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

    def describe(self, names: Sequence[Any]) -> list[dict[str, Any]]:
        """The quarantine fields naming each of ``names`` (``batch_indices`` entries) so a
        record written by someone else (TrainingGuard) survives the dataset changing."""
        return [_r.names(self, n, None) for n in names]

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
        if self._stream is not None and (self._stream.stages or self._stream.repetitions != 1):
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
        run = EpochRun(self, rank, size)
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
        for batch in self._stream.passes(self._epoch):
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

    def _previously_quarantined(self) -> Skips:
        folder = self.config.quarantine
        if folder is None or not self.config.skip_quarantined:
            return Skips()
        records = read_quarantine(folder)
        self.identity.avoid |= {int(i) for i in records["index"].dropna()}
        found = plan_skips(records, self.identity, folder)
        if found.indices or found.keys or found.contents:
            logger.info(
                "skipping %d dataset indices (and %d samples by key or content) quarantined in %s",
                len(found.indices),
                len(found.keys) + len(found.contents),
                folder,
            )
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
            for f in below:  # a sample dropped for an error is not "kept"
                if f.pos not in bad_pos and (f.key, f.check) not in self._warned:
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

    def _record(self, job: Job, findings: list[SampleFinding], rank: int) -> list[Any]:
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
            records = [_r.finding_record(self, job, f, head) for f in findings]
            records += [_r.failure_record(self, f, head) for f in job.failures]
            self._writer.write(records)
        _r.log_bad(self, job, findings, bad, rank)
        return bad

    def _unnamed(self) -> None:
        if ("", "unnamed") not in self._warned:
            self._warned.add(("", "unnamed"))
            logger.warning(
                "bad stream samples without a name (no key_fn, no __key__, and the pipeline "
                "gives none, e.g. after a datasets map()): they are dropped and recorded, but "
                "the next run cannot leave them out; pass key_fn= (e.g. an id field)"
            )

    def _where(self, f: LoadFailure) -> str | None:
        """The file (map-style) or stream position a failure names."""
        return f.where if self._stream is not None else self.paths(f.index)
