"""Byte-identical files, found cheaply: ``duplicate`` findings and their content hashes.

Two files can only be byte-identical when their sizes match, so only files whose size another
file shares are looked at; of those, only the ones whose first, middle and last 64 KiB also
match another's are hashed whole (BLAKE2b-128, read in 1 MiB blocks).  A dataset of shards of
distinct sizes costs one ``stat`` each (already made by planning), same-shape tensor shards a
few small reads each; only true candidates are read again.  The hash goes into the file's
``report.json`` entry (``blake2b``); each file identical to an earlier one (in path order) gets
one ``duplicate`` warning naming it.  Files on an object store are not read again (their ETag
tells the store's own identity).
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from datacheck import findings as fnd
from datacheck.checks._registry import Severity
from datacheck.formats import _storage

__all__ = ["duplicate_findings"]

SAMPLE = 64 << 10
BLOCK = 1 << 20


def _sample(path: str, size: int) -> bytes | None:
    """First, middle and last :data:`SAMPLE` bytes (the whole file when small)."""
    try:
        with open(path, "rb") as fh:
            if size <= 3 * SAMPLE:
                return fh.read()
            parts = []
            for at in (0, size // 2, size - SAMPLE):
                fh.seek(at)
                parts.append(fh.read(SAMPLE))
            return b"".join(parts)
    except OSError:
        return None


def _hash(path: str) -> str | None:
    digest = hashlib.blake2b(digest_size=16)
    try:
        with open(path, "rb") as fh:
            while block := fh.read(BLOCK):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _groups(keys: Iterable[tuple[Any, str]]) -> list[list[str]]:
    by: dict[Any, list[str]] = defaultdict(list)
    for key, path in keys:
        if key is not None:
            by[key].append(path)
    return [sorted(paths) for paths in by.values() if len(paths) > 1]


def duplicate_findings(entries: list[dict[str, Any]]) -> list[fnd.Finding]:
    """``duplicate`` warnings for byte-identical local files; sets ``blake2b`` on the entries
    it hashed."""
    local = [e for e in entries if e["bytes"] and not _storage.is_url(e["path"])]
    sizes = {e["path"]: os.path.getsize(e["path"]) for e in local if os.path.exists(e["path"])}
    by_path = {e["path"]: e for e in local}
    out: list[fnd.Finding] = []
    for same_size in _groups((size, p) for p, size in sizes.items()):
        for same_sample in _groups((_sample(p, sizes[p]), p) for p in same_size):
            hashes = {p: _hash(p) for p in same_sample}
            for p, h in hashes.items():
                if h is not None:
                    by_path[p]["blake2b"] = h
            for same in _groups((h, p) for p, h in hashes.items()):
                first = same[0]
                for p in same[1:]:
                    msg = f"byte-identical to {first!r} (blake2b {hashes[p]}): the same data twice"
                    out.append(fnd.Finding(p, "duplicate", Severity.WARNING, msg))
    return out
