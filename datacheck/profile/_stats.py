"""Streaming per-column statistics that merge exactly across chunks, units, files and workers.

A :class:`ColumnProfile` holds counts (rows, nulls, values, NaN, Inf), the min and max, and the
mean and M2 (sum of squared deviations) of the finite values, merged with Chan et al.'s
parallel update, so a file split into units, or a dataset spread over dask workers, profiles
to the same numbers as one pass over all of it (up to float rounding).

Quantiles come from a :class:`LogSketch`: a sparse histogram over float64 bit patterns that keeps
the sign, the exponent and the top ``MANTISSA_BITS`` bits of the mantissa.  Buckets are
log-linear (like HDR histograms / DDSketch), so any quantile of normal (non-subnormal) values is
returned within a relative error of ``RELATIVE_ERROR`` (2^-8, about 0.4%) of the exact
``numpy.quantile(..., method="lower")``.  Merging two sketches adds bucket counts, so merged
sketches are *identical* to the sketch of the concatenated data.

Everything is vectorised over the flat NumPy buffers the checks already use; no Python loop runs
over values.  The sketch costs a few ns per value and is only built when asked for
(``datacheck scan --profile``, ``datacheck infer``); the moments needed by the drift checks are
about as cheap as the value checks themselves.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from datacheck.errors import InputError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from datacheck.checks._columns import FlatColumn

__all__ = [
    "MANTISSA_BITS",
    "PROFILE_JSON",
    "QUANTILES",
    "RELATIVE_ERROR",
    "ColumnProfile",
    "LogSketch",
    "Profiler",
    "load_profile",
    "merge_profiles",
    "write_profile",
]

PROFILE_JSON = "profile.json"
PROFILE_VERSION = 1
MANTISSA_BITS = 7
"""Mantissa bits kept per bucket: 2^7 buckets per power of two."""
RELATIVE_ERROR = 2.0 ** -(MANTISSA_BITS + 1)
"""Bound on the relative error of a sketch quantile (bucket midpoint vs any value in it)."""
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
"""Quantiles written to ``profile.json`` and into inferred schemas' comments."""

_SHIFT = 52 - MANTISSA_BITS
_MAG_BITS = 11 + MANTISSA_BITS  # exponent + kept mantissa bits
_U = np.uint64


def _folded_keys(x: np.ndarray) -> np.ndarray:
    """Bucket keys as ``magnitude_key << 1 | sign``: compact for data spanning both signs.

    Works on the high 32-bit word of each float64 (sign, exponent and 20 mantissa bits hold
    everything a key needs): half the memory traffic of 64-bit shifts.
    """
    if sys.byteorder != "little":  # pragma: no cover - no big-endian CI
        b = x.view(np.uint64) >> _U(_SHIFT)
        return ((b & _U((1 << _MAG_BITS) - 1)) << _U(1)) | (b >> _U(_MAG_BITS))
    m = x.view(np.uint32)[1::2] >> np.uint32(_SHIFT - 32)  # sign | exponent | kept mantissa
    sign = m >> np.uint32(_MAG_BITS)
    m &= np.uint32((1 << _MAG_BITS) - 1)
    m += m  # << 1 (``|=``/``<<=`` on uint32 are far slower in NumPy here)
    m += sign
    return m


def _unfold(folded: np.ndarray) -> np.ndarray:
    """Folded keys -> canonical keys ``sign << _MAG_BITS | magnitude_key`` (the bit order)."""
    return (folded >> _U(1)) | ((folded & _U(1)) << _U(_MAG_BITS))


def key_values(keys: np.ndarray) -> np.ndarray:
    """The representative value (bucket midpoint) of canonical keys; the zero bucket is 0."""
    keys = np.asarray(keys, dtype=np.uint64)
    mag = keys & _U((1 << _MAG_BITS) - 1)
    bits = (mag << _U(_SHIFT)) | _U(1 << (_SHIFT - 1)) | ((keys >> _U(_MAG_BITS)) << _U(63))
    values = bits.view(np.float64).copy()
    values[mag == 0] = 0.0
    return values


@dataclass
class LogSketch:
    """A mergeable quantile sketch of finite float64 values (sparse log-linear histogram).

    ``keys`` are canonical bucket keys (sorted, unique), ``counts`` the values in each bucket.
    """

    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @classmethod
    def of(cls, x: np.ndarray) -> LogSketch:
        """Sketch of finite float64 values (NaN/Inf must be removed first)."""
        if x.size == 0:
            return cls()
        folded = _folded_keys(np.ascontiguousarray(x, dtype=np.float64))
        lo = folded.min()
        folded -= lo
        counts = np.bincount(folded.astype(np.intp, copy=False))
        nz = np.flatnonzero(counts)
        keys = _unfold(nz.astype(np.uint64) + np.uint64(lo))
        order = np.argsort(keys)
        return cls(keys[order], counts[nz][order].astype(np.int64))

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    def merge(self, other: LogSketch) -> LogSketch:
        """The sketch of both inputs together (exact: bucket counts add)."""
        if not other.keys.size:
            return self
        if not self.keys.size:
            return other
        keys, inverse = np.unique(np.concatenate([self.keys, other.keys]), return_inverse=True)
        weights = np.concatenate([self.counts, other.counts])
        counts = np.bincount(inverse, weights=weights, minlength=keys.size)
        return LogSketch(keys, np.rint(counts).astype(np.int64))

    def quantiles(self, qs: Sequence[float]) -> np.ndarray:
        """Approximate ``numpy.quantile(x, qs, method="lower")`` within ``RELATIVE_ERROR``."""
        q = np.asarray(qs, dtype=np.float64)
        if not self.keys.size:
            return np.full(q.shape, np.nan)
        values = key_values(self.keys)
        order = np.argsort(values, kind="stable")
        cum = np.cumsum(self.counts[order])
        rank = np.floor(q * (cum[-1] - 1))
        idx = np.searchsorted(cum, rank, side="right")
        return values[order][np.minimum(idx, cum.size - 1)]


def _merge_moments(
    a: tuple[int, float, float], b: tuple[int, float, float]
) -> tuple[int, float, float]:
    """Chan et al.: combine (n, mean, M2) of two disjoint samples."""
    na, ma, qa = a
    nb, mb, qb = b
    n = na + nb
    if nb == 0:
        return a
    if na == 0:
        return b
    delta = mb - ma
    return n, ma + delta * nb / n, qa + qb + delta * delta * na * nb / n


def _chunk_moments(x: np.ndarray) -> tuple[int, float, float]:
    """(n, mean, M2) of finite float64 values: a sum and a sum of squares, exact if it cancels.

    ``einsum`` rather than ``dot``: BLAS threads fight the scan's worker processes for cores.
    """
    n = x.size
    mean = float(x.sum()) / n
    sq = float(np.einsum("i,i->", x, x))
    m2 = sq - n * mean * mean
    if m2 <= 1e-8 * sq:  # catastrophic cancellation (|mean| >> std, or constant): two passes
        d = x - mean
        m2 = float(np.einsum("i,i->", d, d))
    return n, mean, m2


@dataclass
class ColumnProfile:
    """Streaming statistics of one column (for list columns: of all their elements).

    ``rows`` counts rows; ``nulls`` null cells (null rows plus null list elements); ``values``
    non-null values; ``nan`` and ``inf`` the non-finite ones; min/max/mean/M2 and the sketch
    cover the ``finite`` values.
    """

    rows: int = 0
    nulls: int = 0
    values: int = 0
    nan: int = 0
    inf: int = 0
    finite: int = 0
    min: float = math.inf
    max: float = -math.inf
    mean: float = 0.0
    m2: float = 0.0
    numeric: bool = False
    sketch: LogSketch | None = None
    """None when quantiles were not asked for."""
    lo: float = -math.inf
    hi: float = math.inf
    """The column's bounds (the schema's z-score bound): ``inner`` counts the finite values
    within them, with their own moments, so a few outliers cannot move a shard's mean."""
    inner: int = 0
    inner_mean: float = 0.0
    inner_m2: float = 0.0

    @property
    def std(self) -> float:
        """Population standard deviation (``numpy.std`` with ddof=0) of the finite values."""
        return math.sqrt(max(self.m2, 0.0) / self.finite) if self.finite else math.nan

    @property
    def bounded(self) -> bool:
        return self.lo > -math.inf or self.hi < math.inf

    @property
    def outside(self) -> int:
        """Finite values beyond the bounds (0 without bounds)."""
        return self.finite - self.inner if self.bounded else 0

    def moments(self) -> tuple[int, float, float]:
        """(n, mean, std) of the values the drift checks compare: those within the bounds
        when the column has them, else every finite value."""
        n, mean, m2 = (
            (self.inner, self.inner_mean, self.inner_m2)
            if self.bounded
            else (self.finite, self.mean, self.m2)
        )
        return n, mean, math.sqrt(max(m2, 0.0) / n) if n else math.nan

    def observe(self, arr: pa.Array, flat: FlatColumn | None = None) -> tuple[Any, Any] | None:
        """Add one Arrow array (``flat``: its flattened numeric values, None if not numeric).

        Returns what :meth:`add_values` returns, for the value checks to reuse.
        """
        self.rows += len(arr)
        if flat is None:
            self.nulls += arr.null_count
            self.values += len(arr) - arr.null_count
            return None
        self.nulls += arr.null_count if flat.row_nulls is not None else 0
        return self.add_values(flat.values, flat.valid)

    def observe_tensor(self, arr: np.ndarray, n_samples: int) -> None:
        """Add a tensor chunk (sample index on axis 0); non-numeric tensors only count rows."""
        self.rows += n_samples
        if arr.dtype.kind in "iuf":
            self.add_values(arr.reshape(-1))
        elif arr.dtype.kind == "b":
            self.values += arr.size

    def add_values(
        self, values: np.ndarray, valid: np.ndarray | None = None
    ) -> tuple[Any, Any] | None:
        """Add flat numeric values (entries where ``valid`` is False are nulls).

        Returns ``(values.min(), values.max())`` (NaN-propagating) when there are no nulls, so
        the value checks need not compute them again; else None.
        """
        self.numeric = True
        x = values if valid is None else values[valid]
        self.nulls += values.size - x.size
        self.values += x.size
        if x.size == 0:
            return None
        lo, hi = x.min(), x.max()  # NaN propagates: a cheap proof that all are finite
        raw = (lo, hi) if valid is None else None
        if x.dtype.kind == "f" and not (np.isfinite(lo) and np.isfinite(hi)):
            nan = np.isnan(x)
            self.nan += int(nan.sum())
            fin = np.isfinite(x)
            self.inf += x.size - int(fin.sum()) - int(nan.sum())
            x = x[fin]
            if x.size == 0:
                return raw
            lo, hi = x.min(), x.max()
        self._add_finite(x.astype(np.float64, copy=False), float(lo), float(hi))
        return raw

    def _add_finite(self, x: np.ndarray, lo: float, hi: float) -> None:
        self.min, self.max = min(self.min, lo), max(self.max, hi)
        chunk = _chunk_moments(x)
        self.finite, self.mean, self.m2 = _merge_moments((self.finite, self.mean, self.m2), chunk)
        if self.bounded:
            if lo < self.lo or hi > self.hi:  # some values beyond the bounds: their own pass
                x_in = x[(x >= self.lo) & (x <= self.hi)]
                chunk = _chunk_moments(x_in) if x_in.size else (0, 0.0, 0.0)
            self.inner, self.inner_mean, self.inner_m2 = _merge_moments(
                (self.inner, self.inner_mean, self.inner_m2), chunk
            )
        if self.sketch is not None:
            self.sketch = self.sketch.merge(LogSketch.of(x))

    def merge(self, other: ColumnProfile) -> ColumnProfile:
        """The profile of both inputs together (a new object)."""
        n, mean, m2 = _merge_moments(
            (self.finite, self.mean, self.m2), (other.finite, other.mean, other.m2)
        )
        sketch = None
        if self.sketch is not None and other.sketch is not None:
            sketch = self.sketch.merge(other.sketch)
        inner = _merge_moments(
            (self.inner, self.inner_mean, self.inner_m2),
            (other.inner, other.inner_mean, other.inner_m2),
        )
        return ColumnProfile(
            rows=self.rows + other.rows,
            nulls=self.nulls + other.nulls,
            values=self.values + other.values,
            nan=self.nan + other.nan,
            inf=self.inf + other.inf,
            finite=n,
            min=min(self.min, other.min),
            max=max(self.max, other.max),
            mean=mean,
            m2=m2,
            numeric=self.numeric or other.numeric,
            sketch=sketch,
            lo=self.lo,
            hi=self.hi,
            inner=inner[0],
            inner_mean=inner[1],
            inner_m2=inner[2],
        )

    def state(self) -> dict[str, Any]:
        """Everything, as JSON-ready plain values (what a work unit sends back and journals)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sketch"}
        if self.sketch is not None:
            out["sketch"] = [self.sketch.keys.tolist(), self.sketch.counts.tolist()]
        return out

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ColumnProfile:
        """Inverse of :meth:`state`."""
        kw = {k: v for k, v in state.items() if k != "sketch"}
        sk = state.get("sketch")
        if sk is not None:
            keys, counts = sk
            kw["sketch"] = LogSketch(np.asarray(keys, np.uint64), np.asarray(counts, np.int64))
        return cls(**kw)

    def to_dict(self, quantiles: Sequence[float] = QUANTILES) -> dict[str, Any]:
        """JSON-ready statistics (``None`` where undefined), with quantiles if sketched."""
        out: dict[str, Any] = {
            "rows": self.rows,
            "nulls": self.nulls,
            "values": self.values,
            "nan": self.nan,
            "inf": self.inf,
            "finite": self.finite,
        }
        if self.numeric:
            has = self.finite > 0
            out.update(
                min=self.min if has else None,
                max=self.max if has else None,
                mean=self.mean if has else None,
                std=self.std if has else None,
            )
        if self.numeric and self.bounded:
            n, mean, std = self.moments()
            out["bounds"] = {
                "lo": self.lo if math.isfinite(self.lo) else None,
                "hi": self.hi if math.isfinite(self.hi) else None,
                "outside": self.outside,
                "mean": mean if n else None,
                "std": std if n else None,
            }
        if self.sketch is not None and self.finite:
            qv = self.sketch.quantiles(quantiles)
            qv = np.clip(qv, self.min, self.max)
            out["quantiles"] = {_qname(q): float(v) for q, v in zip(quantiles, qv, strict=True)}
        return out


def _qname(q: float) -> str:
    return f"p{q * 100:g}"


class Profiler:
    """The profiles of one work unit, column by column."""

    def __init__(
        self, sketch: bool = False, bounds: Mapping[str, tuple[float, float]] | None = None
    ) -> None:
        self.sketch = sketch
        self.bounds = bounds or {}
        """Column -> (lo, hi): the values the drift checks compare (see ``ColumnProfile``)."""
        self.columns: dict[str, ColumnProfile] = {}

    def column(self, name: str) -> ColumnProfile:
        prof = self.columns.get(name)
        if prof is None:
            lo, hi = self.bounds.get(name, (-math.inf, math.inf))
            prof = ColumnProfile(sketch=LogSketch() if self.sketch else None, lo=lo, hi=hi)
            self.columns[name] = prof
        return prof


def merge_profiles(profiles: Iterable[Mapping[str, ColumnProfile]]) -> dict[str, ColumnProfile]:
    """Merge column -> profile mappings (e.g. a file's units, or all files) column by column."""
    out: dict[str, ColumnProfile] = {}
    for mapping in profiles:
        for name, prof in mapping.items():
            out[name] = out[name].merge(prof) if name in out else prof
    return out


def write_profile(
    out: Path, by_file: Mapping[str, Mapping[str, ColumnProfile]], sketched: bool
) -> dict[str, Any]:
    """Write ``profile.json``: per-file and overall statistics of every column."""
    overall = merge_profiles(by_file.values())
    doc = {
        "format_version": PROFILE_VERSION,
        "sketch": {
            "kind": "log-linear histogram",
            "mantissa_bits": MANTISSA_BITS,
            "relative_error": RELATIVE_ERROR,
        }
        if sketched
        else None,
        "quantiles": list(QUANTILES) if sketched else [],
        "columns": {name: p.to_dict() for name, p in sorted(overall.items())},
        "files": {
            path: {name: p.to_dict() for name, p in sorted(cols.items())}
            for path, cols in sorted(by_file.items())
        },
    }
    tmp = out / (PROFILE_JSON + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, allow_nan=False, default=_json_default))
    os.replace(tmp, out / PROFILE_JSON)
    return doc


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def read_profile(report_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``profile.json`` document of a report folder.

    Raises:
        InputError: if the folder has no profile (scan without ``--profile`` or references).
    """
    path = Path(report_dir) / PROFILE_JSON
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(
            f"{str(path)!r}: no profile; run `datacheck scan --profile` (or a schema with "
            "reference statistics) to write one"
        ) from None


def load_profile(report_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """Per-file, per-column statistics from ``profile.json`` as a DataFrame (one row each)."""
    import pandas as pd

    doc = read_profile(report_dir)
    rows = []
    for path, cols in doc["files"].items():
        for name, stats in cols.items():
            quantiles = stats.get("quantiles") or {}
            flat = {k: v for k, v in stats.items() if k != "quantiles"}
            rows.append({"path": path, "column": name, **flat, **quantiles})
    return pd.DataFrame(rows)
