"""``.pt`` / ``.pth`` files: a tensor, a dict / list / tuple of tensors, or a list of samples.

Loaded with ``torch.load(weights_only=True)`` (memory-mapped when the file is in torch's zip
format), so a pickle payload never runs: a file that needs more than tensors and plain
containers is reported as ``corrupt``.  torch is imported here only, when a ``.pt`` file is
actually read.

Layouts and keys (the manifest ``column``):

* a tensor -> key ``tensor``; its first axis is the sample index;
* a dict -> its keys (nested dicts joined with ``.``), a list/tuple of tensors -> ``0``, ``1``, ...;
* a list/tuple whose items are all dicts/lists/tuples -> a list of samples: the sample index is
  the position in the list, keys come from each sample.
"""

from __future__ import annotations

import io
import pickle
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from datacheck.formats import Chunk, Format, Opened, WorkUnit, memory_budget, mib
from datacheck.formats._tensor_common import (
    SampleBatcher,
    Source,
    TensorFileError,
    opened,
    pickle_error,
)
from datacheck.formats._tensor_numpy import SINGLE_KEY


def load_pt(source: str | bytes) -> Any:
    """``torch.load`` with ``weights_only=True``; pickle-only content -> :class:`TensorFileError`."""
    import torch

    zipped = False
    if isinstance(source, str):
        with open(source, "rb") as fh:
            zipped = fh.read(4) == b"PK\x03\x04"
    target: Any = source if isinstance(source, str) else io.BytesIO(source)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns about pickle protocols it tolerates
            return torch.load(target, map_location="cpu", weights_only=True, mmap=zipped)
    except pickle.UnpicklingError as exc:
        if "weights only" in str(exc).lower():
            raise pickle_error(f"a pickled object beyond tensors{_unpickler_detail(exc)}") from exc
        raise TensorFileError(f"not a loadable torch file: {exc}") from exc


def _unpickler_detail(exc: Exception) -> str:
    """torch's one useful line ("Unsupported global: GLOBAL builtins.exec ...") if present."""
    for line in str(exc).splitlines():
        if "WeightsUnpickler error:" in line:
            detail = line.split("WeightsUnpickler error:", 1)[1].split(" was not", 1)[0].strip()
            return f" ({detail[:120]})"
    return ""


def _strided() -> Any:
    import torch

    return torch.strided


def _dtype_name(t: Any) -> str:
    import torch

    name = str(t.dtype).removeprefix("torch.")
    return name if t.layout == torch.strided else f"{name} ({t.layout})"


def to_numpy(t: Any) -> np.ndarray | None:
    """A CPU strided tensor as NumPy (bfloat16 and other numpy-less types widened to float32)."""
    import torch

    if t.layout != torch.strided or t.is_quantized or t.is_complex():
        return None
    t = t.detach()
    if t.dtype in (torch.bfloat16,) or t.dtype.is_floating_point and t.dtype.itemsize == 1:
        t = t.to(torch.float32)
    try:
        return t.numpy()
    except (TypeError, RuntimeError):  # dtypes numpy has no equivalent for (uint16/32 on old torch)
        return None


def _sparse_values(t: Any) -> Any:
    """A sparse COO tensor's stored values (checked as a vector: densifying could take any
    amount of memory), once its indices are known to lie inside its shape."""
    import torch

    try:
        torch._validate_sparse_coo_tensor_args(t._indices(), t._values(), t.size())
    except RuntimeError as exc:
        raise ValueError(f"sparse tensor is invalid: {exc}") from exc
    return t._values()


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Tensors and numbers of a nested dict/list/tuple by dotted key; other leaves dropped."""
    import torch

    out: dict[str, Any] = {}
    if isinstance(obj, torch.Tensor) and obj.layout == torch.sparse_coo:
        out[f"{prefix or SINGLE_KEY}.values"] = _sparse_values(obj)
    elif isinstance(obj, torch.Tensor):
        out[prefix or SINGLE_KEY] = obj
    elif isinstance(obj, (bool, int, float)):
        out[prefix or SINGLE_KEY] = torch.tensor(obj)
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}.{i}" if prefix else str(i)))
    return out


def is_sample_list(obj: Any) -> bool:
    return (
        isinstance(obj, (list, tuple))
        and len(obj) > 0
        and all(isinstance(v, (Mapping, list, tuple)) for v in obj)
    )


def _check_view(key: str, t: Any, budget: float) -> None:
    """Refuse a view larger than its storage (stride 0, overlapping strides) past ``budget``:
    1.6 KB can declare 2**40 elements over one stored value, and reading them took minutes."""
    logical = t.numel() * t.element_size()
    stored = t.untyped_storage().nbytes()
    if logical > stored and logical > budget:
        raise TensorFileError(
            f"tensor {key!r} views {logical} bytes over a storage of {stored} (strides "
            f"{tuple(t.stride())}): more than the {mib(budget)} a unit may decode at once"
        )


def _sources(tensors: dict[str, Any], budget: float = float("inf")) -> list[Source]:
    out = []
    for key, t in tensors.items():
        if t.layout == _strided():
            _check_view(key, t, budget)
        probe = to_numpy(t.reshape(-1)[:1]) if t.numel() else to_numpy(t)
        dtype, shape = _dtype_name(t), tuple(t.shape)
        if probe is None:
            out.append(Source(key, shape, dtype, t.element_size(), None))
            continue

        def read(lo: int, hi: int, t: Any = t) -> np.ndarray:
            return to_numpy(t if t.dim() == 0 else t[lo:hi])  # type: ignore[return-value]

        out.append(Source(key, shape, dtype, probe.dtype.itemsize, read))
    return out


def sample_arrays(
    sample: Any, columns: dict[str, str], prefix: str = "", budget: float = float("inf")
) -> dict[str, np.ndarray]:
    """One sample's numeric arrays by key; records each key's dtype in ``columns``."""
    arrays: dict[str, np.ndarray] = {}
    for key, t in flatten(sample, prefix).items():
        columns.setdefault(key, _dtype_name(t))
        if t.layout == _strided():
            _check_view(key, t, budget)
        arr = to_numpy(t)
        if arr is not None:
            arrays[key] = arr
    return arrays


def _sample_chunks(samples: Any, columns: dict[str, str], budget: float) -> Iterator[Chunk]:
    batcher = SampleBatcher()
    for i, sample in enumerate(samples):
        yield from batcher.add(i, sample_arrays(sample, columns, budget=budget))
    yield from batcher.finish(len(samples))


class PtFormat(Format):
    name = "pt"
    extensions = (".pt", ".pth")
    tabular = False

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        obj = load_pt(unit.path)
        budget = memory_budget(options)
        if is_sample_list(obj):
            columns: dict[str, str] = {}
            chunks = _sample_chunks(obj, columns, budget)
            return Opened(columns, chunks, expected_rows=len(obj))
        tensors = flatten(obj)
        if not tensors:
            raise TensorFileError(f"holds no tensors (a {type(obj).__name__})")
        return opened(_sources(tensors, budget))
