"""What names a map-style sample across runs, so a changed dataset never skips another sample.

A runtime quarantine record of a map-style loader holds the sample's dataset ``index`` and, to
survive the dataset changing under it, what identifies the sample and which dataset the index
refers to:

- ``source`` / ``sample``: the file and the row in it, where the dataset exposes them (a file
  listing: ImageFolder's ``samples``, ``path_of=``; a Hugging Face ``Dataset``: its Arrow file and
  the row of its table, through ``select``/``shuffle`` indices); else the user's ``key_fn`` on
  the sample's row of its batch (``sample``, no source); else a fingerprint of that row's values
  (``sample`` = ``content:<blake2b>``; samples that loaded, whose values repeat run to run);
- ``dataset``: the dataset's fingerprint: its length, and a hash of its file list, or its Hugging
  Face ``_fingerprint``, or (a dataset that lists nothing) a hash of its first, middle and last
  samples read under fixed seeds (a reordered or edited dataset of the same length differs).

The next run compares fingerprints. The same dataset: indices are used as they are. Another:
each record is mapped by its identity (a file and row to today's index; a key or a content
fingerprint matched as samples are loaded, before they are collated), and a record that names
nothing but an index (a sample that never loaded, of a dataset that lists no files, without
a ``key_fn``) makes the loader refuse, saying what changed. Records written before fingerprints existed are used by
index, as they were.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from datacheck.errors import UsageError
from datacheck.torch._sample_paths import SamplePaths

logger = logging.getLogger("datacheck.torch")

CONTENT = "content:"
"""Prefix of a ``sample`` that is a fingerprint of the sample's values."""


def content_key(sample: Any) -> str:
    """A fingerprint of a sample's values (tensors and arrays by dtype, shape and bytes)."""
    h = hashlib.blake2b(digest_size=16)
    _feed(h, sample)
    return CONTENT + h.hexdigest()


def _feed(h: Any, x: Any) -> None:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().contiguous().numpy()
    if isinstance(x, np.ndarray):
        h.update(f"{x.dtype.str}{x.shape}".encode())
        h.update(np.ascontiguousarray(x).tobytes())
    elif isinstance(x, Mapping):
        for k in sorted(x, key=str):
            h.update(f"<{k}>".encode())
            _feed(h, x[k])
    elif isinstance(x, list | tuple):
        h.update(f"[{len(x)}".encode())
        for v in x:
            _feed(h, v)
    else:
        h.update(repr(x).encode())


def _hf_rows(dataset: Any) -> Callable[[int], tuple[str, str]] | None:
    """``index -> (arrow file, row)`` of a Hugging Face ``Dataset`` (None for anything else)."""
    if not all(hasattr(dataset, a) for a in ("_fingerprint", "_data", "_indices")):
        return None
    table = dataset._data
    blocks = getattr(table, "blocks", None) or [[table]]
    spans: list[tuple[int, str]] = []  # (first row, file) of each vertical block
    at = 0
    for row in blocks:
        first = row[0] if isinstance(row, list) and row else row
        spans.append((at, str(getattr(first, "path", None) or "memory")))
        at += len(first)
    indices = dataset._indices

    def rows(i: int) -> tuple[str, str]:
        base = int(indices.column(0)[i].as_py()) if indices is not None else int(i)
        start, path = next(((s, p) for s, p in reversed(spans) if s <= base), (0, "memory"))
        return path, str(base - start)

    return rows


@dataclass
class MapIdentity:
    """The identity of a map-style dataset's samples, and the dataset's fingerprint."""

    dataset: Any
    paths: SamplePaths
    key_fn: Callable[[Any], Any] | None = None
    avoid: set[int] = field(default_factory=set)
    """Indices the probe must not read (quarantined or excluded: they may not load)."""
    _fingerprint: str | None = None
    _by_site: dict[tuple[str, str], int] | None = None
    _rows: dict[int, str] = field(default_factory=dict)

    def fingerprint(self) -> str:
        """``n=<length>`` and ``hf=<_fingerprint>`` or ``files=<hash of the file list>``."""
        if self._fingerprint is None:
            parts = [f"n={len(self.dataset)}"]
            hf = getattr(self.dataset, "_fingerprint", None)
            if isinstance(hf, str) and _hf_rows(self.dataset) is not None:
                parts.append(f"hf={hf}")
            elif self.paths:
                h = hashlib.blake2b(digest_size=8)
                for i in range(len(self.dataset)):
                    h.update(os.fsencode(self.paths(i) or "") + b"\0")
                parts.append(f"files={h.hexdigest()}")
            else:
                parts.append(f"probe={self._probe()}")
            self._fingerprint = " ".join(parts)
        return self._fingerprint

    def _probe(self) -> str:
        """``i:hash`` of the first, middle and last samples (a dataset that lists nothing: its
        order and content), read here under fixed seeds so random augmentation repeats; a
        sample in ``avoid`` (quarantined, excluded) is not read (``i:-``), nor one that fails
        to load here (``i:!``, e.g. a handle only a worker opens)."""
        import random

        n = len(self.dataset)
        parts = []
        state = random.getstate(), np.random.get_state()
        try:
            with torch.random.fork_rng(devices=[]):
                for i in sorted({0, n // 2, n - 1} - {-1}):
                    parts.append(f"{i}:{self._probe_one(i, random)}")
        finally:
            random.setstate(state[0])
            np.random.set_state(state[1])
        return ",".join(parts)

    def _probe_one(self, i: int, random: Any) -> str:
        if i in self.avoid:
            return "-"
        torch.manual_seed(i)
        random.seed(i)
        np.random.seed(i)
        try:
            return content_key(self.dataset[i])[len(CONTENT) : len(CONTENT) + 16]
        except Exception as exc:
            logger.debug("dataset probe: sample %d did not load here: %s", i, exc)
            return "!"

    def site(self, index: int) -> tuple[str, str] | None:
        """(file, row) of ``index`` where the dataset exposes it."""
        hf = _hf_rows(self.dataset)
        if hf is not None:
            return hf(index)
        path = self.paths(index)
        if path is None:
            return None
        return path, self._row_in_file(index, path)

    def _row_in_file(self, index: int, path: str) -> str:
        if not self._rows:
            seen: dict[str, int] = {}
            for i in range(len(self.dataset)):
                p = self.paths(i)
                if p is not None:
                    self._rows[i] = str(seen.get(p, 0))
                    seen[p] = seen.get(p, 0) + 1
        return self._rows.get(index, "0")

    def index_of(self, source: str, sample: str) -> int | None:
        """Today's index of the sample at (file, row), if the dataset still holds it."""
        if self._by_site is None:
            self._by_site = {}
            for i in range(len(self.dataset)):
                s = self.site(i)
                if s is not None:
                    self._by_site.setdefault(s, i)
        return self._by_site.get((source, sample))

    def fields(self, index: int, row: Any) -> dict[str, Any]:
        """``source``/``sample``/``dataset`` of a record of ``index``; ``row`` is the sample's
        row of its batch (:func:`~datacheck.torch._checks.row_of`; None: it did not load), which
        a ``key_fn`` or a content fingerprint names it by."""
        out: dict[str, Any] = {"source": None, "sample": None, "dataset": self.fingerprint()}
        site = self.site(index)
        if site is not None:
            out["source"], out["sample"] = site
        elif row is not None:
            out["sample"] = name_row(row, self.key_fn)
        return out


def name_row(row: Any, key_fn: Callable[[Any], Any] | None) -> str | None:
    """A loaded sample's name: ``key_fn(row)``, else its content fingerprint."""
    try:
        return str(key_fn(row)) if key_fn is not None else content_key(row)
    except Exception as exc:  # a key_fn that fails on a row names nothing
        logger.debug("could not name a sample by key_fn: %s", exc)
        return None


class Match:
    """Samples to leave out by their ``key_fn`` or content fingerprint (the dataset changed
    since they were quarantined, so their index is not known): checked on every row."""

    def __init__(self, key_fn: Callable[[Any], Any] | None, keys: set[str], contents: set[str]):
        self.key_fn, self.keys, self.contents = key_fn, keys, contents

    def __bool__(self) -> bool:
        return bool(self.keys or self.contents)

    def holds(self, row: Any) -> bool:
        if self.keys and self.key_fn is not None and name_row(row, self.key_fn) in self.keys:
            return True
        return bool(self.contents) and content_key(row) in self.contents


@dataclass
class Skips:
    """What a map-style loader leaves out from a quarantine: indices, and keys or content
    fingerprints to match as samples are loaded (the dataset changed)."""

    indices: set[int] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    contents: set[str] = field(default_factory=set)


def plan_skips(records: pd.DataFrame, identity: MapIdentity, folder: Any) -> Skips:
    """The samples a map-style quarantine holds, in today's dataset (see the module doc)."""
    rows = records[records["index"].notna()]
    out = Skips()
    if rows.empty:
        return out
    now = identity.fingerprint()
    stamp = rows["dataset"]
    same = pd.Series(
        [pd.isna(t) or same_dataset(str(t), now) for t in stamp], index=rows.index, dtype=bool
    )
    out.indices |= {int(i) for i in rows.loc[same, "index"]}
    if stamp.isna().any():
        logger.info(
            "%d quarantine record(s) in %s carry no dataset fingerprint (an older datacheck, or "
            "a TrainingGuard without loader=): skipped by index, as written",
            int(stamp.isna().sum()),
            folder,
        )
    changed = rows[~same]
    lost: list[tuple[int, str]] = []
    for index, src, key, stamp_then in zip(
        changed["index"], changed["source"], changed["sample"], changed["dataset"], strict=True
    ):
        if not pd.isna(src) and not pd.isna(key):
            found = identity.index_of(str(src), str(key))
            if found is not None:
                out.indices.add(found)
        elif not pd.isna(key):
            target = out.contents if str(key).startswith(CONTENT) else out.keys
            target.add(str(key))
        else:
            lost.append((int(index), str(stamp_then)))
    if lost:
        raise UsageError(_changed_message(folder, lost, now, identity.key_fn is not None))
    return out


def same_dataset(then: str, now: str) -> bool:
    """Whether two fingerprints name the same dataset: every part equal, a probe compared at
    the samples both read."""
    a, b = dict(p.split("=", 1) for p in then.split()), dict(p.split("=", 1) for p in now.split())
    if a.keys() != b.keys():
        return False
    for key, value in a.items():
        if key != "probe":
            if value != b[key]:
                return False
            continue
        x, y = (
            dict(p.split(":", 1) for p in value.split(",")),
            dict(p.split(":", 1) for p in b[key].split(",")),
        )
        if x.keys() != y.keys():
            return False
        if any(x[i] != y[i] for i in x if x[i] not in "-!" and y[i] not in "-!"):
            return False
    return True


def _changed_message(folder: Any, lost: list[tuple[int, str]], now: str, has_key: bool) -> str:
    then = lost[0][1]
    return (
        f"quarantine {os.fspath(folder)!r}: {len(lost)} record(s) (e.g. index {lost[0][0]}) "
        f"were written for another dataset ({then}; now {now}) and name their samples only "
        "by index, so the same index may now be another sample. Give the loader path_of= (the "
        "file of each index)"
        + ("" if has_key else " or key_fn= (a sample's id)")
        + " and rerun on the dataset that wrote them to name them, or pass "
        "skip_quarantined=False to start this dataset's quarantine afresh (the checks find bad "
        "values again)"
    )
