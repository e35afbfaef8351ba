"""The scan report as data: ``report.json`` + ``quarantine.parquet`` (no views here).

``report.json`` (format version 1) holds the command's settings, summary counts and ``files``:
one entry per input file, every file exactly once, with ``path``, ``format``, ``status``
(``ok`` | ``flagged`` | ``corrupt``), ``rows``, ``bytes``, ``counts`` (bad values per check),
``sites`` (findings, the quarantine's rows, per check and severity), ``columns`` (dtype per column) and ``error``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datacheck.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FAIL_ON",
    "FORMAT_VERSION",
    "MANIFEST",
    "QUARANTINE",
    "REPORT_JSON",
    "ReportData",
    "exit_code_for",
    "write_report_json",
]

FORMAT_VERSION = 1
FINDINGS_LIMIT = 1 << 22
"""The most findings ``ReportData.findings`` loads into one DataFrame (~300 MB); past it,
``iter_findings`` reads them a batch at a time."""
REPORT_JSON = "report.json"
QUARANTINE = "quarantine.parquet"
"""The scan's quarantine: one row per finding (``datacheck.findings`` has its columns)."""
MANIFEST = QUARANTINE
"""The quarantine's old name, kept for code that reads it."""
FAIL_ON = ("error", "warning", "never")


def exit_code_for(
    sites_by_check: dict[str, dict[str, int]],
    fail_on: str,
    tolerated: dict[str, dict[str, int]] | None = None,
) -> int:
    """1 when any finding is at or above ``fail_on``, else 0; ``tolerated`` sites (per check
    and severity, within a ``mostly`` / ``--max-bad-fraction`` tolerance) do not count."""
    if fail_on == "never":
        return 0
    gating = {"error"} if fail_on == "error" else {"error", "warning"}
    spared = tolerated or {}
    hit = any(
        n - spared.get(check, {}).get(s, 0) > 0
        for check, sev in sites_by_check.items()
        for s, n in sev.items()
        if s in gating
    )
    return 1 if hit else 0


def summarise(files: list[dict[str, Any]]) -> dict[str, Any]:
    """Summary counts over the per-file entries."""
    status = Counter(f["status"] for f in files)
    values: Counter[str] = Counter()
    sites: dict[str, Counter[str]] = {}
    for f in files:
        values.update(f["counts"])
        for check, by_sev in f["sites"].items():
            sites.setdefault(check, Counter()).update(by_sev)
    return {
        "files": len(files),
        "rows": sum(f["rows"] for f in files),
        "bytes": sum(f["bytes"] for f in files),
        "status": {k: status.get(k, 0) for k in ("ok", "flagged", "corrupt")},
        "values": dict(sorted(values.items())),
        "sites": {k: dict(sorted(v.items())) for k, v in sorted(sites.items())},
        "corrupt_files": status.get("corrupt", 0),
    }


def write_report_json(
    out: Path,
    settings: dict[str, Any],
    files: list[dict[str, Any]],
    ignored: Iterable[str],
    seconds: float,
    ignored_why: Mapping[str, str] | None = None,
    media: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Write ``report.json``; ``ignored_why`` says why each ignored path was not scanned (not
    data, a FIFO, a symlink out of the input folders, ...); ``media``: per-folder
    image/audio counts and decode throughput (``summary.media``)."""
    from datacheck._version import __version__
    from datacheck.report._gate import tolerance_summary

    summary = summarise(files)
    summary["seconds"] = round(seconds, 3)
    if media:
        summary["media"] = media
    summary["tolerance"], summary["tolerated"] = tolerance_summary(out / MANIFEST, files, settings)
    summary["exit_code"] = exit_code_for(
        summary["sites"], settings.get("fail_on", "error"), summary["tolerated"]
    )
    doc = {
        "format_version": FORMAT_VERSION,
        "tool": f"datacheck {__version__}",
        "settings": settings,
        "summary": summary,
        "files": files,
        "ignored": sorted(ignored),
        "ignored_why": dict(sorted((ignored_why or {}).items())),
    }
    tmp = out / (REPORT_JSON + ".tmp")
    tmp.write_text(_report_text(doc))
    os.replace(tmp, out / REPORT_JSON)
    return doc


def _report_text(doc: dict[str, Any]) -> str:
    """``doc`` as indented JSON, except that the items of its lists (``files``, ``ignored``)
    are one compact line each: Python indents in pure Python (7 us a file entry) but writes
    compact JSON in C, and a file per line reads as well."""
    compact = json.JSONEncoder(default=str).encode
    fields = []
    for key, value in doc.items():
        if isinstance(value, list) and value:
            text = "[\n  " + ",\n  ".join(map(compact, value)) + "\n ]"
        else:  # as json.dumps(doc, indent=1) writes it, one level in
            text = json.dumps(value, indent=1, default=str).replace("\n", "\n ")
        fields.append(f" {compact(key)}: {text}")
    return "{\n" + ",\n".join(fields) + "\n}"


class ReportData:
    """A scan's results as data, read from its output folder (the views build on this).

    Attributes:
        dir: the output folder.
        data: the parsed ``report.json``.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        data: dict[str, Any] | None = None,
        _keepalive: Any = None,
    ) -> None:
        self.dir = Path(directory)
        self._keepalive = _keepalive  # e.g. a TemporaryDirectory owning self.dir
        if data is None:
            data = _read_json(self.dir)
        self.data = data

    @property
    def summary(self) -> dict[str, Any]:
        return self.data["summary"]

    @property
    def settings(self) -> dict[str, Any]:
        return self.data["settings"]

    @property
    def quarantine_path(self) -> Path:
        """``quarantine.parquet`` in the report folder: one row per finding."""
        return self.dir / QUARANTINE

    @property
    def manifest_path(self) -> Path:
        """The quarantine's path under its old name (:attr:`quarantine_path`)."""
        return self.quarantine_path

    def local_path(self, entry: dict[str, Any]) -> str:
        """Where a scanned file is now, to read it back.

        The report records absolute paths (or URLs).  When the file is not there any more but
        the data moved together with the report folder (the whole project was moved or
        copied), the path is found again relative to the report folder.

        Raises:
            InputError: the file is in neither place; the message names both.
        """
        path = entry["path"]
        if _is_url(path) or os.path.exists(path):
            return path
        candidates = [path]
        old_out = self.settings.get("out")
        if old_out and os.path.isabs(path):
            moved = os.path.normpath(
                os.path.join(self.dir.resolve(), os.path.relpath(path, old_out))
            )
            if os.path.exists(moved):
                return moved
            candidates.append(moved)
        looked = " and ".join(repr(c) for c in candidates)
        raise InputError(
            f"scanned file {path!r} is gone: looked at {looked}; restore the data where the "
            f"scan saw it, or rescan it"
        )

    @cached_property
    def schema(self) -> Any:
        """The scan's compiled schema; None without one, or when it cannot be loaded any more
        (moved or changed since the scan: views then use the default thresholds)."""
        spec = self.settings.get("schema")
        if not spec:
            return None
        from datacheck.errors import DatacheckError
        from datacheck.schema import load_schema

        try:
            return load_schema(spec)
        except DatacheckError:
            return None

    def exit_code(self, fail_on: str | None = None) -> int:
        """0 when nothing is at or above ``fail_on`` (default: the scan's setting), else 1."""
        return exit_code_for(
            self.summary["sites"],
            fail_on or self.settings.get("fail_on", "error"),
            self.summary.get("tolerated"),
        )

    @property
    def ok(self) -> bool:
        """True when the scan found nothing at or above its ``fail_on`` severity."""
        return self.exit_code() == 0

    @cached_property
    def files(self) -> pd.DataFrame:
        """One row per input file: path, format, status, rows, bytes, error, and a column per check."""
        import pandas as pd

        rows = []
        for f in self.data["files"]:
            row = {k: f.get(k) for k in ("path", "format", "status", "rows", "bytes", "error")}
            row.update({f"n_{c}": n for c, n in f["counts"].items()})
            rows.append(row)
        df = pd.DataFrame(rows, columns=["path", "format", "status", "rows", "bytes", "error"])
        if rows:
            df = pd.DataFrame(rows)
            counts = [c for c in df.columns if c.startswith("n_")]
            df[counts] = df[counts].fillna(0).astype("int64")
        return df

    @property
    def findings(self) -> pd.DataFrame:
        """The quarantine manifest as a DataFrame (one row per bad value-site); a missing
        ``row``, ``column`` or ``value`` is ``<NA>``, never a float NaN (a NaN finding's value
        is the text ``"nan"``).

        Raises:
            UsageError: the quarantine holds more than :data:`FINDINGS_LIMIT` findings (one
                DataFrame of them would not fit the memory bound): read it with
                :meth:`iter_findings` instead, a batch at a time or filtered.
        """
        import pandas as pd

        from datacheck.errors import UsageError
        from datacheck.report._manifest import manifest_rows

        n = manifest_rows(self.manifest_path)
        if n > FINDINGS_LIMIT:
            raise UsageError(
                f"report {str(self.dir)!r}: {MANIFEST} holds {n:,} findings, more than the "
                f"{FINDINGS_LIMIT:,} that .findings loads into one DataFrame; read them in "
                "batches or filtered: for df in report.iter_findings(check='nan'): ..."
            )
        frames = list(self.iter_findings())
        if not frames:
            return _frame(_empty_manifest())
        return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]

    def iter_findings(
        self, batch_rows: int = 1 << 18, **where: str | list[str]
    ) -> Iterator[pd.DataFrame]:
        """The quarantine as DataFrames of at most ``batch_rows`` findings each,
        optionally only those whose ``path``, ``column``, ``check`` or ``severity`` is the
        given value (or one of the given values): bounded memory at any number of findings.

        Raises:
            UsageError: a filter names something that is not a quarantine column.
        """
        from datacheck.errors import UsageError
        from datacheck.findings import MANIFEST_SCHEMA
        from datacheck.report._manifest import iter_manifest

        allowed = ("path", "column", "check", "severity", "value")
        bad = sorted(set(where) - set(allowed))
        if bad:
            raise UsageError(f"iter_findings({bad[0]}=...): filter on one of {', '.join(allowed)}")
        wanted = {k: [v] if isinstance(v, str) else list(v) for k, v in where.items()}
        for table in iter_manifest(
            self.manifest_path, MANIFEST_SCHEMA.names, wanted, batch_rows=batch_rows
        ):
            yield _frame(table)

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"<{type(self).__name__} {str(self.dir)!r}: {s['files']} files, {s['rows']} rows, "
            f"{s['status']['flagged']} flagged, {s['corrupt_files']} corrupt>"
        )


def _empty_manifest() -> Any:
    from datacheck.findings import MANIFEST_SCHEMA

    return MANIFEST_SCHEMA.empty_table()


def _frame(table: Any) -> pd.DataFrame:
    """A manifest table as the DataFrame ``findings`` gives (nullable integer row/count; text
    as pandas strings, so a missing value is ``<NA>`` beside a NaN finding's ``"nan"``)."""
    import pandas as pd
    import pyarrow as pa

    mapping = {
        pa.int64(): pd.Int64Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.string(): pd.StringDtype(),
    }
    return table.to_pandas(types_mapper=mapping.get)


def _is_url(path: str) -> bool:
    from datacheck.formats import _storage

    return _storage.is_url(path)


def _not_a_report(directory: Path) -> str:
    """Why ``directory`` is no scan's ``--out`` folder, and what to pass instead."""
    where = f"report {str(directory)!r}"
    looked = f"looked for {str((directory / REPORT_JSON).absolute())!r}"
    if not directory.exists():
        return f"{where}: no such folder ({looked}); pass the --out folder of a scan"
    if not directory.is_dir():
        return f"{where}: a file, not a folder; pass the --out folder of a scan"
    inside = sorted(p.parent for p in directory.glob(f"*/{REPORT_JSON}"))
    if inside:
        return f"{where}: no {REPORT_JSON} here, but {str(inside[0])!r} is a report; load that"
    return (
        f"{where}: no {REPORT_JSON} in it ({looked}), so it is no scan's --out folder; "
        f"scan it first (datacheck scan {str(directory)!r} --out dc-report), then load dc-report"
    )


def _read_json(directory: Path) -> dict[str, Any]:
    path = directory / REPORT_JSON
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(_not_a_report(directory)) from None
    except (OSError, ValueError) as exc:
        raise InputError(f"report {str(path)!r}: unreadable ({exc}); rerun the scan") from None
    if data.get("format_version") != FORMAT_VERSION:
        raise InputError(
            f"report {str(path)!r}: format version {data.get('format_version')!r}, "
            f"this datacheck reads {FORMAT_VERSION}; rerun the scan"
        )
    return data
