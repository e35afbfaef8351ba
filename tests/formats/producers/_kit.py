"""What every producers-matrix module shares: scan what a real producer wrote, damage a copy of
it, and read the verdicts back as (file, row, column, check) sites.

Each module in this folder writes its files with the library that makes that format in real
pipelines and uses that library's own reader as the oracle: where the reader reads a file back
fine, datacheck must not call it ``corrupt``.  Import with ``from ._kit import ...``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd

import datacheck

__all__ = ["copy_of", "entries", "flip", "only_entry", "scan", "sites", "truncate"]


def scan(path: Path | str, **options: Any) -> datacheck.Report:
    """An in-process scan of one file or folder (one worker: quick and deterministic)."""
    return datacheck.scan(str(path), executor="inprocess", workers=1, **options)


def entries(report: datacheck.Report, root: Path | str | None = None) -> dict[str, dict[str, Any]]:
    """The report's per-file entries by path relative to ``root`` (by file name without it)."""
    out = {}
    for entry in report.data["files"]:
        path = Path(entry["path"])
        out[str(path.relative_to(root)) if root else path.name] = entry
    return out


def only_entry(path: Path | str, **options: Any) -> dict[str, Any]:
    """The entry of the one data file a scan of ``path`` finds."""
    (entry,) = scan(path, **options).data["files"]
    return entry


def sites(report: datacheck.Report) -> set[tuple[str, int | None, str | None, str]]:
    """(file name, row, column, check) of every finding; row and column None where absent."""
    return {
        (
            Path(r.path).name,
            None if pd.isna(r.row) else int(r.row),
            r.column if isinstance(r.column, str) else None,
            r.check,
        )
        for r in report.findings.itertuples()
    }


def copy_of(src: Path, dst: Path) -> Path:
    """A copy of a file or a whole dataset folder, to damage without touching the original."""
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    return dst


def truncate(path: Path, keep: int) -> Path:
    """Cut ``path`` to its first ``keep`` bytes (negative: drop that many from the end)."""
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    return path


def flip(path: Path, at: int, bit: int = 0x10) -> Path:
    """Flip one bit of the byte at offset ``at`` (negative: from the end)."""
    data = bytearray(path.read_bytes())
    data[at] ^= bit
    path.write_bytes(bytes(data))
    return path
