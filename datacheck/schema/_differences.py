"""The differences from pandera a scan keeps on purpose, one row each.

The README's table is made from this one, and the differential tests
(``tests/schema/_differential.py``) allow a difference between pandera and a scan only where
one of these rows explains it: each key there has the code that applies it.
"""

from __future__ import annotations

DIFFERENCES: dict[str, str] = {
    "nan": "NaN is not null: a float NaN is a `nan` finding even in a nullable column "
    "(pandera: NaN is null, so it passes a nullable column and fails a non-nullable one as "
    "`not_nullable`). Checks skip NaN unless `ignore_na: false`, as in pandera.",
    "inf": "+/-Inf is always an `inf` finding; range and magnitude checks skip it (pandera: "
    "it fails `less_than` etc.).",
    "rows": "`row` is the row in the file (0-based); pandera's index is the DataFrame index.",
    "range_name": "`in_range`, `greater_than*`, `less_than*` (and `between`, `gt`, ...) report "
    "as `out_of_range`, one finding per value however many range checks it fails.",
    "dtype": "`dtype` is compared with the file's stored (Arrow) type: `int64` means a 64-bit integer column, so an int64 column with nulls passes (pandas would read it as float64), and pandas' nullable types (`Int64`, `boolean`, `Float64`, `string`) are the Arrow types they hold; datetime/timedelta units are not compared; a mismatch is one `schema` finding for the column (pandera may list the values it could not cast). A category's categories are checked value by value: a value outside them is a `schema` finding at its row, a null is left to `nullable` (pandera also compares the categories pandas read with the schema's).",
    "unique": "`unique` (column or schema) reports under `unique`, one finding per duplicated "
    "row (a schema-level set names its columns joined by ','); it needs the file whole in one "
    "work unit and keeps those columns' values in memory. A column's nulls are ignored, as in "
    "pandera.",
    "fp16": "float columns without `max_abs` keep datacheck's own `extreme` warning "
    "(abs(x) > 65504, the float16 maximum); pandera has no such check.",
    "text_dtype": "CSV/JSON Lines store no types: a column the schema gives a numeric or `str` "
    "dtype is read as that type (a CSV cell that is not a number is a `schema` finding at its "
    "row), others as Arrow infers them (pandas may infer another).",
    "aggregate": "a check that is not element-wise (a custom vectorised check, `unique_values_eq`, a schema-level check) is evaluated once on the whole file, as pandera does: its columns are held in memory.",
    "index": "`index` levels are the columns pandas stored the index in (Parquet); with none "
    "stored, the index is the row number, as pandas reads it.",
    "coerce": "`coerce`: each value is cast as pandera casts it; a value pandera's cast fails "
    "on, or that the cast would change without a word (pandera passes these: a fraction cut "
    "to an integer, a number wrapped into a narrower integer, NaN or Inf into an integer, a "
    "float overflowing to Inf, anything but 0/1 or True/False into `bool`), is a `schema` "
    "finding at its row (where pandera fails the column as a whole, at each row it would "
    "change) and null afterwards, with no `null` finding; a null stays null (pandera fails it "
    "for numpy integer and bool dtypes, and makes it True for `bool`). The checks run on the "
    "cast values (pandera runs them on the uncast column when a value fails). A schema-level "
    "`dtype` is cast column by column (pandera casts the whole frame, or nothing when one value "
    "fails: every column then fails its dtype and is checked uncast).",
    "check_error": "a check that raises on the data (e.g. `str_matches` on integers) is one "
    "finding for the column, row null, with the exception as the value.",
    "n_failure_cases": "`n_failure_cases` limits pandera's error message only: datacheck "
    "reports every failing row.",
    "drop_invalid_rows": "`drop_invalid_rows`: the rows pandera would drop are reported.",
    "null_column": "a column at least half null in a file where the schema does not allow "
    "nulls is also one column-level `null_column` finding, beside its rows' `null` findings "
    "(pandera: the rows only).",
    "undeclared": "a column the schema does not declare (and `strict: filter` does not drop) "
    "keeps datacheck's own checks: NaN and +/-Inf are errors, abs(x) > 65504 in a float column "
    "a warning (`fp16`); nulls in it are not reported. pandera does not look at it.",
}
"""Differences from pandera kept on purpose: the README's table is made from this one."""
