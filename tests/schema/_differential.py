"""The differential harness: one schema and one file, validated by pandera and by datacheck.

Both answers become sets of ``(column, check, row)`` sites (pandera's check names mapped to
datacheck's); what differs must be explained by an entry of
``datacheck.schema._compile.DIFFERENCES``, or the case fails.
"""

from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pandera.pandas as pa_
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

import datacheck
from datacheck.checks._pandas import RANGE_NAMES

Site = tuple[Any, str, Any]
"""(column, check, row): row None for column- and file-level findings."""
SEVERITY: dict[tuple[str, Site], str] = {}
"""Severity of each site, by side (``pandera`` / ``datacheck``), of the last comparison."""


@dataclass
class Case:
    """A schema, the data (an Arrow table: NaN and null kept apart), and where it runs."""

    name: str
    schema: pa_.DataFrameSchema
    data: pa.Table
    formats: tuple[str, ...] = ("parquet", "csv")
    allowed: frozenset[str] = field(default_factory=frozenset)
    """DIFFERENCES keys this case may show beyond the ones every case may show."""
    row_group_size: int | None = 2
    index: pd.Index | None = None
    """A pandas index to store in the Parquet file (written through pandas)."""


def write(case: Case, fmt: str, folder: Path) -> Path:
    path = folder / f"data.{fmt}"
    if case.index is not None:
        df = case.data.to_pandas()
        df.index = case.index
        df.to_parquet(path, row_group_size=case.row_group_size)
    elif fmt == "parquet":
        pq.write_table(case.data, path, row_group_size=case.row_group_size)
    else:
        pacsv.write_csv(case.data, path)
    return path


def _read(path: Path) -> pd.DataFrame:
    if path.suffix == ".csv":
        return pd.read_csv(path)  # both skip blank lines (a lone null in a one-column CSV)
    return pd.read_parquet(path)


def _name(schema: Any, ctx: str, column: Any, number: Any) -> tuple[str, bool]:
    """A failure case's check name in datacheck's words, and whether it only warns."""
    if number is None or (isinstance(number, float) and math.isnan(number)):
        return "", False
    n = int(number)
    if ctx == "Column":
        check = _column(schema, column).checks[n]
    elif ctx == "Index":
        check = schema.index.checks[n]
    else:
        check = schema.checks[n]
    name = "out_of_range" if check.name in RANGE_NAMES else check.name
    name = "extreme" if name == "max_abs" else name
    return name, bool(check.raise_warning)


def _column(schema: Any, name: str) -> Any:
    if name in schema.columns:
        return schema.columns[name]
    import re

    return next(c for k, c in schema.columns.items() if c.regex and re.match(k, name))


_PANDERA_CHECKS = {
    "not_nullable": "null",
    "field_uniqueness": "unique",
    "multiple_fields_uniqueness": "unique",
    "column_in_schema": "schema",
    "column_in_dataframe": "schema",
    "column_ordered": "schema",
    "dataframe_column_labels_unique": "schema",
}


def pandera_sites(schema: Any, path: Path) -> tuple[set[Site], set[Site]]:
    """pandera's failure cases as sites; the second set holds the NaN values it calls null.
    Severities (a ``raise_warning`` check's failures are warnings) go to :data:`SEVERITY`."""
    SEVERITY.clear()
    quiet = copy.deepcopy(schema)  # warnings are failure cases too, for the comparison
    for c in [*quiet.columns.values(), quiet]:
        for check in c.checks:
            check.raise_warning = False
    if quiet.index is not None:
        for check in quiet.index.checks:
            check.raise_warning = False
    df = _read(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quiet.validate(df, lazy=True)
        return set(), set()
    except pa_.errors.SchemaErrors as exc:
        cases = exc.failure_cases
    out: set[Site] = set()
    nan_null: set[Site] = set()
    for r in cases.itertuples():
        ctx, col, chk = r.schema_context, r.column, str(r.check)
        row = None if r.index is None or pd.isna(r.index) else r.index
        if row is not None:  # "rows": datacheck names the row in the file, not the label
            row = int(df.index.get_indexer([row])[0])
        if ctx == "Index":
            col = "<index>"
        elif (
            ctx == "DataFrameSchema" and r.check_number is not None and not pd.isna(r.check_number)
        ):
            col = None  # a schema-level check: pandera names each column, datacheck the row
        if chk in _PANDERA_CHECKS:
            name = _PANDERA_CHECKS[chk]
            if chk == "multiple_fields_uniqueness":
                col = ",".join(
                    schema.unique if not isinstance(schema.unique, str) else [schema.unique]
                )
            if chk in (
                "column_in_schema",
                "column_in_dataframe",
                "column_ordered",
                "dataframe_column_labels_unique",
            ):
                col, row = r.failure_case, None
            if (
                chk == "not_nullable"
                and isinstance(r.failure_case, float)
                and math.isnan(r.failure_case)
            ):
                nan_null.add((col, "nan", row))
        elif chk.startswith(("dtype(", "coerce_dtype(", "field_name(")):
            name = "schema"
        else:
            name, _ = _name(schema, ctx, r.column, r.check_number)
            if isinstance(r.failure_case, str) and r.failure_case.startswith(
                ("TypeError(", "AttributeError(", "ValueError(")
            ):
                row = None
        if chk.startswith("column_in_dataframe") or name == "schema" and chk.startswith("dtype("):
            row = None
        out.add((col, name, row))
        warning = chk not in _PANDERA_CHECKS and name != "schema"
        warning = warning and _name(schema, ctx, r.column, r.check_number)[1]
        SEVERITY["pandera", (col, name, row)] = "warning" if warning else "error"
    return out, nan_null


def datacheck_sites(
    schema: Any, path: Path, out: Path, index_name: str | set[str] | None
) -> tuple[set[Site], pd.DataFrame]:
    report = datacheck.scan(path, schema=schema, out=out)
    f = report.findings
    sites = set()
    for r in f.itertuples():
        col = None if pd.isna(r.column) else r.column
        names = {index_name} if isinstance(index_name, str) else set(index_name or ())
        if col is not None and col in names:
            col = "<index>"
        site = (col, r.check, None if pd.isna(r.row) else int(r.row))
        sites.add(site)
        SEVERITY["datacheck", site] = r.severity
    return sites, f


def explain(
    case: Case,
    fmt: str,
    pandera: set[Site],
    nan_null: set[Site],
    ours: set[Site],
    findings: pd.DataFrame,
    data: pd.DataFrame,
) -> list[str]:
    """The differences no DIFFERENCES entry explains (empty: the case passes)."""
    problems = []
    values = {}
    for col in data.columns:
        values[col] = data[col].tolist()

    def value(col: Any, row: Any) -> Any:
        try:
            return values[col][row]
        except (KeyError, IndexError, TypeError):
            return None

    def is_inf(v: Any) -> bool:
        return isinstance(v, float) and math.isinf(v)

    if "coerce" in case.allowed:  # only the values that cannot be cast must agree
        pandera = {p for p in pandera if p[1] == "schema" and p[2] is not None}
        ours = {o for o in ours if o[1] == "schema" and o[2] is not None}
    for site in pandera - ours:
        col, check, row = site
        v = value(col, row)
        if check == "null" and (col, "nan", row) in ours:
            continue  # "nan": NaN is not null
        if check != "null" and is_inf(v) and (col, "inf", row) in ours:
            continue  # "inf": Inf is an inf finding
        if check == "schema" and row is None and (fmt == "csv" or "dtype" in case.allowed):
            continue  # "dtype": the stored type (text formats: read as the schema says)
        problems.append(f"pandera only: {site} (value {v!r})")
    for site in ours - pandera:
        col, check, row = site
        v = value(col, row)
        if check == "nan":
            continue  # "nan": NaN is always reported
        if check == "inf":
            continue  # "inf"
        if check == "extreme" and (col, "extreme", row):
            sev = findings[(findings.column == col) & (findings.check == "extreme")].severity
            if set(sev) == {"warning"}:
                continue  # "fp16": datacheck's fp16 overflow warning
        if check == "schema" and row is None and fmt == "csv":
            continue  # "dtype": a text file's column has the type Arrow infers
        problems.append(f"datacheck only: {site} (value {v!r})")
    for site in pandera & ours:  # the same finding must be as severe on both sides
        theirs, mine = SEVERITY.get(("pandera", site)), SEVERITY.get(("datacheck", site))
        if theirs != mine:
            problems.append(f"severity of {site}: pandera {theirs}, datacheck {mine}")
    return problems


def run(case: Case, fmt: str, folder: Path) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    path = write(case, fmt, folder)
    index_name = set()
    if case.index is not None:
        index_name.add(case.index.name or "__index_level_0__")
    if case.schema.index is not None:
        index_name.add(case.schema.index.name or "__index_level_0__")
    pandera, nan_null = pandera_sites(case.schema, path)
    ours, findings = datacheck_sites(case.schema, path, folder / "out", index_name)
    data = _read(path)  # values as pandas read them: rows line up with pandera's
    return explain(case, fmt, pandera, nan_null, ours, findings, data)
