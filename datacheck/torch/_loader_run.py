"""One pass of a :class:`~datacheck.torch.GuardedLoader` over its loader: the queue of launched
checks, resolved in order; each batch judged, quarantined, dropped or skipped, and the ranks'
agreement; and the messages that say why it stopped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from datacheck.errors import BadSampleError, UsageError
from datacheck.torch import _loader_batches as _b
from datacheck.torch._checks import (
    PendingCheck,
    SampleFinding,
    launch_check,
    row_of,
    take,
    unmatched_keys,
    worker_check,
)
from datacheck.torch._checks import to_device as _to_device
from datacheck.torch._fetch import Fetched, LoadFailure
from datacheck.torch._identity import SampleId
from datacheck.torch._loader_config import LoaderConfig, LoaderStats, over_budget


class Guarded(Protocol):
    """What a pass needs from its :class:`~datacheck.torch.GuardedLoader` (the seam: the loader
    owns the exclusions, the records and the logs; the pass decides per batch)."""

    config: LoaderConfig
    stats: LoaderStats
    rules_for: Any
    in_workers: bool
    batch_indices: list[Any]
    step: int
    leaf_names: tuple[str, ...]
    """Names of the positions of a tuple batch (the pipeline's own; else ``item i``)."""
    _keys_seen: bool
    """The option tables' keys were matched against a first batch's leaves."""
    _stream: Any
    """The stream side (None: map-style)."""
    _match: Any
    """Keys and content fingerprints to leave out as rows arrive (map-style), or None."""
    _exclude: Any
    """Every excluded name (a set of indices, or a stream's Excluded)."""
    _late: Any
    """Names excluded since this epoch's batches were drawn: dropped as they arrive."""
    _unshared: set[Any]
    """Exclusions not yet shared with the other ranks."""
    _yielded: deque[list[Any]]
    """Names of the batches yielded and not yet taken (``take_indices``)."""

    def _judge(self, findings: list[SampleFinding]) -> list[SampleFinding]: ...

    def _record(self, job: Job, findings: list[SampleFinding], rank: int) -> list[Any]: ...

    def _take_shared(self, indices: set[Any]) -> None: ...

    def _where(self, f: LoadFailure) -> str | None: ...


@dataclass
class Job:
    step: int
    indices: list[Any]
    """Dataset indices of the batch's rows (those that loaded); a stream's SampleIds."""
    batch: Any = None
    check: PendingCheck | None = None
    failures: tuple[LoadFailure, ...] = ()


def show(name: Any) -> Any:
    """A sample's name as logs and messages show it ("?": a stream sample without one)."""
    if name is None:
        return "?"
    return str(name) if isinstance(name, SampleId) else name


class Streamed(Protocol):
    _stream: Any
    """The stream side (None: map-style)."""


def named_as(g: Streamed, name: Any) -> str:
    """``index 7`` (map-style) or ``sample 'key'`` (a stream)."""
    return f"sample {show(name)!r}" if g._stream is not None else f"index {name}"


class EpochRun:
    """One pass over the loader: the queue of launched checks, resolved in sampler order."""

    def __init__(self, guard: Guarded, rank: int, world: int) -> None:
        cfg = guard.config
        self.guard, self.cfg, self.rank = guard, cfg, rank
        auto = (
            world > 1 and cfg.on_bad != "raise" and not (cfg.on_bad == "drop" and cfg.allow_empty)
        )
        self.coordinate = auto if cfg.coordinate is None else cfg.coordinate
        self.share = world > 1 and cfg.coordinate is not False
        """Share exclusions across ranks (at epoch start; per batch when coordinating)."""
        self.queue: deque[Job] = deque()
        self.step = 0

    def push(self, indices: list[int] | None, fetched: Fetched | None) -> None:
        """Queue a batch and launch its check (None: a batch the sampler emptied)."""
        job = Job(self.step, indices or [])
        if fetched is not None:
            batch, flags, keys, failures = fetched
            if failures:
                failed = {f.pos for f in failures}
                job.failures = failures
                job.indices = [i for p, i in enumerate(job.indices) if p not in failed]
            if batch is not None:
                if not self.guard._keys_seen:
                    self._refuse_unmatched(batch)
                n, rules_for = len(job.indices), self.guard.rules_for
                job.batch = _to_device(batch, self.cfg.device, self.cfg.non_blocking)  # type: ignore[arg-type]
                names = self.guard.leaf_names
                if self.guard.in_workers:
                    job.check = worker_check(job.batch, n, flags, keys, rules_for, names)
                else:
                    job.check = launch_check(job.batch, n, rules_for, names)
        self.queue.append(job)
        self.step += 1

    def _refuse_unmatched(self, batch: Any) -> None:
        """Once per loader, on its first batch: every key ``ranges=`` and ``max_abs=`` name
        is a leaf of the batch (a check the user wrote runs, or is refused)."""
        tables = {"ranges": self.cfg.ranges, "max_abs": self.cfg.max_abs}
        refusal = unmatched_keys(batch, self.guard.leaf_names, tables)
        if refusal is not None:
            raise UsageError(refusal)
        self.guard._keys_seen = True

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

    def _resolve(self, job: Job) -> Any:
        g, stats = self.guard, self.guard.stats
        findings = job.check.result() if job.check is not None else []
        n = len(job.indices)
        if job.batch is not None:
            stats.batches += 1
            stats.checked += n
            if g._match:
                self._matched(job)
        if findings and g._late:  # left out anyway, and already known: not recorded again
            findings = [f for f in findings if job.indices[f.pos] not in g._late]
        clean = not findings and not job.failures and not g._late
        if clean and job.batch is not None and not self.coordinate:
            return self._yield(job, job.batch)  # the common case, kept lean
        if job.batch is None and not job.failures:  # the sampler emptied it
            self._agree(True, False)
            return None
        return self._settle(job, g._judge(findings) if findings else [])

    def _matched(self, job: Job) -> None:
        """Rows the quarantine names by key or content (the dataset changed since): excluded,
        so the batch loses them now and the sampler skips their index from now on."""
        match = self.guard._match
        assert match is not None
        held = {
            job.indices[p] for p in range(len(job.indices)) if match.holds(row_of(job.batch, p))
        }
        if held:
            self.guard._exclude.update(held)
            self.guard._late.update(held)

    def _settle(self, job: Job, findings: list[SampleFinding]) -> Any:
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

    def _yield(self, job: Job, batch: Any, keep: list[int] | None = None) -> Any:
        g = self.guard
        g.batch_indices = job.indices if keep is None else [job.indices[p] for p in keep]
        g.step = job.step
        g.stats.yielded += len(g.batch_indices)
        g._yielded.append(g.batch_indices)
        return batch


def _raise_message(g: Guarded, job: Job, findings: list[SampleFinding], bad: list[Any]) -> str:
    parts = []
    if findings:
        what = ", ".join(sorted({f"{f.check} in {f.key!r}" for f in findings}))
        parts.append(f"bad values ({what})")
    stream = g._stream is not None
    if job.failures:
        f = job.failures[0]
        where = g._where(f)
        parts.append(
            f"{len(job.failures)} failed to load ({named_as(g, f.index)}"
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


def _budget_message(g: Guarded, job: Job) -> str:
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
            f"{named_as(g, last.index)}{f' ({where})' if where else ''}: {last.error}"
            if last
            else "?"
        )
        + ". So many failures usually mean the data itself is unreachable (an unmounted or "
        "stale network volume, a moved folder, missing permissions), not a few bad files. "
        "Fix the data and rerun (the quarantine keeps the failed indices: delete its "
        "load_error records if they were not really bad), or raise max_load_errors (None: no "
        "limit)."
    )
