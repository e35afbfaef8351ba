"""Unit results -> one entry per file (every file exactly once) and the quarantine manifest."""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from datacheck import findings as fnd
from datacheck.checks._registry import Severity
from datacheck.engine._result import UnitResult

__all__ = [
    "apply_extra",
    "empty_findings",
    "file_entries",
    "fold_counts",
    "media_folders",
    "null_column_findings",
    "shard_dtype_findings",
    "write_manifest",
]

MEDIA_FORMATS = ("image", "audio")
"""Formats with one file per sample, summarised per folder in the report."""


def file_entries(results: list[UnitResult]) -> list[dict[str, Any]]:
    """Merge unit results into one entry per file (every file exactly once)."""
    by_path: dict[str, list[UnitResult]] = defaultdict(list)
    for r in results:
        by_path[r.path].append(r)
    entries = []
    for path in sorted(by_path):
        if len(by_path[path]) == 1:  # a whole file: nothing to add up
            entries.append(_whole_file_entry(by_path[path][0]))
            continue
        parts = sorted(by_path[path], key=lambda r: r.part)
        counts: Counter[str] = Counter()
        sites: dict[str, Counter[str]] = defaultdict(Counter)
        for r in parts:
            counts.update(r.counts)
            for check, by_sev in r.sites.items():
                sites[check].update(by_sev)
        errors = [r.corrupt for r in parts if r.corrupt]
        if len(errors) > 1:  # one corrupt finding per file, however many units failed
            counts["corrupt"] = 1
            sites["corrupt"] = Counter({"error": 1})
        status = "corrupt" if errors else ("flagged" if counts else "ok")
        entries.append(
            {
                "path": path,
                "format": parts[0].format,
                "status": status,
                "rows": sum(r.rows for r in parts),
                "bytes": sum(r.bytes for r in parts),
                "counts": dict(sorted(counts.items())),
                "sites": {k: dict(v) for k, v in sorted(sites.items())},
                "columns": parts[0].columns,
                "error": errors[0] if errors else None,
                **({"dialect": parts[0].dialect} if parts[0].dialect else {}),
            }
        )
    return entries


def _whole_file_entry(r: UnitResult) -> dict[str, Any]:
    """:func:`file_entries`'s entry for a file read as one unit (what the sums give for one)."""
    return {
        "path": r.path,
        "format": r.format,
        "status": "corrupt" if r.corrupt else ("flagged" if r.counts else "ok"),
        "rows": r.rows,
        "bytes": r.bytes,
        "counts": dict(sorted(r.counts.items())) if r.counts else {},
        "sites": {k: dict(v) for k, v in sorted(r.sites.items())} if r.sites else {},
        "columns": r.columns,
        "error": r.corrupt if r.corrupt else None,
        **({"dialect": r.dialect} if r.dialect else {}),
    }


def media_folders(entries: list[dict[str, Any]], results: list[UnitResult]) -> list[dict[str, Any]]:
    """Per folder of images / audio files: files by status, bytes and decode throughput.

    ``decode_seconds`` is summed over workers (each unit's own time), so ``per_second`` is the
    files one worker decodes per second, whatever the number of workers.
    """
    seconds: dict[str, float] = defaultdict(float)
    for r in results:
        if r.format in MEDIA_FORMATS:
            seconds[r.path] += r.seconds
    folders: dict[tuple[str, str], dict[str, Any]] = {}
    for e in entries:
        if e["format"] not in MEDIA_FORMATS:
            continue
        folder = e["path"].replace("\\", "/").rsplit("/", 1)[0]
        d = folders.get((folder, e["format"]))
        if d is None:
            d = folders[folder, e["format"]] = {
                "folder": folder,
                "format": e["format"],
                "files": 0,
                "ok": 0,
                "flagged": 0,
                "corrupt": 0,
                "bytes": 0,
                "decode_seconds": 0.0,
            }
        d["files"] += 1
        d[e["status"]] += 1
        d["bytes"] += e["bytes"]
        d["decode_seconds"] += seconds[e["path"]]
    out = []
    for d in (folders[k] for k in sorted(folders)):
        secs = d["decode_seconds"]
        d["decode_seconds"] = round(secs, 6)  # a folder of small images decodes in < 1 ms
        d["per_second"] = round(d["files"] / secs, 1) if secs > 0 else None
        out.append(d)
    return out


_TEXT_FORMATS = {"csv", "jsonl"}


def _dtype_kind(dtype: str, fmt: str) -> str | None:
    """What shards must agree on: the type, up to differences that are not drift.

    ``null`` (a column with no value in this shard) agrees with anything; string/binary/list
    offsets widths (``large_*``, ``*_view``) are the same data; and in text formats, where
    types are inferred, integers and floats are both ``number``.
    """
    if dtype == "null":
        return None
    for prefix in ("large_", ""):
        for base in ("string", "binary", "list"):
            if dtype.startswith(prefix + base):
                return base + dtype[len(prefix + base) :]
    if dtype in ("string_view", "utf8_view"):
        return "string"
    if fmt in _TEXT_FORMATS and dtype.startswith(("int", "uint", "float", "double", "halffloat")):
        return "number"
    return dtype


_WIDTH = re.compile(r"(?<![a-z0-9])((?:u?int|float|fp|bf|[iuf])(?:8|16|32|64|128))(?![0-9])", re.I)
"""A dtype named in a file name (``int8``, ``f32``, ``i64be``, ``fp16``): files that differ
there differ in dtype by design, so its digits are no shard index."""


def _name_pattern(path: str, root: str) -> str:
    """A shard's path under its input root with every run of digits as ``#``, except the
    width of a dtype named in it: ``day=2024-01-02/part-00003.parquet`` ->
    ``day=#-#-#/part-#.parquet``; ``emb_fp16-0007.npy`` -> ``emb_fp16-#.npy``."""
    rel = path[len(root) :] if root and path.startswith(root) else path.rsplit("/", 1)[-1]
    parts = _WIDTH.split(rel.lstrip("/"))  # odd items: the dtype names, kept as they are
    return "".join(p if i % 2 else re.sub(r"\d+", "#", p) for i, p in enumerate(parts))


Shapes = Mapping[str, Sequence[int] | None]
"""A tensor file's key -> shape past the sample axis (None: a 0-d value)."""


def _group_keys(e: dict[str, Any], root: str, shapes: Shapes | None) -> list[tuple[Any, ...]]:
    """What makes files shards of one dataset.  A table: its name pattern, or its column
    names.  Tensor files: the name pattern, and the same keys holding arrays of the same
    shape past the sample axis.  Two ``.npy`` files side by side (``images.npy``,
    ``labels.npy``: both hold the one key ``tensor``) are two arrays; ``part-00001.npy`` and
    ``part-00002.npy`` holding ``(n, 3, 32, 32)`` arrays are shards of one."""
    name = (root, e["format"], "name", _name_pattern(e["path"], root))
    if shapes is None:
        return [name, (root, e["format"], "columns", tuple(sorted(e["columns"])))]
    sig = tuple((k, tuple(v) if v is not None else None) for k, v in sorted(shapes.items()))
    return [(*name, sig)]


def dataset_groups(
    entries: list[dict[str, Any]],
    roots: dict[str, str],
    shapes: Mapping[str, Shapes] | None = None,
) -> list[list[dict[str, Any]]]:
    """Files that are shards of one dataset: under the same input root, in the same format,
    and alike by :func:`_group_keys` (``shapes``: each tensor file's shapes by path).  Two
    unrelated tables side by side (``iris.parquet``, ``diabetes.parquet``) are two datasets,
    and so are ``images.npy`` beside ``labels.npy``."""
    parent = list(range(len(entries)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[tuple[Any, ...], int] = {}
    for i, e in enumerate(entries):
        root = roots.get(e["path"], "")
        for key in _group_keys(e, root, (shapes or {}).get(e["path"])):
            j = first.setdefault(key, i)
            parent[find(i)] = find(j)
    groups: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for i, e in enumerate(entries):
        groups[find(i)].append(e)
    return list(groups.values())


def shard_dtype_findings(
    entries: list[dict[str, Any]],
    roots: dict[str, str],
    shapes: Mapping[str, Shapes] | None = None,
) -> list[fnd.Finding]:
    """A column whose dtype differs from the other shards of the same dataset.

    Shards are grouped by :func:`dataset_groups`; the majority dtype of each column is the
    reference.  Corrupt files are left out (their columns are unknown).
    """
    readable = [e for e in entries if e["status"] != "corrupt" and e["columns"]]
    groups = dataset_groups(readable, roots, shapes)
    out: list[fnd.Finding] = []
    for members in groups:
        if len(members) < 2:
            continue
        dtypes: dict[str, Counter[str]] = defaultdict(Counter)
        for e in members:
            for col, dt in e["columns"].items():
                if (kind := _dtype_kind(dt, e["format"])) is not None:
                    dtypes[col][kind] += 1
        for col, seen in dtypes.items():
            if len(seen) < 2:
                continue
            ref, n_ref = seen.most_common(1)[0]
            for e in members:
                dt = e["columns"].get(col)
                if dt is not None and _dtype_kind(dt, e["format"]) not in (None, ref):
                    msg = f"dtype {dt}, other shards have {ref} ({n_ref} of {len(members)})"
                    out.append(fnd.Finding(e["path"], "schema", Severity.ERROR, msg, column=col))
    return out


MOSTLY_NULL = 0.5
"""A column is ``null_column`` in a file when at least this fraction of its rows is null."""


def null_column_findings(
    entries: list[dict[str, Any]],
    results: list[UnitResult],
    severity_of: Callable[[str], Severity | None],
    roots: dict[str, str],
) -> list[fnd.Finding]:
    """A numeric column all or mostly (:data:`MOSTLY_NULL`) null in a file: one finding for
    the file's column, beside its row-level ``null`` findings, so the summary says where the
    nulls came from (a join that matched nothing; pandas writes a NaN column as null).

    A column with no type in a file (all empty in a CSV, all null in JSON Lines) counts as
    numeric unless another shard of the same dataset (:func:`dataset_groups`) types it as
    something else (text): an empty ``note`` column is not a failed join.

    Args:
        entries: the per-file entries (corrupt files are left out).
        results: the units' results (their ``nulls``).
        severity_of: column -> the severity of its nulls (None: nulls allowed).
        roots: path -> input root, for the dataset groups.
    """
    nulls: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        if r.nulls:
            nulls[r.path].update(r.nulls)
    readable = [e for e in entries if e["status"] != "corrupt" and e["path"] in nulls]
    if not readable:
        return []
    typed = _typed_elsewhere(entries, roots)
    out: list[fnd.Finding] = []
    for e in readable:
        rows = int(e["rows"] or 0)
        for column, n in sorted(nulls[e["path"]].items()):
            severity = severity_of(column)
            if severity is None or not rows or n <= MOSTLY_NULL * rows:
                continue
            if (e.get("columns") or {}).get(column) == "null" and typed(e["path"], column):
                continue
            what = "all null" if n == rows else "mostly null"
            msg = (
                f"{n:,} of {rows:,} rows null ({n / rows:.0%}): {what} (a join that matched "
                "nothing? pandas writes NaN as null)"
            )
            out.append(fnd.Finding(e["path"], "null_column", severity, msg, column=column))
    return out


def _typed_elsewhere(
    entries: list[dict[str, Any]], roots: dict[str, str]
) -> Callable[[str, str], bool]:
    """(path, column) -> whether another shard of the file's dataset gives the column a type
    that is neither numeric nor none (text, say)."""
    readable = [e for e in entries if e["status"] != "corrupt" and e["columns"]]
    group_of: dict[str, int] = {}
    texty: dict[int, set[str]] = defaultdict(set)
    for i, members in enumerate(dataset_groups(readable, roots)):
        for e in members:
            group_of[e["path"]] = i
            for col, dt in e["columns"].items():
                if dt != "null" and not _numeric_dtype(dt):
                    texty[i].add(col)
    return lambda path, column: column in texty.get(group_of.get(path, -1), set())


def _numeric_dtype(dtype: str) -> bool:
    """An Arrow type name of numbers (or lists of them): what a loader makes a tensor of."""
    leaf = dtype.rsplit("<", 1)[-1].split(":")[-1].strip(" >]0123456789[")
    return leaf.startswith(("int", "uint", "float", "double", "halffloat", "decimal"))


def empty_findings(entries: list[dict[str, Any]]) -> list[fnd.Finding]:
    """An ``empty`` warning for each readable file with 0 rows (a header or a schema only):
    read and checked, and nothing in it to train on."""
    return [
        fnd.Finding(e["path"], "empty", Severity.WARNING, "0 rows: a header or a schema only")
        for e in entries
        if e["status"] != "corrupt" and not e["rows"]
    ]


def apply_extra(entries: list[dict[str, Any]], extra: list[fnd.Finding]) -> None:
    by_path = {e["path"]: e for e in entries}
    for f in extra:
        e = by_path[f.path]
        e["counts"][f.check] = e["counts"].get(f.check, 0) + f.count
        e["sites"].setdefault(f.check, {}).setdefault(f.severity.value, 0)
        e["sites"][f.check][f.severity.value] += 1
        if e["status"] == "ok":
            e["status"] = "flagged"


def write_manifest(
    out: Path,
    manifest_name: str,
    results: list[UnitResult],
    extra: list[fnd.Finding],
    fold: set[tuple[str, str]] | None = None,
) -> Removed:
    """Stream every unit's findings into ``quarantine.parquet`` in (path, part) order.

    ``fold``: (path, column) whose value-level bound findings (:data:`FOLDED`) a ``drift``
    finding stands for (a shard drifted whole): left out of the manifest.  Returns what was
    left out, for :func:`fold_counts`.
    """
    tmp = out / (manifest_name + ".tmp")
    writer = fnd.ManifestWriter(tmp)
    seen_corrupt: set[str] = set()
    by_path: dict[str, list[str]] = defaultdict(list)
    for path, column in fold or ():
        by_path[path].append(column)
    removed: Removed = {}
    try:
        for r in sorted(results, key=lambda r: (r.path, r.part)):
            tables = [r.table] if r.table is not None else []
            drop = r.corrupt is not None and r.path in seen_corrupt
            seen_corrupt.update([r.path] if r.corrupt else [])
            for table in fnd.iter_part(r.part_file) if r.part_file is not None else tables:
                if drop:
                    table = _drop_corrupt(table)
                if r.path in by_path:
                    table = _fold(table, by_path[r.path], removed, r.path)
                writer.append(table)
        if extra:
            writer.append(fnd.findings_table(extra))
    finally:
        writer.close()
    os.replace(tmp, out / manifest_name)  # whole or not at all
    return removed


FOLDED = ("extreme", "out_of_range")
"""Row findings of a shard's column that one ``drift`` finding stands for when the shard
drifted whole (most of its values beyond the column's bounds): the value-level bounds."""

Removed = dict[str, dict[tuple[str, str], tuple[int, int]]]
"""path -> (check, severity) -> (manifest rows, values) folded."""


def _fold(table: pa.Table, columns: list[str], removed: Removed, path: str) -> pa.Table:
    """``table`` without its :data:`FOLDED` findings in ``columns``; counts what went."""
    import pyarrow.compute as pc

    text = lambda name: table[name].cast(pa.string())  # noqa: E731
    gone = pc.and_(
        pc.is_in(text("check"), pa.array(FOLDED, pa.string())),
        pc.is_in(text("column"), pa.array(columns, pa.string())),
    ).fill_null(False)
    if not pc.any(gone).as_py():
        return table
    went = table.filter(gone).select(["check", "severity", "count"])
    went = went.cast(
        pa.schema([("check", pa.string()), ("severity", pa.string()), ("count", pa.int64())])
    )
    grouped = went.group_by(["check", "severity"]).aggregate([("count", "count"), ("count", "sum")])
    mine = removed.setdefault(path, {})
    for row in grouped.to_pylist():
        key = (row["check"], row["severity"])
        sites, values = mine.get(key, (0, 0))
        mine[key] = (sites + row["count_count"], values + row["count_sum"])
    return table.filter(pc.invert(gone))


def fold_counts(entries: list[dict[str, Any]], removed: Removed) -> None:
    """Take the folded findings (:func:`write_manifest`) out of the entries' counts, so
    ``report.json`` and the manifest agree."""
    for e in entries:
        for (check, severity), (sites, values) in removed.get(e["path"], {}).items():
            e["counts"][check] = e["counts"].get(check, 0) - values
            by_sev = e["sites"].setdefault(check, {})
            by_sev[severity] = by_sev.get(severity, 0) - sites
            if not by_sev[severity]:
                del by_sev[severity]
            if not by_sev:
                del e["sites"][check]
            if not e["counts"][check]:
                del e["counts"][check]


def _drop_corrupt(table: pa.Table) -> pa.Table:
    import pyarrow.compute as pc

    return table.filter(pc.not_equal(table["check"].cast(pa.string()), "corrupt"))
