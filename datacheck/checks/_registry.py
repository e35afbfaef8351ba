"""The checks datacheck knows by name, declared once for every backend."""

from __future__ import annotations

import enum
from dataclasses import dataclass

FP16_MAX = 65504.0
"""Largest finite float16: a value beyond it overflows to Inf under fp16 mixed precision."""

FP16_OVERFLOW = 65519.99999999999
"""|x| above this overflows to Inf when cast to float16 (round-to-nearest-even rounds values
below 65520 down to 65504): ``float(np.nextafter(65520.0, 0.0))``."""

BF16_MAX = 3.3895313892515355e38
"""Largest finite bfloat16."""

FITS: dict[str, tuple[str, float]] = {
    "fp16": ("fp16_safe", FP16_OVERFLOW),
    "bf16": ("bf16_safe", BF16_MAX),
}
"""Training dtypes a value must fit, by name: the check reporting |x| above the limit, and the
limit (an error). The same names and limits as the schema's ``fits:`` / ``fp16_safe`` checks;
``GuardedLoader(fits=...)`` uses this table."""


class Severity(str, enum.Enum):
    """How bad a finding is; ``--fail-on`` gates on it."""

    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return 1 if self is Severity.WARNING else 2


@dataclass(frozen=True)
class CheckSpec:
    """A check's identity, shared by scans, the batch guard and reports."""

    name: str
    """Stable lowercase name used in reports and manifests."""
    severity: Severity
    """Default severity when no schema says otherwise."""
    level: str
    """``value`` (one finding per bad row/sample) or ``file`` / ``column`` (row is null)."""
    description: str


NAN = CheckSpec("nan", Severity.ERROR, "value", "a floating-point NaN (NaN is not null)")
INF = CheckSpec("inf", Severity.ERROR, "value", "+Inf or -Inf")
NULL = CheckSpec(
    "null",
    Severity.ERROR,
    "value",
    "a missing value (null, not NaN) in a numeric column: a loader turns it into NaN. An "
    "error without a schema (``--null-severity warning`` relaxes it) and where a schema "
    "column is not nullable; none where it is",
)
NULL_COLUMN = CheckSpec(
    "null_column",
    Severity.ERROR,
    "column",
    "a numeric column all or mostly null in a file (pandas writes a NaN column, a join that "
    "matched nothing, as null); row is null; at the severity of the column's nulls",
)
EXTREME = CheckSpec(
    "extreme",
    Severity.WARNING,
    "value",
    "a finite value beyond the column's bound (float16 max 65504 without a schema; the "
    "schema's max_abs otherwise)",
)
OUT_OF_RANGE = CheckSpec(
    "out_of_range", Severity.ERROR, "value", "a value outside the schema's declared range"
)
CORRUPT = CheckSpec(
    "corrupt",
    Severity.ERROR,
    "file",
    "a file that cannot be read whole (row is null); for a sample inside a container (an "
    "image member of a tar shard, a record), the sample that does not decode (its row)",
)
SCHEMA = CheckSpec(
    "schema",
    Severity.ERROR,
    "column",
    "a column missing or unexpected, or a dtype that differs from the schema or other shards",
)

DRIFT = CheckSpec(
    "drift",
    Severity.ERROR,
    "column",
    "a shard whose column statistics disagree with the reference or the other shards "
    "(mean shift, std ratio, constant, all null); row is null",
)
UNNORMALIZED = CheckSpec(
    "unnormalized",
    Severity.ERROR,
    "column",
    "a column marked normalized whose shard mean/std are far from the target; row is null",
)

CONSTANT = CheckSpec(
    "constant",
    Severity.WARNING,
    "value",
    "an image whose every pixel has one value (a blank frame), when the schema's images: "
    "section asks for it",
)
TRUNCATED = CheckSpec(
    "truncated",
    Severity.WARNING,
    "file",
    "a file shorter than its own header says that its library still reads (a WAV whose data "
    "chunk claims more bytes than the file holds: libsndfile reads the frames present, which "
    "are checked); a file its library cannot read is corrupt",
)
EMPTY = CheckSpec(
    "empty",
    Severity.WARNING,
    "value",
    "an empty document or sequence in a token dataset (at its row); a file with 0 rows, a "
    "header or a schema only (row null)",
)
DUPLICATE = CheckSpec(
    "duplicate",
    Severity.WARNING,
    "file",
    "a file byte-identical to another scanned file (the same data twice); row is null",
)

# Runtime checks (GuardedLoader): same registry, same manifest columns.
LOAD_ERROR = CheckSpec(
    "load_error",
    Severity.ERROR,
    "value",
    "a sample whose loading raised (the Dataset's __getitem__); value: the exception's type "
    "and message",
)

CHECKS: dict[str, CheckSpec] = {
    c.name: c
    for c in (
        NAN,
        INF,
        NULL,
        NULL_COLUMN,
        EXTREME,
        OUT_OF_RANGE,
        CORRUPT,
        SCHEMA,
        DRIFT,
        UNNORMALIZED,
        CONSTANT,
        TRUNCATED,
        EMPTY,
        DUPLICATE,
        LOAD_ERROR,
    )
}
"""Built-in checks by name.  Schema-declared checks report under their own names too."""


def get_check(name: str) -> CheckSpec:
    """Return a built-in check by name.

    Raises:
        KeyError: with the list of valid names, if ``name`` is not built in.
    """
    try:
        return CHECKS[name]
    except KeyError:
        raise KeyError(f"unknown check {name!r}; valid: {', '.join(sorted(CHECKS))}") from None
