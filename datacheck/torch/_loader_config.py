"""What :class:`~datacheck.torch.GuardedLoader` checks and does: its config and its counters."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from datacheck.checks._registry import FITS, FP16_MAX, OUT_OF_RANGE, Severity
from datacheck.checks._rules import Range
from datacheck.errors import UsageError

ON_BAD = ("drop", "raise", "skip_batch")
DROP_ON = ("error", "warning")
LOAD_ERROR_GRACE = 10
"""A fractional ``max_load_errors`` is enforced only once more samples than this failed to load,
so the first few failures of a run never trip it."""

PathOf = Callable[[int], "str | os.PathLike[str] | None"] | Sequence["str | os.PathLike[str]"]
"""A dataset's file per index: a callable ``index -> path`` or a sequence indexed by it."""


@dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    """What :class:`GuardedLoader` checks and what it does with bad samples."""

    quarantine: str | os.PathLike[str] | None = None
    """Folder of the per-rank append-only manifests (None: nothing written)."""
    device: str | torch.device | None = None
    """Where to check; batches are moved there and yielded there (None: left where they are)."""
    on_bad: str = "drop"
    """``drop`` the bad samples, ``raise`` BadSampleError, or ``skip_batch`` (whole batch)."""
    drop_on: str = "error"
    """Lowest severity that makes a sample bad: ``error`` (default; ``extreme`` is only counted
    and logged) or ``warning`` (warnings are quarantined and dropped too)."""
    max_abs: float | None | Mapping[str, float | None] = FP16_MAX
    """Bound on |x| of floating leaves (``extreme``, a warning); or per key / glob; None: none."""
    fits: str | None = None
    """The dtype you train in (``fp16``, ``bf16``): a floating input beyond its range is an
    error (``fp16_safe`` / ``bf16_safe``, as the schema's ``fits:``). None: no such check."""
    ranges: Mapping[str, tuple[float | None, float | None] | Range] = field(default_factory=dict)
    """Inclusive ``(min, max)`` per key or glob pattern (``out_of_range``), e.g. token ids."""
    skip_quarantined: bool = True
    """Do not load indices the quarantine folder already holds (sampler-level filtering)."""
    exclude: Any = frozenset()
    """More samples never to load: dataset indices, file paths, a scan ``Report`` (its corrupt
    files) or its ``exclusion_list()`` DataFrame. Paths need a dataset that lists its files."""
    key_fn: Callable[[Any], Any] | None = None
    """A stream sample's identity, ``key_fn(sample) -> key`` (a str or int, or a ``(source,
    key)`` pair), run on each sample before your collate_fn; None: the pipeline's own (a
    ``__key__``/``__url__`` field, MosaicML shard and row, litdata chunk and row)."""
    path_of: PathOf | None = None
    """The file of each dataset index, for datasets without ImageFolder's ``samples`` (used by
    path exclusions and named in ``load_error`` records)."""
    load_errors: tuple[type[BaseException], ...] = (Exception,)
    """Exceptions from loading a sample that quarantine it as ``load_error`` (others propagate);
    ``()`` turns catching off (the DataLoader then runs your Dataset untouched)."""
    max_load_errors: int | float | None = 0.01
    """Raise once more samples than this failed to load: a count (int) or a fraction (float
    < 1) of the samples seen; None: no limit. A broken mount must not drop the whole dataset."""
    allow_empty: bool = False
    """With ``drop``, yield a zero-size batch instead of skipping a batch that lost every sample."""
    deferred: bool = False
    """Resolve each batch one batch later so the host never waits on the check (lags one step)."""
    shard: bool | None = None
    """Under DDP (an initialised process group of 2+ ranks), give each rank its own share:
    None (auto) injects a DistributedSampler in place of the DataLoader's own samplers, keeps a
    DistributedSampler, and deals out the batches of any other sampler that gives every rank
    the same ones (see ``_loader_shard``); False: every rank reads everything; True: as auto,
    and refuse a sampler that already differs by rank."""
    coordinate: bool | None = None
    """Agree across ranks on skips and exclusions (collectives); None: auto under DDP."""
    check_in_workers: bool | None = None
    """Flag bad samples in the DataLoader workers; None: when batches stay on CPU with workers."""
    fsync: bool = False
    """fsync the manifest after each bad batch (survives power loss, not just a crash)."""
    non_blocking: bool = True
    """Copy batches to ``device`` with ``non_blocking`` (asynchronous from pinned memory)."""

    def __post_init__(self) -> None:
        _one_of("on_bad", self.on_bad, ON_BAD)
        _one_of("drop_on", self.drop_on, DROP_ON)
        if self.fits is not None:
            _one_of("fits", self.fits, tuple(FITS))
        bounds = self.max_abs.values() if isinstance(self.max_abs, Mapping) else [self.max_abs]
        for b in bounds:
            if b is not None and not float(b) > 0:
                raise UsageError(f"max_abs={b!r} must be a positive number or None")
        object.__setattr__(self, "ranges", {k: _as_range(k, v) for k, v in self.ranges.items()})
        _check_budget(self.max_load_errors)
        if self.shard not in (None, True, False):
            raise UsageError(f"shard={self.shard!r}: give None (auto), True or False")
        if not isinstance(self.load_errors, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in self.load_errors
        ):
            raise UsageError(
                f"load_errors={self.load_errors!r} must be a tuple of exception classes, "
                "e.g. (OSError,); () turns catching off"
            )
        if self.device is not None:
            try:
                object.__setattr__(self, "device", torch.device(self.device))
            except (RuntimeError, TypeError) as exc:
                raise UsageError(f"device={self.device!r} is not a torch device: {exc}") from exc

    @property
    def drop_severity(self) -> Severity:
        """The lowest severity that makes a sample bad."""
        return Severity(self.drop_on)


def _one_of(name: str, value: Any, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise UsageError(f"{name}={value!r} is not valid; use one of {', '.join(valid)}")


def _check_budget(value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"max_load_errors={value!r}: give a count, a fraction < 1, or None")
    if isinstance(value, float) and not 0.0 <= value < 1.0:
        raise UsageError(
            f"max_load_errors={value!r}: a float is a fraction of the samples seen and must be "
            "in [0, 1); give an int for a count"
        )
    if value < 0:
        raise UsageError(f"max_load_errors={value!r} must not be negative")


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


def over_budget(budget: int | float | None, errors: int, seen: int) -> bool:
    """Whether ``errors`` load failures among ``seen`` samples exceed ``max_load_errors``."""
    if budget is None:
        return False
    if isinstance(budget, float):
        return errors > LOAD_ERROR_GRACE and errors > budget * seen
    return errors > budget


@dataclass
class LoaderStats:
    """Counters since the loader was built; read them from the training loop."""

    batches: int = 0
    """Batches checked."""
    checked: int = 0
    """Samples loaded and checked."""
    bad: int = 0
    """Samples that failed a check at ``drop_on`` severity or failed to load (quarantined)."""
    load_errors: int = 0
    """Samples whose loading raised (quarantined as ``load_error``; part of ``bad``)."""
    warned: int = 0
    """Samples with findings below ``drop_on`` (e.g. ``extreme``): counted, logged, kept."""
    dropped: int = 0
    """Bad samples removed from yielded batches (``drop``) or from skipped batches."""
    skipped_batches: int = 0
    """Batches not yielded (``skip_batch``, emptied by ``drop``, or skipped by another rank)."""
    skipped_samples: int = 0
    """Good samples not yielded because their batch was skipped."""
    excluded: int = 0
    """Excluded indices (quarantined, ``exclude=``, ``exclude()``) the loader did not yield."""
    yielded: int = 0
    """Samples yielded to the training loop."""

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def as_index_set(values: Iterable[Any]) -> frozenset[int]:
    """Dataset indices from ints (numpy/torch integers too); refuses anything else."""
    out = set()
    for v in values:
        try:
            out.add(int(v))
        except (TypeError, ValueError):
            raise UsageError(f"exclude: {v!r} is neither a dataset index nor a path") from None
    return frozenset(out)
