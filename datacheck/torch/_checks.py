"""The torch body of the value checks, run per sample on a batch where it lives.

A batch is any nesting of dicts, lists and tuples; its *leaves* are tensors (checked when
floating, or when a rule names them) and per-sample lists of plain values (sliced alongside).
Every tensor leaf is viewed as ``[n_samples, -1]``.

The check is two steps so that the host waits at most once per clean batch:

1. :func:`launch_check` enqueues per-sample ``amin`` / ``amax`` reductions on the batch's
   device and turns them into one ``[n_leaves, n_samples]`` flag tensor (a superset of the bad
   samples: a NaN, an Inf, or a bound crossed), copied to the host without blocking.
2. :meth:`PendingCheck.result` waits for that copy (the one sync); only when a flag is set
   does it copy the flagged rows to the host and run the NumPy body
   (:func:`datacheck.checks._numpy.check_values`) on them, so names, severities and semantics
   are exactly the scan's.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from datacheck.checks._numpy import RowMap, check_values
from datacheck.checks._registry import FITS, Severity
from datacheck.checks._rules import Bound, ColumnRules, Range, range_holds
from datacheck.errors import UsageError

ROOT_KEY = "batch"
"""Key of a batch that is a single tensor."""

_SEQUENCES = (list, tuple)


@dataclass(frozen=True)
class SampleFinding:
    """One check that failed on one sample of a batch."""

    pos: int
    """Position of the sample in the batch (first dimension)."""
    key: str
    """Leaf path in the batch, e.g. ``image`` or ``inputs.0``."""
    check: str
    severity: Severity
    value: str
    """First bad value of the sample in this leaf, as text."""
    count: int
    """Number of bad values of the sample in this leaf."""


# --------------------------------------------------------------------------- batch structure


def _is_container(x: Any) -> bool:
    if isinstance(x, Mapping):
        return True
    if isinstance(x, _SEQUENCES):
        return len(x) == 0 or any(_is_container(v) or _is_array(v) for v in x)
    return False


def _is_array(x: Any) -> bool:
    return isinstance(x, (torch.Tensor, np.ndarray))


def _join(prefix: str, name: Any) -> str:
    return f"{prefix}.{name}" if prefix else str(name)


def position_name(i: int, names: Sequence[str] = ()) -> str:
    """The name of position ``i`` of a batch that is a tuple or list: the pipeline's own name
    for it (WebDataset's ``to_tuple("jpg", "cls")``), else ``item i``."""
    return names[i] if i < len(names) else f"item {i}"


def map_leaves(
    batch: Any, fn: Callable[[str, Any], Any], prefix: str = "", names: Sequence[str] = ()
) -> Any:
    """Rebuild ``batch`` with ``fn(key, leaf)`` applied to every leaf (containers kept).

    Keys are dotted paths (``inputs.1.0``, ``meta.w``); the positions of a batch that is itself
    a tuple or list are named by :func:`position_name` (``names``: the pipeline's names).
    """
    if isinstance(batch, Mapping):
        items = {k: map_leaves(v, fn, _join(prefix, k)) for k, v in batch.items()}
        return items if type(batch) is dict else _rebuild(batch, items)
    if isinstance(batch, _SEQUENCES) and _is_container(batch):
        at = [_join(prefix, i) if prefix else position_name(i, names) for i in range(len(batch))]
        seq = [map_leaves(v, fn, at[i]) for i, v in enumerate(batch)]
        if isinstance(batch, list):
            return seq
        return type(batch)(*seq) if hasattr(batch, "_fields") else type(batch)(seq)
    return fn(prefix or ROOT_KEY, batch)


def _rebuild(mapping: Mapping[Any, Any], items: dict[Any, Any]) -> Any:
    cls: Any = type(mapping)
    try:
        return cls(items)
    except TypeError:
        return items


def leaves(batch: Any, names: Sequence[str] = ()) -> list[tuple[str, Any]]:
    """All leaves of ``batch`` with their keys, in a stable order (``names``: see
    :func:`map_leaves`)."""
    out: list[tuple[str, Any]] = []
    map_leaves(batch, lambda k, v: out.append((k, v)), names=names)
    return out


def check_rows(key: str, leaf: Any, n: int) -> None:
    """Refuse a leaf whose first dimension is not the batch's number of dataset indices."""
    if isinstance(leaf, torch.Tensor | np.ndarray):
        if leaf.ndim == 0:
            return
        size = leaf.shape[0]
    elif isinstance(leaf, _SEQUENCES):
        size = len(leaf)
    else:
        return
    if size != n:
        raise UsageError(
            f"GuardedLoader: batch leaf {key!r} has {size} rows but the sampler handed {n} "
            "dataset indices to this batch; a collate_fn that merges or splits samples (e.g. "
            "sequence packing), or that returns a list of variable-length per-sample tensors, "
            "cannot be checked per sample. Pack after the guard, or pad in the collate_fn so "
            "that every leaf keeps one row per sample."
        )


def take(batch: Any, keep: list[int]) -> Any:
    """Keep the samples at positions ``keep`` (ascending) in every leaf of ``batch``."""
    index: dict[torch.device, torch.Tensor] = {}

    def _take(_key: str, leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor):
            if leaf.ndim == 0:
                return leaf
            if leaf.device not in index:
                index[leaf.device] = torch.tensor(keep, dtype=torch.long, device=leaf.device)
            return leaf.index_select(0, index[leaf.device])
        if isinstance(leaf, np.ndarray):
            return leaf if leaf.ndim == 0 else leaf[keep]
        if isinstance(leaf, _SEQUENCES):
            return type(leaf)(leaf[i] for i in keep)
        return leaf

    return map_leaves(batch, _take)


def row_of(batch: Any, pos: int) -> Any:
    """Sample ``pos`` of a batch: every leaf with a first dimension at ``pos`` (dicts and lists
    kept), what a ``key_fn`` or a content fingerprint of a batch's sample reads."""

    def _row(_key: str, leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor | np.ndarray):
            return leaf if leaf.ndim == 0 else leaf[pos]
        if isinstance(leaf, _SEQUENCES):
            return leaf[pos]
        return leaf

    return map_leaves(batch, _row)


def to_device(batch: Any, device: torch.device | None, non_blocking: bool) -> Any:
    """Move every tensor leaf to ``device`` (no-op when None)."""
    if device is None:
        return batch

    def _move(_key: str, leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor):
            return leaf.to(device, non_blocking=non_blocking)
        return leaf

    return map_leaves(batch, _move)


# --------------------------------------------------------------------------- rules per leaf


def _match(key: str, table: Mapping[str, Any]) -> tuple[bool, Any]:
    if key in table:
        return True, table[key]
    for pattern, value in table.items():
        if fnmatch.fnmatchcase(key, pattern):
            return True, value
    return False, None


MaxAbs = float | None | Mapping[str, float | None]


def unmatched_keys(batch: Any, names: Sequence[str], tables: Mapping[str, Any]) -> str | None:
    """A one-line refusal when a key (or pattern) of an option's table (``ranges=``, a
    ``max_abs=`` mapping) names no leaf of ``batch``: that check would never run; else None."""
    keys = [k for k, _ in leaves(batch, names)]
    for option, table in tables.items():
        if not isinstance(table, Mapping):
            continue
        for pattern in table:
            if not any(k == pattern or fnmatch.fnmatchcase(k, pattern) for k in keys):
                return (
                    f"GuardedLoader: {option} key {pattern!r} names no leaf of the batch, so its "
                    f"check would never run; the leaves are {', '.join(map(repr, keys))} (a "
                    "tuple batch's positions are 'item 0', 'item 1', ..., or the fields of "
                    "WebDataset's to_tuple)"
                )
    return None


def leaf_rules(
    key: str,
    dtype: torch.dtype,
    max_abs: MaxAbs,
    ranges: Mapping[str, Range],
    fits: str | None = None,
) -> ColumnRules | None:
    """The rules a leaf runs: NaN/Inf/``extreme`` on floats, ``out_of_range`` where named.

    ``max_abs`` is one bound for every floating leaf, or a mapping from key (or glob pattern)
    to a bound (None: no bound); a floating leaf absent from the mapping has no bound.
    ``fits`` (``fp16``, ``bf16``) adds the schema's ``fp16_safe`` / ``bf16_safe`` error on
    floating leaves wider than that dtype: |x| above which the value overflows it.
    """
    if dtype == torch.bool or dtype.is_complex:
        return None
    found, rng = _match(key, ranges)
    range_rules = (rng,) if found else ()
    if not dtype.is_floating_point:
        return ColumnRules(nan=None, inf=None, ranges=range_rules) if range_rules else None
    bound = _match(key, max_abs)[1] if isinstance(max_abs, Mapping) else max_abs
    bounds: tuple[Bound, ...] = (Bound(float(bound)),) if bound is not None else ()
    if fits is not None and torch.finfo(dtype).max > FITS[fits][1]:
        check, limit = FITS[fits]
        bounds += (Bound(limit, check, Severity.ERROR),)
    return ColumnRules(bounds=bounds, ranges=range_rules)


class LeafRules:
    """:func:`leaf_rules` bound to a loader's options, memoised per (key, dtype); picklable."""

    def __init__(
        self, max_abs: MaxAbs, ranges: Mapping[str, Range], fits: str | None = None
    ) -> None:
        self.max_abs, self.ranges, self.fits = max_abs, dict(ranges), fits
        self._cache: dict[tuple[str, torch.dtype], ColumnRules | None] = {}

    def __call__(self, key: str, dtype: torch.dtype) -> ColumnRules | None:
        if (key, dtype) not in self._cache:
            rules = leaf_rules(key, dtype, self.max_abs, self.ranges, self.fits)
            self._cache[key, dtype] = rules
        return self._cache[key, dtype]


RulesFor = Callable[[str, torch.dtype], "ColumnRules | None"]


# --------------------------------------------------------------------------- the check


@dataclass(frozen=True)
class _Leaf:
    key: str
    values: torch.Tensor
    """The leaf viewed as ``[n_samples, -1]``."""
    rules: ColumnRules


def _stat_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float32 if x.device.type == "mps" else torch.float64


def _row_flags(x2: torch.Tensor, rules: ColumnRules) -> torch.Tensor:
    """Per-sample flag: the sample *may* fail a rule (exact for NaN/Inf/bounds/ranges)."""
    # Two plain reductions: on CPU, amin+amax run ~8x faster than aminmax(dim=1).
    lo = x2.amin(dim=1).to(_stat_dtype(x2))
    hi = x2.amax(dim=1).to(_stat_dtype(x2))
    flags = ~(torch.isfinite(lo) & torch.isfinite(hi))  # NaN propagates through amin/amax
    for b in rules.bounds:
        flags |= (lo < -b.max_abs) | (hi > b.max_abs)
    for r in rules.ranges:
        if r.min is not None:
            flags |= lo < r.min if r.include_min else lo <= r.min
        if r.max is not None:
            flags |= hi > r.max if r.include_max else hi >= r.max
    return flags


_SQUARES = (torch.float32, torch.float64)
"""Dtypes whose sum of squares (a BLAS dot product, one vectorised pass) can prove a leaf clean."""
_PEEK = 4096
"""Values whose squares guess whether the whole leaf's sum of squares can pass its bound."""


def _clean_on_cpu(x: torch.Tensor, rules: ColumnRules) -> bool:
    """One pass over the whole leaf proving it clean (host reads are free on CPU).

    Clean leaves, the common case, then skip the per-sample reductions entirely. A float leaf
    under magnitude bounds only is proven by its sum of squares ``s = x . x`` (a BLAS dot, about
    3x faster than a min/max pass): ``s`` is NaN or Inf if any value is, and every ``x_i^2 <=
    s``, so ``s <= B^2`` means every ``|x_i| <= B``; the computed ``s`` is within a factor
    ``1 - n*u/(1 - n*u)`` of the exact sum (summation's worst-case error, ``u`` the unit
    roundoff), which the test leaves room for. Otherwise (a range, large values whose squares
    overflow or exceed the bound): the leaf's exact min and max.
    """
    if x.dtype in _SQUARES and not rules.ranges and x.is_contiguous():
        n = x.numel()
        nu = n * torch.finfo(x.dtype).eps / 2
        limit = min((b.max_abs for b in rules.bounds), default=math.inf) ** 2
        limit *= 1 - nu / (1 - nu)
        v = x.reshape(-1)
        head = v[:_PEEK]
        # the squares' sum of the first values, scaled, guesses whether the whole can pass
        if nu < 0.25 and float(torch.dot(head, head)) * (n / max(head.numel(), 1)) < limit / 2:
            s = float(torch.dot(v, v))
            if math.isfinite(s) and s <= limit:
                return True
    lo_t, hi_t = torch.aminmax(x)
    return range_holds(rules, float(lo_t), float(hi_t), True)


@dataclass
class PendingCheck:
    """A check launched on a batch; :meth:`result` waits for it (the one host sync)."""

    n: int
    checked: list[_Leaf]
    flags: torch.Tensor | None
    event: Any = None

    def result(self) -> list[SampleFinding]:
        """Findings of the batch, ordered by leaf then sample; empty for a clean batch."""
        if self.flags is None:
            return []
        if self.event is not None:
            self.event.synchronize()
        host = self.flags.numpy()
        if not host.any():
            return []
        out: list[SampleFinding] = []
        for leaf, row_flags in zip(self.checked, host, strict=True):
            rows = np.flatnonzero(row_flags)
            if rows.size:
                out.extend(_details(leaf, rows))
        return out


def flag_leaves(
    batch: Any, n: int, rules_for: RulesFor, names: Sequence[str] = ()
) -> tuple[list[_Leaf], list[torch.Tensor]]:
    """The leaves to check and their per-sample flags (``names``: see :func:`map_leaves`)."""
    checked: list[_Leaf] = []
    flags: list[torch.Tensor] = []
    for key, leaf in leaves(batch, names):
        check_rows(key, leaf, n)
        if not isinstance(leaf, torch.Tensor) or leaf.ndim == 0 or leaf.numel() == 0:
            continue
        rules = rules_for(key, leaf.dtype)
        if rules is None:
            continue
        if leaf.device.type == "cpu" and _clean_on_cpu(leaf, rules):
            continue
        x2 = leaf.reshape(n, -1)
        checked.append(_Leaf(key, x2, rules))
        flags.append(_row_flags(x2, rules))
    return checked, flags


def launch_check(
    batch: Any, n: int, rules_for: RulesFor, names: Sequence[str] = ()
) -> PendingCheck:
    """Enqueue the per-sample checks of every leaf of ``batch`` (``n`` samples)."""
    checked, flags = flag_leaves(batch, n, rules_for, names)
    if not flags:
        return PendingCheck(n, checked, None)
    stacked = torch.stack(flags)
    if stacked.device.type != "cuda":
        return PendingCheck(n, checked, stacked.cpu())
    host = torch.empty(stacked.shape, dtype=torch.bool, pin_memory=True)
    host.copy_(stacked, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return PendingCheck(n, checked, host, event)


def worker_check(
    batch: Any,
    n: int,
    flags: torch.Tensor | None,
    keys: list[str],
    rules_for: RulesFor,
    names: Sequence[str] = (),
) -> PendingCheck:
    """The :class:`PendingCheck` of a batch the worker already flagged (``GuardedCollate``)."""
    if flags is None:
        return PendingCheck(n, [], None)
    by_key = dict(leaves(batch, names))
    checked = []
    for k in keys:
        rules = rules_for(k, by_key[k].dtype)
        assert rules is not None  # the worker flagged this leaf with the same rules
        checked.append(_Leaf(k, by_key[k].reshape(n, -1), rules))
    return PendingCheck(n, checked, flags)


def _to_numpy(x: torch.Tensor) -> np.ndarray:
    if x.is_floating_point():
        # exact; and NumPy compares a float32 array with a bound *rounded to float32*
        # (65519.99.. becomes 65520), so the flagged rows are judged in float64
        x = x.to(torch.float64)
    return x.cpu().numpy()


def _details(leaf: _Leaf, rows: np.ndarray) -> list[SampleFinding]:
    """Run the NumPy body on the flagged rows of one leaf (bad batches only)."""
    index = torch.as_tensor(rows, dtype=torch.long, device=leaf.values.device)
    sub = _to_numpy(leaf.values.index_select(0, index))
    width = sub.shape[1]
    hits = check_values(sub.reshape(-1), None, RowMap(n_rows=rows.size, stride=width), leaf.rules)
    out = []
    for h in hits:
        values = h.values if h.values is not None else np.full(h.rows.size, np.nan)
        texts = pc.cast(pa.array(values, pa.float64()), pa.string()).to_pylist()  # as scans
        for r, c, v in zip(rows[h.rows].tolist(), h.counts.tolist(), texts, strict=True):
            out.append(SampleFinding(r, leaf.key, h.check, h.severity, v, c))
    return out
