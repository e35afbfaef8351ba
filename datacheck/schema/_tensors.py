"""The ``tensors:`` section of a schema file: per-key rules for tensor datasets.

It sits beside pandera's ``columns:`` in the same YAML file (pandera never sees it)::

    tensors:
      strict: false            # true: keys not listed below are schema findings
      keys:
        image:
          dtype: float32       # or a list: [float16, float32]
          shape: [*, 3, 224, 224]   # * = any size, ... = any number of dims
          max_abs: 1000        # |x| above it -> extreme (error)
          range: [-1, 1]       # or {min: -1, max: 1}; either side may be null -> out_of_range
          fits: fp16           # fp16 | bf16: finite after the cast -> fp16_safe / bf16_safe
          required: true       # default true: a missing key is a schema finding

The first axis is the sample index: in sample-wise containers (tar shards, ``.pt`` sample lists)
dtype and shape are checked per sample (on the dims after the first).  Every mistake a user can
make here raises :class:`~datacheck.errors.SchemaError` naming the key, the value and the fix.
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from datacheck.checks._registry import BF16_MAX, FP16_MAX, FP16_OVERFLOW, Severity
from datacheck.checks._rules import Bound, ColumnRules, Range, default_rules
from datacheck.errors import SchemaError
from datacheck.findings import Finding

__all__ = ["TensorSchema", "TensorSpec", "match_shape", "parse_tensor_section", "safe_load_yaml"]

ANY_DIM = "*"
ANY_DIMS = "..."
_SECTION_KEYS = ("keys", "strict")
_RULE_KEYS = ("dtype", "fits", "max_abs", "range", "required", "shape")
_FITS = {"fp16": "fp16_safe", "float16": "fp16_safe", "bf16": "bf16_safe", "bfloat16": "bf16_safe"}
_DTYPES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
)
# |x| above this overflows to Inf when cast to float16 (round-to-nearest-even), as in schema.py.


@dataclass(frozen=True)
class TensorSpec:
    """The rules for one tensor key."""

    key: str
    dtypes: tuple[str, ...] = ()
    """Accepted dtype names; empty = any."""
    shape: tuple[int | str, ...] | None = None
    """Dims: ints, ``*`` (any size) and at most one ``...`` (any number of dims)."""
    required: bool = True
    max_abs: float | None = None
    range: tuple[float | None, float | None] | None = None
    fits: str | None = None
    """``fp16_safe`` or ``bf16_safe``."""

    def rules(self, is_float: bool) -> ColumnRules:
        """The value rules for an array of this key."""
        err = Severity.ERROR
        bounds: list[Bound] = []
        if self.max_abs is not None:
            bounds.append(Bound(self.max_abs, "extreme", err))
        elif is_float:
            bounds.append(Bound(FP16_MAX))  # the default fp16 warning
        if self.fits is not None:
            bounds.append(
                Bound(FP16_OVERFLOW if self.fits == "fp16_safe" else BF16_MAX, self.fits, err)
            )
        ranges = (Range("out_of_range", err, *self.range),) if self.range else ()
        return ColumnRules(
            nan=err if is_float else None,
            inf=err if is_float else None,
            bounds=tuple(bounds),
            ranges=ranges,
        )

    def mismatch(self, dtype: str | None, shape: tuple[int | None, ...] | None) -> str | None:
        """Why ``dtype``/``shape`` break this spec (None dims match anything), or None."""
        problems = []
        if dtype is not None and self.dtypes and dtype not in self.dtypes:
            problems.append(f"dtype {dtype}, schema says {' or '.join(self.dtypes)}")
        if shape is not None and self.shape is not None and not match_shape(self.shape, shape):
            shown = ", ".join("*" if d is None else str(d) for d in shape)
            problems.append(f"shape [{shown}], schema says {format_shape(self.shape)}")
        return "; ".join(problems) or None


@dataclass(frozen=True)
class TensorSchema:
    """The compiled ``tensors:`` section; picklable."""

    keys: Mapping[str, TensorSpec] = field(default_factory=dict)
    strict: bool = False

    def rules_for(self, key: str, is_float: bool) -> ColumnRules:
        spec = self.keys.get(key)
        return spec.rules(is_float) if spec else default_rules(is_float, True)

    def file_findings(
        self, path: str, columns: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]] | None
    ) -> list[Finding]:
        """Missing / unexpected keys; with whole-array ``shapes``, dtype and shape too."""
        err, out = Severity.ERROR, []
        for key, spec in self.keys.items():
            if key not in columns:
                if spec.required:
                    out.append(Finding(path, "schema", err, "tensor missing", column=key))
            elif shapes is not None and (msg := spec.mismatch(columns[key], shapes.get(key))):
                out.append(Finding(path, "schema", err, msg, column=key))
        if self.strict:
            for key in columns:
                if key not in self.keys:
                    msg = "unexpected tensor (schema is strict)"
                    out.append(Finding(path, "schema", err, msg, column=key))
        return out

    def sample_mismatch(self, key: str, arr: np.ndarray) -> str | None:
        """For a stack of samples: why their dtype / per-sample shape break the spec."""
        return self.shape_mismatch(key, arr.dtype.name, arr.shape[1:])

    def shape_mismatch(self, key: str, dtype: str, shape: tuple[int, ...]) -> str | None:
        """For one sample of ``shape``: why its dtype / shape break the spec."""
        spec = self.keys.get(key)
        if spec is None:
            return None
        return spec.mismatch(dtype, (None, *shape))


def format_shape(shape: tuple[int | str, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def match_shape(pattern: tuple[int | str, ...], shape: tuple[int | None, ...]) -> bool:
    """Does ``shape`` match ``pattern``?  A None dim in ``shape`` matches any pattern dim."""
    if ANY_DIMS in pattern:
        i = pattern.index(ANY_DIMS)
        head, tail = pattern[:i], pattern[i + 1 :]
        if len(shape) < len(head) + len(tail):
            return False
        return match_shape(head, shape[: len(head)]) and match_shape(
            tail, shape[len(shape) - len(tail) :]
        )
    if len(pattern) != len(shape):
        return False
    return all(s is None or p in (ANY_DIM, s) for p, s in zip(pattern, shape, strict=True))


# --- parsing -----------------------------------------------------------------------------

_FLOW_LIST = re.compile(r"(?<![\"'\w])\[[^\[\]\"'\n]*\]")


def _quote_stars(match: re.Match[str]) -> str:
    items = match.group(0)[1:-1].split(",")
    return "[" + ",".join('"*"' if item.strip() == "*" else item for item in items) + "]"


def load_tensor_yaml(text: str, load: Any) -> Any:
    """``load(text)``, accepting unquoted ``*`` dims in flow lists (``[*, 3, 224, 224]``).

    A bare ``*`` there is invalid YAML (an alias with no name), so the text is only rewritten
    (``*`` -> ``"*"``) when it does not parse as is; the original error is raised otherwise.
    """
    from datacheck.errors import SchemaError

    try:
        return load(text)
    except SchemaError:
        fixed = _FLOW_LIST.sub(_quote_stars, text)
        if fixed == text:
            raise
        try:
            return load(fixed)
        except SchemaError:
            pass
        raise


def safe_load_yaml(text: str) -> Any:
    """Bounded YAML (see :mod:`._yaml`) with unquoted ``*`` dims accepted."""
    from datacheck.schema._yaml import load_yaml

    return load_tensor_yaml(text, lambda t: load_yaml(t, "<text>"))


def _hint(name: str, valid: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(str(name), valid, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f"; valid: {', '.join(valid)}"


def _number(value: Any, what: str) -> float:
    if isinstance(value, str):  # YAML 1.1 reads 3.4e38 (no sign on the exponent) as text
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise SchemaError(f"{what}: expected a number, got {value!r}")
    return float(value)


def _parse_dtypes(value: Any, where: str) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if not isinstance(item, str):
            raise SchemaError(f"{where}: dtype must be a name like float32, got {item!r}")
        name = item.strip().lower()
        if name not in _DTYPES:
            try:
                name = np.dtype(name).name
            except TypeError:
                raise SchemaError(
                    f"{where}: unknown dtype {item!r}{_hint(name, _DTYPES)}"
                ) from None
            if name not in _DTYPES:
                raise SchemaError(
                    f"{where}: dtype {item!r} is not a numeric tensor dtype; valid: {', '.join(_DTYPES)}"
                )
        out.append(name)
    if not out:
        raise SchemaError(f"{where}: dtype list is empty")
    return tuple(out)


def _parse_shape(value: Any, where: str) -> tuple[int | str, ...]:
    if isinstance(value, str):
        text = value.strip()
        if not (text.startswith("[") and text.endswith("]")):
            raise SchemaError(f"{where}: shape must be a list like [*, 3, 224, 224], got {value!r}")
        value = [t.strip() for t in text[1:-1].split(",") if t.strip()]
    if not isinstance(value, list):
        raise SchemaError(f"{where}: shape must be a list like [*, 3, 224, 224], got {value!r}")
    dims: list[int | str] = []
    for d in value:
        if d is None or d == ANY_DIM:
            dims.append(ANY_DIM)
        elif d in (ANY_DIMS, Ellipsis):
            dims.append(ANY_DIMS)
        elif isinstance(d, str) and d.isdigit():
            dims.append(int(d))
        elif isinstance(d, int) and not isinstance(d, bool) and d >= 0:
            dims.append(d)
        else:
            raise SchemaError(
                f"{where}: shape dim {d!r} is not a size >= 0, '*' (any size) or '...' (any dims)"
            )
    if dims.count(ANY_DIMS) > 1:
        raise SchemaError(f"{where}: shape {format_shape(tuple(dims))} has more than one '...'")
    return tuple(dims)


def _parse_range(value: Any, where: str) -> tuple[float | None, float | None]:
    if isinstance(value, Mapping):
        extra = set(value) - {"min", "max"}
        if extra:
            raise SchemaError(f"{where}: range takes min and max, not {sorted(extra)}")
        lo, hi = value.get("min"), value.get("max")
    elif isinstance(value, list) and len(value) == 2:
        lo, hi = value
    else:
        raise SchemaError(
            f"{where}: range must be [min, max] or {{min: .., max: ..}}, got {value!r}"
        )
    lo = None if lo is None else _number(lo, f"{where}: range min")
    hi = None if hi is None else _number(hi, f"{where}: range max")
    if lo is None and hi is None:
        raise SchemaError(f"{where}: range needs a min or a max")
    if lo is not None and hi is not None and lo > hi:
        raise SchemaError(f"{where}: range min {lo:g} is above max {hi:g}")
    return lo, hi


def _parse_spec(key: str, body: Any, where: str) -> TensorSpec:
    at = f"{where}, tensor {key!r}"
    if body is None:
        return TensorSpec(key)
    if not isinstance(body, Mapping):
        raise SchemaError(
            f"{at}: expected a mapping of rules ({', '.join(_RULE_KEYS)}), got {body!r}"
        )
    for name in body:
        if name not in _RULE_KEYS:
            raise SchemaError(f"{at}: unknown rule {name!r}{_hint(name, _RULE_KEYS)}")
    kw: dict[str, Any] = {}
    if "dtype" in body:
        kw["dtypes"] = _parse_dtypes(body["dtype"], at)
    if "shape" in body:
        kw["shape"] = _parse_shape(body["shape"], at)
    if "max_abs" in body:
        kw["max_abs"] = _number(body["max_abs"], f"{at}: max_abs")
        if kw["max_abs"] <= 0:
            raise SchemaError(f"{at}: max_abs must be > 0, got {body['max_abs']!r}")
    if "range" in body:
        kw["range"] = _parse_range(body["range"], at)
    if "fits" in body:
        fits = body["fits"]
        if not isinstance(fits, str) or fits.lower() not in _FITS:
            raise SchemaError(
                f"{at}: fits must be fp16 or bf16, got {fits!r}{_hint(str(fits), ('fp16', 'bf16'))}"
            )
        kw["fits"] = _FITS[fits.lower()]
    if "required" in body:
        if not isinstance(body["required"], bool):
            raise SchemaError(f"{at}: required must be true or false, got {body['required']!r}")
        kw["required"] = body["required"]
    return TensorSpec(key, **kw)


def parse_tensor_section(section: Any, where: str) -> TensorSchema:
    """Compile the ``tensors:`` section of a schema file.

    Raises:
        SchemaError: for any mistake, naming the key, the value and the fix.
    """
    at = f"schema {where}, tensors"
    if not isinstance(section, Mapping):
        raise SchemaError(
            f"{at}: expected a mapping with 'keys' (and optionally 'strict'), got {section!r}"
        )
    for name in section:
        if name not in _SECTION_KEYS:
            raise SchemaError(
                f"{at}: unknown setting {name!r}{_hint(name, _SECTION_KEYS)}; "
                "list tensors under 'keys:'"
            )
    keys = section.get("keys")
    if keys is None:
        keys = {}
    if not isinstance(keys, Mapping):
        raise SchemaError(f"{at}: 'keys' must map tensor keys to rules, got {keys!r}")
    strict = section.get("strict", False)
    if not isinstance(strict, bool):
        raise SchemaError(f"{at}: strict must be true or false, got {strict!r}")
    specs = {str(k): _parse_spec(str(k), v, f"schema {where}") for k, v in keys.items()}
    return TensorSchema(specs, strict)
