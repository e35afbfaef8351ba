"""Generated pandera schemas and data for the differential suite (pandera is the oracle).

Hypothesis draws a schema over pandera's construct space (column options, every pandas
built-in check with its parameters, custom element-wise / vectorised / aggregate checks,
schema options, a stored index, ``DataFrameModel`` classes) and a table to match or not
(NaN, null, +/-Inf, extremes, values past the target dtype, fractions, odd strings, tz
datetimes, categories), written as Parquet with small row groups or as CSV.
:func:`_differential.check_generated` validates it with pandera and scans it with datacheck.

A long run, outside pytest (a disagreement is printed and counted, the run goes on)::

    python tests/schema/_generate.py --examples 3000 --seed 1
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pandera.pandas as pa_
import pyarrow as pa
from hypothesis import strategies as st

NAN, INF = float("nan"), float("inf")
C, Chk = pa_.Column, pa_.Check

FLOATS = [0.0, 1.0, -1.0, 0.5, 2.5, 3.0, 7.0, NAN, None, INF, -INF, 1e300, -1e10, 1e5, 300.0]
INTS = [0, 1, -1, 2, 3, 7, 300, -300, 2**40, 127, 128, 255, 256, None]
BOOLS = [True, False, None]
TEXT = ["a", "b", "ab", "apple", "", "1", "2.5", "7.5", "x", "True", "0", "300", "nan", None]
TEXT += ["-1", " 3", "1e3", "ba", "Apple"]
STAMPS = [pd.Timestamp(s) for s in ("2019-06-01", "2020-01-01", "2020-07-15", "2022-01-01")]
STAMPS_NONE = [*STAMPS, None]
CATS = ["red", "green", "blue", None]

KINDS = {
    "f64": (pa.float64(), FLOATS),
    "f32": (pa.float32(), [v for v in FLOATS if v != 1e300]),
    "i64": (pa.int64(), INTS),
    "i32": (pa.int32(), [v for v in INTS if v != 2**40]),
    "i8": (pa.int8(), [v for v in INTS if v is None or -128 <= v <= 127]),
    "bool": (pa.bool_(), BOOLS),
    "str": (pa.string(), TEXT),
    "ts": (pa.timestamp("ns"), STAMPS_NONE),
    "tstz": (pa.timestamp("ns", tz="UTC"), STAMPS_NONE),
    "cat": (pa.dictionary(pa.int32(), pa.string()), CATS),
}
NUMERIC = ("f64", "f32", "i64", "i32", "i8")

DTYPES: dict[str, list[Any]] = {
    "number": ["int64", "int32", "int8", "uint8", "float64", "float32", "Int64", "Float64"],
    "number_aliases": [int, float, "int", "float", "Int32", "UInt8", "float16"],
    "bool": ["bool", bool, "boolean"],
    "text": [str, "str", "string", "object"],
    "time": ["datetime64[ns]", "datetime64[ns, UTC]"],
    "category": ["category"],
}
ALL_DTYPES = [d for ds in DTYPES.values() for d in ds]


@dataclass
class Generated:
    """One example: the schema datacheck is given, the data, the format."""

    schema: Any
    """A ``DataFrameSchema`` or a ``DataFrameModel`` class."""
    table: pa.Table
    fmt: str
    row_group_size: int | None = 2
    index: pd.Index | None = None
    yaml: bool = False
    """datacheck reads the schema from pandera's ``to_yaml()`` text (when it has one)."""
    note: str = ""

    @property
    def pandera_schema(self) -> Any:
        s = self.schema
        return s.to_schema() if isinstance(s, type) else s


# --- checks --------------------------------------------------------------------------------


def _number(draw: Any) -> float | int:
    return draw(st.sampled_from([0, 1, 2, -1, 0.5, 3, 7, 2.5, 300, 100.0]))


@st.composite
def number_check(draw: Any) -> Any:
    kind = draw(st.sampled_from(["gt", "ge", "lt", "le", "in_range", "eq", "ne", "isin"]))
    kind = draw(st.sampled_from([kind, "notin", "unique_values_eq", "custom"]))
    opts = _options(draw)
    a, b = sorted([_number(draw), _number(draw)])
    if kind == "in_range":
        inc = draw(st.tuples(st.booleans(), st.booleans())) if a < b else (True, True)
        return Chk.in_range(a, b, include_min=inc[0], include_max=inc[1], **opts)
    if kind in ("isin", "notin", "unique_values_eq"):
        values = draw(st.lists(st.sampled_from([0, 1, 2, 3, 7, -1, 0.5, 300]), max_size=4))
        return getattr(Chk, kind)(values, **opts)
    if kind == "custom":
        return draw(custom_check(opts))
    return getattr(Chk, kind)(a, **opts)


@st.composite
def text_check(draw: Any) -> Any:
    kind = draw(st.sampled_from(["str_matches", "str_contains", "str_startswith"]))
    kind = draw(st.sampled_from([kind, "str_endswith", "str_length", "isin", "notin", "eq"]))
    opts = _options(draw)
    word = draw(st.sampled_from(["a", "b", "ap", "^[ab]", r"\d", "e$", "x"]))
    if kind == "str_length":
        lo = draw(st.sampled_from([None, 0, 1, 2]))
        hi = (
            draw(st.sampled_from([None, 2, 3, 5]))
            if lo is not None
            else draw(st.sampled_from([2, 3]))
        )
        return Chk.str_length(lo, hi, **opts)
    if kind in ("isin", "notin"):
        values = draw(st.lists(st.sampled_from(["a", "b", "ab", "apple", "x", "1"]), max_size=3))
        return getattr(Chk, kind)(values, **opts)
    if kind == "eq":
        return Chk.eq(draw(st.sampled_from(["a", "apple"])), **opts)
    return getattr(Chk, kind)(word.strip("^$") if kind != "str_matches" else word, **opts)


@st.composite
def time_check(draw: Any) -> Any:
    kind = draw(st.sampled_from(["gt", "ge", "lt", "le", "in_range"]))
    opts = _options(draw)
    a, b = sorted([draw(st.sampled_from(STAMPS)), draw(st.sampled_from(STAMPS))])
    if kind == "in_range":
        return Chk.in_range(a, b, **opts)
    return getattr(Chk, kind)(a, **opts)


@st.composite
def custom_check(draw: Any, opts: dict[str, Any]) -> Any:
    """Inline checks: element-wise, vectorised (a boolean Series), aggregate (one bool)."""
    shape = draw(st.sampled_from(["element_wise", "vectorised", "aggregate"]))
    n = draw(st.sampled_from([0, 1, 2]))
    if shape == "element_wise":
        return Chk(lambda x: x > n, element_wise=True, name=f"ew_gt_{n}", **opts)
    if shape == "vectorised":
        return Chk(lambda s: s >= n, name=f"vec_ge_{n}", **opts)
    return Chk(lambda s: s.max() <= 100 * n, name=f"max_le_{100 * n}", **opts)


def _options(draw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if draw(st.booleans()):
        out["ignore_na"] = draw(st.booleans())
    if draw(st.integers(0, 4)) == 0:
        out["raise_warning"] = True
    if draw(st.integers(0, 4)) == 0:
        out["n_failure_cases"] = 1
    return out


def _checks_for(kind: str) -> Any:
    if kind in NUMERIC:
        return number_check()
    if kind in ("str", "cat"):
        return text_check()
    if kind in ("ts", "tstz"):
        return time_check()
    return st.nothing()


# --- columns and schemas -------------------------------------------------------------------


@st.composite
def column(draw: Any, kind: str) -> Any:
    family = {"bool": "bool", "str": "text", "ts": "time", "tstz": "time", "cat": "category"}
    own = DTYPES.get(family.get(kind, "number"), DTYPES["number"])
    dtype = draw(st.sampled_from([None, *own, *own])) if draw(st.integers(0, 5)) else None
    if draw(st.integers(0, 3)) == 0:
        dtype = draw(st.sampled_from(ALL_DTYPES))  # any dtype, the wrong one too
    checks = draw(st.lists(_checks_for(kind), max_size=2)) if kind != "bool" else []
    out = C(
        dtype,
        checks,
        nullable=draw(st.booleans()),
        unique=draw(st.integers(0, 4)) == 0,
        coerce=draw(st.integers(0, 2)) == 0,
        required=draw(st.integers(0, 5)) > 0,
        report_duplicates=draw(st.sampled_from(["all", "exclude_first", "exclude_last"])),
    )
    if draw(st.integers(0, 5)) == 0:  # nulls are this value before any check
        out.default = DEFAULTS.get(kind, 0)
    return out


DEFAULTS = {"str": "a", "cat": "red", "bool": False, "ts": STAMPS[1], "tstz": STAMPS[1]}
DEFAULTS.update({"f64": 0.5, "f32": 0.5})


@st.composite
def values(draw: Any, kind: str, rows: int) -> pa.Array:
    t, pool = KINDS[kind]
    vals = draw(st.lists(st.sampled_from(pool), min_size=rows, max_size=rows))
    if kind == "cat":
        return pa.array(vals, pa.string()).dictionary_encode()
    return pa.array(vals, t, from_pandas=False)


@st.composite
def example(draw: Any) -> Generated:
    """A schema over one to three columns, and a table holding some of them and others."""
    rows = draw(st.integers(0, 6))
    names = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True))
    kinds = {n: draw(st.sampled_from(list(KINDS))) for n in names}
    columns = {n: draw(column(kinds[n])) for n in names}
    data = {n: draw(values(kinds[n], rows)) for n in names if draw(st.integers(0, 7)) > 0}
    if draw(st.integers(0, 3)) == 0:  # a pattern column, matching zero to two columns
        kind = draw(st.sampled_from(["f64", "i64", "str"]))
        pattern = draw(column(kind))
        pattern.regex = True
        columns[r"x_\d"] = pattern
        for n in draw(st.lists(st.sampled_from(["x_1", "x_2"]), max_size=2, unique=True)):
            data[n] = draw(values(kind, rows))
    if draw(st.integers(0, 3)) == 0:  # a column the schema does not declare
        data["z"] = draw(values(draw(st.sampled_from(["f64", "i64", "str"])), rows))
    if not data:
        data["z"] = draw(values("f64", rows))
    order = draw(st.permutations(list(data)))
    table = pa.table({n: data[n] for n in order})
    schema = pa_.DataFrameSchema(columns, **draw(schema_options(list(columns))))
    fmt = draw(st.sampled_from(["parquet", "parquet", "csv"]))
    yaml = draw(st.integers(0, 3)) == 0  # datacheck reads pandera's own YAML of it
    gen = Generated(schema, table, fmt, draw(st.sampled_from([1, 2, 3, None])), yaml=yaml)
    if fmt == "parquet" and draw(st.integers(0, 4)) == 0:  # an index pandas stores
        gen.index, schema.index = draw(index(rows))
    if draw(st.integers(0, 4)) == 0:
        gen.schema = as_model(schema) or schema
    return gen


@st.composite
def index(draw: Any, rows: int) -> tuple[pd.Index, Any]:
    """A stored index (one level, or two) and the schema's index for it (or for another)."""

    def level(name: str | None) -> tuple[list[Any], Any]:
        kind = draw(st.sampled_from(["i64", "str"]))
        pool = KINDS[kind][1][:8]  # labels unique: pandera names rows by label
        vals = draw(st.lists(st.sampled_from(pool), min_size=rows, max_size=rows, unique=True))
        checks = draw(st.lists(_checks_for(kind), max_size=1))
        dtype = draw(st.sampled_from([None, "int64", "str"]))
        spec = pa_.Index(dtype, checks, nullable=draw(st.booleans()), unique=draw(st.booleans()))
        spec.name = draw(st.sampled_from([name, name, "other", None]))
        return vals, spec

    if draw(st.booleans()):
        name = draw(st.sampled_from(["id", None]))
        vals, spec = level(name)
        return pd.Index(vals, name=name, dtype=object if None in vals else None), spec
    (v1, s1), (v2, s2) = level("k1"), level("k2")
    specs = draw(st.permutations([s1, s2]))
    if s1.name is None or s1.name == s2.name:  # the levels' names differ
        s1.name = "k1" if s2.name != "k1" else "k2"
    if s2.name is None:
        s2.name = "k2" if s1.name != "k2" else "k1"
    multi = pa_.MultiIndex(list(specs), ordered=draw(st.booleans()))
    return pd.MultiIndex.from_arrays([v1, v2], names=["k1", "k2"]), multi


@st.composite
def schema_options(draw: Any, names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if draw(st.integers(0, 3)) == 0:
        out["strict"] = draw(st.sampled_from([True, "filter"]))
    if draw(st.integers(0, 4)) == 0:
        out["ordered"] = True
    if draw(st.integers(0, 3)) == 0:
        out["coerce"] = True
    plain = [n for n in names if n != r"x_\d"]
    if plain and draw(st.integers(0, 4)) == 0:
        out["unique"] = draw(st.lists(st.sampled_from(plain), min_size=1, unique=True))
        out["report_duplicates"] = draw(st.sampled_from(["all", "exclude_first", "exclude_last"]))
    if draw(st.integers(0, 6)) == 0:
        out["dtype"] = draw(st.sampled_from(["float64", "int64", "str", "Float64"]))
    if draw(st.integers(0, 4)) == 0:
        out["add_missing_columns"] = True
    if draw(st.integers(0, 6)) == 0:  # the rows pandera drops are reported
        out["drop_invalid_rows"] = True
    if draw(st.integers(0, 5)) == 0:
        n = draw(st.sampled_from([0, 1]))
        out["checks"] = [Chk(lambda df: df.isna().sum(axis=1) <= n, name=f"row_nulls_le_{n}")]
    return out


FIELD_CHECKS = {
    "greater_than": ("gt", "min_value"),
    "greater_than_or_equal_to": ("ge", "min_value"),
    "less_than": ("lt", "max_value"),
    "less_than_or_equal_to": ("le", "max_value"),
    "equal_to": ("eq", "value"),
    "not_equal_to": ("ne", "value"),
    "isin": ("isin", "allowed_values"),
    "notin": ("notin", "forbidden_values"),
    "str_matches": ("str_matches", "pattern"),
    "str_contains": ("str_contains", "pattern"),
    "str_startswith": ("str_startswith", "string"),
    "str_endswith": ("str_endswith", "string"),
    "unique_values_eq": ("unique_values_eq", "values"),
}


def as_model(schema: Any) -> type | None:
    """The schema as a ``DataFrameModel`` class (``Field`` options, ``Optional`` for columns
    not required, a pattern as an alias with ``regex``, ``Config``, ``@check`` for inline
    element-wise checks, ``@dataframe_check``), or None where a model cannot say it."""
    from typing import Optional

    from pandera.typing import Series

    notes: dict[str, Any] = {}
    ns: dict[str, Any] = {}
    for i, (key, col) in enumerate(schema.columns.items()):
        if col.dtype is None or col.default is not None or col.report_duplicates != "all":
            return None  # Field has no report_duplicates (nor does Config)
        attr = f"col{i}"
        kwargs: dict[str, Any] = {}
        for chk in col.checks:
            if chk.name in FIELD_CHECKS and not kwargs:
                arg, stat = FIELD_CHECKS[chk.name]
                value = chk.statistics[stat]
                kwargs[arg] = sorted(value) if isinstance(value, frozenset) else value
                kwargs["ignore_na"], kwargs["raise_warning"] = chk.ignore_na, chk.raise_warning
            elif chk.name.startswith("ew_gt_") and chk.element_wise:
                n = int(chk.name.rsplit("_", 1)[1])
                fn = classmethod(lambda cls, x, n=n: x > n)
                ns[f"check{i}"] = pa_.check(attr, name=chk.name, element_wise=True)(fn)
            else:
                return None
        ann = Series[str(col.dtype)]  # type: ignore[misc]
        notes[attr] = ann if col.required else Optional[ann]  # noqa: UP045
        ns[attr] = pa_.Field(
            nullable=col.nullable,
            unique=col.unique,
            coerce=col.coerce,
            regex=col.regex,
            alias=key,
            **kwargs,
        )
    if schema.index is not None or any(c.name != "row_nulls_le_0" for c in schema.checks):
        return None
    if schema.unique and schema.report_duplicates != "all":
        return None
    if schema.checks:
        fn = classmethod(lambda cls, df: df.isna().sum(axis=1) <= 0)
        ns["frame"] = pa_.dataframe_check(name="row_nulls_le_0")(fn)
    config = {
        k: getattr(schema, k)
        for k in ("strict", "ordered", "coerce", "unique", "add_missing_columns", "dtype")
        if getattr(schema, k)
    }
    config["drop_invalid_rows"] = schema.drop_invalid_rows
    ns["__annotations__"] = notes
    ns["Config"] = type("Config", (), config)
    _MODELS.append(None)  # pandera caches a model's schema by its class name: one name each
    return type(f"Generated{len(_MODELS)}", (pa_.DataFrameModel,), ns)


_MODELS: list[None] = []


def describe(schema: Any) -> str:
    """The schema in one readable line (its checks with their options)."""

    def checks(cs: Any) -> list[str]:
        return [
            f"{c.name}{dict(c.statistics or {})}"
            + "".join(
                f" {k}={getattr(c, k)}"
                for k in ("ignore_na", "raise_warning", "element_wise", "n_failure_cases")
                if getattr(c, k) != {"ignore_na": True}.get(k, False) and getattr(c, k) is not None
            )
            for c in cs
        ]

    cols = {
        k: f"{c.dtype} nullable={c.nullable} unique={c.unique} coerce={c.coerce} "
        f"required={c.required} regex={c.regex} rd={c.report_duplicates} {checks(c.checks)}"
        for k, c in schema.columns.items()
    }
    opts = {
        k: getattr(schema, k)
        for k in ("dtype", "coerce", "strict", "ordered", "unique", "add_missing_columns")
        if getattr(schema, k)
    }
    levels = list(getattr(schema.index, "indexes", [schema.index] if schema.index else []))
    index = [
        f"{lv.name}: {lv.dtype} nullable={lv.nullable} unique={lv.unique} {checks(lv.checks)}"
        for lv in levels
    ]
    if index and hasattr(schema.index, "indexes"):
        index.append(f"ordered={schema.index.ordered}")
    return f"{cols} {opts} frame checks {checks(schema.checks)} index {index}"


# --- the long run --------------------------------------------------------------------------


def long_run(examples: int, seed: int, cli: bool = False) -> dict[str, Any]:
    """``examples`` generated examples from ``seed``; every disagreement printed, none fatal."""
    from _differential import check_generated
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    counts: Counter[str] = Counter()
    used: Counter[str] = Counter()
    problems: list[dict[str, Any]] = []
    folder = Path(tempfile.mkdtemp(prefix="dc-diff-"))

    @hseed(seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(example())
    def one(gen: Generated) -> None:
        n = sum(counts.values())
        try:
            out = check_generated(gen, folder / str(n), cli=cli)
        except Exception as exc:  # noqa: BLE001 - an exit 3 or a harness error: counted
            counts["crash"] += 1
            import traceback

            where = traceback.format_exc().strip().splitlines()[-8:]
            problems.append({"n": n, "crash": f"{type(exc).__name__}: {exc}"[:500], "at": where})
            problems[-1]["schema"] = describe(gen.pandera_schema)
            return
        counts[out.status] += 1
        used.update(out.used)
        if out.status == "disagree":
            problems.append(
                {
                    "n": n,
                    "schema": describe(gen.pandera_schema),
                    "table": str(gen.table.to_pydict())[:1000],
                    "types": str(gen.table.schema).replace("\n", "; "),
                    "fmt": gen.fmt,
                    "index": None if gen.index is None else repr(gen.index),
                    "model": isinstance(gen.schema, type),
                    "yaml": gen.yaml,
                    "row_group_size": gen.row_group_size,
                    "problems": out.problems,
                }
            )
            print(json.dumps(problems[-1], default=str), file=sys.stderr)

    start = time.time()
    one()
    return {
        "seed": seed,
        "examples": sum(counts.values()),
        "outcomes": dict(counts),
        "differences_used": dict(used),
        "seconds": round(time.time() - start, 1),
        "problems": problems,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cli", action="store_true", help="through the real CLI (slower)")
    p.add_argument("--json", type=Path, help="write the summary here")
    args = p.parse_args()
    summary = long_run(args.examples, args.seed, args.cli)
    text = json.dumps(summary, indent=1, default=str)
    if args.json:
        args.json.write_text(text)
    print(json.dumps({k: v for k, v in summary.items() if k != "problems"}))
    sys.exit(1 if summary["outcomes"].get("disagree") or summary["outcomes"].get("crash") else 0)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
