"""Which file each dataset index reads, and ``exclude=`` turned into dataset indices.

A dataset lists its files as torchvision's ``DatasetFolder``/``ImageFolder`` do (``samples``:
``(path, target)`` pairs, or plain paths), through a ``Subset`` of one, or the user says it with
``path_of`` (a callable ``index -> path`` or a sequence). Many indices may share one file (rows
of a shard): excluding the file excludes them all.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePath
from typing import Any

from torch.utils.data import Subset

from datacheck.errors import UsageError
from datacheck.torch._loader_config import PathOf, as_index_set

logger = logging.getLogger("datacheck.torch")

Lookup = Callable[[int], "str | None"]


def _listing(dataset: Any) -> Lookup | None:
    """``index -> path`` from what the dataset lists, or None when it lists nothing usable."""
    if isinstance(dataset, Subset):
        inner = _listing(dataset.dataset)
        if inner is None:
            return None
        picks = dataset.indices
        return lambda i: inner(int(picks[i]))
    samples = getattr(dataset, "samples", None)
    if samples is None:
        samples = getattr(dataset, "imgs", None)
    if not isinstance(samples, list | tuple) or not samples:
        return None
    first = samples[0]
    if isinstance(first, str | os.PathLike):
        return lambda i: os.fspath(samples[i])
    if isinstance(first, tuple | list) and first and isinstance(first[0], str | os.PathLike):
        return lambda i: os.fspath(samples[i][0])
    return None


class SamplePaths:
    """The file of each dataset index, when known (``bool(paths)`` says whether it is)."""

    def __init__(self, dataset: Any, path_of: PathOf | None) -> None:
        self.dataset = dataset
        self._lookup: Lookup | None
        if path_of is None:
            self._lookup = _listing(dataset)
        elif callable(path_of):
            self._lookup = lambda i: _fs(path_of(i))
        else:
            seq = path_of
            self._lookup = lambda i: _fs(seq[i])

    def __bool__(self) -> bool:
        return self._lookup is not None

    def __call__(self, index: int) -> str | None:
        """The file of ``index`` (None when unknown); never raises."""
        if self._lookup is None:
            return None
        try:
            return self._lookup(index)
        except Exception:  # a listing that does not cover an index names nothing
            return None

    def indices_of(self, paths: Iterable[str]) -> set[int]:
        """Dataset indices reading any of ``paths`` (absolute, relative or URL; see ``_match``)."""
        wanted = [os.fspath(p) for p in paths]
        if not wanted:
            return set()
        if self._lookup is None:
            raise UsageError(
                f"exclude names {len(wanted)} file(s) (e.g. {wanted[0]!r}) but the dataset "
                f"{type(self.dataset).__name__} does not list its files: pass path_of= (a "
                "callable index -> path, or a list), or exclude dataset indices instead"
            )
        by_file: dict[str, list[int]] = {}
        for i in range(len(self.dataset)):
            p = self(i)
            if p is not None:
                by_file.setdefault(_norm(p), []).append(i)
        found: set[int] = set()
        missing = []
        for w in wanted:
            hits = _match(w, by_file)
            found.update(hits)
            if not hits:
                missing.append(w)
        if missing:
            logger.warning(
                "exclude: %d of %d file(s) are not in the dataset (first: %r); skipped",
                len(missing),
                len(wanted),
                missing[0],
            )
        return found


def _fs(p: Any) -> str | None:
    return None if p is None else os.fspath(p)


def _norm(p: str) -> str:
    if "://" in p:
        return p
    return os.path.normpath(os.path.abspath(p))


def _match(wanted: str, by_file: Mapping[str, list[int]]) -> list[int]:
    """Exact match on the normalised path; a relative path also matches as a path suffix (a
    scan run from another folder names ``train/cat/1.jpg``, the dataset ``/data/train/cat/1.jpg``)."""
    exact = by_file.get(_norm(wanted))
    if exact:
        return exact
    if "://" in wanted or os.path.isabs(wanted):
        return []
    parts = PurePath(os.path.normpath(wanted)).parts
    return [
        i
        for path, ids in by_file.items()
        if PurePath(path).parts[-len(parts) :] == parts
        for i in ids
    ]


def resolve_exclude(exclude: Any, paths: SamplePaths) -> set[int]:
    """``exclude=`` as dataset indices: indices, paths, a scan report or its exclusion list."""
    if exclude is None:
        return set()
    if hasattr(exclude, "data") and isinstance(getattr(exclude, "data", None), Mapping):
        return paths.indices_of(gated_paths(exclude))
    if isinstance(exclude, str | os.PathLike):
        from datacheck.report import load_report

        return paths.indices_of(gated_paths(load_report(exclude)))
    if _is_frame(exclude):
        return _from_frame(exclude, paths)
    items = list(exclude)
    files = [x for x in items if isinstance(x, str | os.PathLike)]
    numbers = [x for x in items if not isinstance(x, str | os.PathLike)]
    return set(as_index_set(numbers)) | paths.indices_of(os.fspath(f) for f in files)


def gated_paths(report: Any) -> list[str]:
    """Paths of the files a scan's gate fails whole: ``corrupt``, or with an error-level
    file- or column-level finding (``drift``, ``schema``, ``unnormalized``, ...)."""
    from datacheck.report._explore import gated_files

    return list(gated_files(report))


def _is_frame(x: Any) -> bool:
    return hasattr(x, "columns") and hasattr(x, "loc")


def _from_frame(df: Any, paths: SamplePaths) -> set[int]:
    """An ``exclusion_list()`` DataFrame: its ``index`` column, and the files of its rows
    without one that name no row (corrupt files) when the dataset lists its files; else its
    ``path`` column."""
    if "index" in df.columns:
        found = set(as_index_set(df["index"].dropna().tolist()))
        if "row" in df.columns and "path" in df.columns and paths:
            whole = df.loc[df["row"].isna() & df["index"].isna(), "path"].dropna()
            found |= paths.indices_of(whole.astype(str).tolist())
        return found
    if "path" in df.columns:
        return paths.indices_of(df["path"].dropna().astype(str).tolist())
    raise UsageError(
        f"exclude: a DataFrame needs an 'index' or a 'path' column, not {list(df.columns)}"
    )
