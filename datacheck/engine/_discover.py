"""Inputs -> files -> work units.  Files, directories (recursive) and globs, in any mix."""

from __future__ import annotations

import glob
import os
import posixpath
import stat
from pathlib import Path

from datacheck.engine._outputs import output_folder
from datacheck.errors import InputError
from datacheck.formats import Format, Opened, WorkUnit, _storage, detect, register

__all__ = ["discover", "discover_files", "plan_units"]

NOT_DATA = "not a data file: no reader recognises its name or first bytes"
HIDDEN = "a hidden file (name it to scan it)"
_BOOKKEEPING_FILES = {
    "_SUCCESS": "a Hadoop/Spark job's success marker, not data",
    "_metadata": "a Parquet dataset's summary of its files' footers, not data",
    "_common_metadata": "a Parquet dataset's common schema, not data",
}
"""Files that dataset writers keep beside their data, by name, and why each is not scanned."""
_BOOKKEEPING_DIRS = {
    "_temporary": "a Hadoop/Spark job's uncommitted task output, which the dataset's readers skip",
    "_delta_log": "a Delta Lake table's transaction log, not data",
    "_spark_metadata": "a Spark streaming sink's log of its files, not data",
}
"""Folders that dataset writers keep beside their data, by name: their files are listed under
``ignored`` with the reason.  Any other folder is walked, ``_``-prefixed or not (a Python
project's ``_fakedata/``); hidden folders too, their files listed as hidden."""


class UnknownFormat(Format):
    """Stands for a file no reader recognises: scanning it yields a ``corrupt`` finding."""

    name = "unknown"

    def open(self, unit: WorkUnit, options: object) -> Opened:
        raise ValueError(
            f"unrecognised format: not {_known_formats()} (by extension or magic bytes)"
        )


register(UnknownFormat())


def _known_formats() -> str:
    from datacheck.formats import formats

    return ", ".join(sorted(n for n in formats() if n != "unknown"))


def _detect(path: str) -> Format | None:
    """:func:`detect`, reading the file's first bytes only when its name does not tell (listing
    1,000 shards is no 1,000 GETs, nor 20,000 opens of a folder of JPEGs)."""
    return detect(path, b"") or detect(path, _head(path))


def _head(path: str) -> bytes:
    if _storage.is_url(path):
        return _storage.read_head(path)
    try:
        with open(path, "rb") as fh:
            return fh.read(16)
    except OSError:
        return b""


def _folder_reason(name: str) -> str | None:
    """Why the files under a folder of this name are listed, not scanned (None: walk it)."""
    if name in _BOOKKEEPING_DIRS:
        return f"inside {name}/: {_BOOKKEEPING_DIRS[name]}"
    if name.startswith(".") and "=" not in name:
        return f"inside the hidden folder {name}/ (name it to scan it)"
    return None


def _name_reason(name: str) -> str | None:
    """Why a file of this name is not scanned whatever it holds (None: by what it holds)."""
    if name in _BOOKKEEPING_FILES:
        return f"{name}: {_BOOKKEEPING_FILES[name]}"
    if name.endswith(".crc"):
        return "a Hadoop checksum file, not data"
    if name.startswith("."):
        return HIDDEN
    return None


def _dataset_metadata(path: str) -> bool:
    """A dataset folder's own metadata (HF ``state.json``, MDS and litdata ``index.json``),
    local or on an object store: its data files' reader uses it; it is not data itself."""
    if not path.endswith(".json"):  # before the imports: this runs for every file listed
        return False
    from datacheck.formats._hf import is_hf_metadata
    from datacheck.formats._litdata import is_litdata_index
    from datacheck.formats._mds import is_mds_index

    return is_mds_index(path) or is_hf_metadata(path) or is_litdata_index(path)


def _compressed_copies(files: dict[str, str]) -> list[tuple[str, str]]:
    """(compressed MDS shard, its decompressed copy) pairs among ``files``: MosaicML
    Streaming's local cache keeps both with ``keep_zip``, and reads the decompressed one."""
    from datacheck.formats._mds_zip import CODECS

    pairs = []
    for path in files:
        stem, _, codec = path.rpartition(".")
        if codec in CODECS and stem.endswith(".mds") and stem in files:
            pairs.append((path, stem))
    return pairs


def _why_not_data(path: str) -> str | None:
    """Why a file found in a folder is not scanned, or None when it is data."""
    why = _name_reason(posixpath.basename(path.replace(os.sep, "/")))
    if why is not None:
        return why
    if _dataset_metadata(path):
        return "the metadata of the dataset beside it, read with its data files"
    return None if _detect(path) is not None else NOT_DATA


def _not_regular(mode: int) -> str | None:
    """Why a file that is not a regular file is never opened (a FIFO would block the scan)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        kind = "a FIFO"
    elif stat.S_ISSOCK(mode):
        kind = "a socket"
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        kind = "a device"
    else:
        kind = "not a regular file"
    return f"{kind}: only regular files are read"


class _Rules:
    """What discovery may open: regular files, and symlinks only within the input roots."""

    OUTSIDE = "a symlink leading outside the scanned folders (--follow-symlinks to scan it)"
    LINKED_DIR = "a symlink to a folder, not followed (--follow-symlinks to scan it)"

    def __init__(self, inputs: list[str], follow_symlinks: bool) -> None:
        self.follow = follow_symlinks
        self.roots = [os.path.realpath(p) for p in inputs if not _storage.is_url(p)]
        self.reasons: dict[str, str] = {}
        """Ignored path -> why, for every file ignored for a reason other than "not data"."""

    def _inside(self, path: str) -> bool:
        real = os.path.realpath(path)
        return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in self.roots)

    def refuse(self, path: str, named: bool = False) -> str | None:
        """Why ``path`` must not be opened (and is listed as ignored), or None."""
        try:
            st = os.lstat(path)
            link = stat.S_ISLNK(st.st_mode)
            mode = os.stat(path).st_mode if link else st.st_mode
        except OSError:  # dangling, or gone since listing: its unit reports it corrupt
            return None
        if link and not named and not self.follow and not self._inside(path):
            return self.OUTSIDE
        return _not_regular(mode)

    def refuse_entry(self, entry: os.DirEntry[str]) -> str | None:
        """:meth:`refuse` for a file found in a folder listing: a regular file costs no system
        call (the listing says what it is), a symlink one."""
        try:
            if entry.is_file(follow_symlinks=False):
                return None
            if not entry.is_symlink():
                return _not_regular(entry.stat(follow_symlinks=False).st_mode)
            mode = entry.stat().st_mode
        except OSError:  # dangling, or gone since listing: its unit reports it corrupt
            return None
        if not self.follow and not self._inside(entry.path):
            return self.OUTSIDE
        return _not_regular(mode)

    def ignore(self, path: str, reason: str, ignored: list[str]) -> None:
        self.reasons[path] = reason
        ignored.append(path)


def _walk(root: Path, rules: _Rules) -> tuple[list[str], list[str]]:
    """Data files under a local directory, and the files skipped, each with its reason.

    Folders are walked top-down in name order, as ``os.walk`` does (a folder that cannot be
    listed is skipped), reading each listing's entries once: what they are comes with them.
    The files of a writer's bookkeeping folder (``_temporary/``) or a hidden one are listed
    under ``ignored`` with the folder's reason, never scanned.
    """
    files: list[str] = []
    ignored: list[str] = []
    visited: set[str] = set()
    stack: list[tuple[str, str | None]] = [(os.fspath(root), None)]
    while stack:
        top, inside = stack.pop()
        try:
            with os.scandir(top) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            continue
        visited.add(os.path.realpath(top))
        if (why := output_folder({e.name for e in entries}, top)) is not None:
            rules.ignore(top, why, ignored)  # a scan's own report: never read as data
            continue
        subdirs = []
        for entry in entries:
            if _is_dir(entry):
                if entry.is_symlink() and not rules.follow:
                    rules.ignore(entry.path, rules.LINKED_DIR, ignored)
                elif os.path.realpath(entry.path) not in visited:  # a link cycle ends here
                    subdirs.append((entry.path, inside or _folder_reason(entry.name)))
            elif why := rules.refuse_entry(entry) or inside or _why_not_data(entry.path):
                rules.ignore(entry.path, why, ignored)
            else:
                files.append(entry.path)
        stack.extend(reversed(subdirs))
    return files, ignored


def _is_dir(entry: os.DirEntry[str]) -> bool:
    """A folder, or a symlink to one (as ``os.walk`` sorts entries)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _walk_url(url: str) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The same rule over an object store: ``(url, root)`` pairs of data, and skipped objects
    with their reasons."""
    found: list[tuple[str, str]] = []
    ignored: dict[str, str] = {}
    for obj, root, named in _storage.list_objects(url):
        if named:  # an object named explicitly is always scanned
            found.append((obj, root))
            continue
        folders = posixpath.relpath(obj, root).split("/")[:-1]
        inside = next((r for d in folders if (r := _folder_reason(d)) is not None), None)
        why = inside or _why_not_data(obj)
        if why is None:
            found.append((obj, root))
        else:
            ignored[obj] = why
    return found, ignored


def discover(inputs: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """Expand inputs into ``(file, root)`` pairs, each file once, plus ignored non-data files.

    A file named explicitly is always scanned (an unknown format becomes a ``corrupt``
    finding); inside directories, files that are not data (by extension or magic) are skipped
    and listed in the report as ignored.  See :func:`discover_files` for the rules on links
    and files that are not regular files.

    Raises:
        InputError: an input matches nothing.
    """
    files, ignored, _ = discover_files(inputs)
    return files, ignored


def discover_files(
    inputs: list[str], follow_symlinks: bool = False
) -> tuple[list[tuple[str, str]], list[str], dict[str, str]]:
    """:func:`discover`, plus why each file ignored for a reason other than "not data" was.

    Only regular files are opened: FIFOs, sockets and devices are ignored (even when named:
    reading a FIFO would block the scan).  Inside directories, a symlink to a file outside the
    input roots, and a symlink to a folder, are ignored unless ``follow_symlinks``; a
    symlink named explicitly is read.

    Returns:
        ``(file, root)`` pairs, ignored paths, and ignored path -> reason.
    """
    rules = _Rules(inputs, follow_symlinks)
    if not inputs:
        raise InputError("no input paths given; pass files, directories or globs to scan")
    seen: dict[str, str] = {}
    ignored: list[str] = []
    for item in inputs:
        if _storage.is_url(item):  # s3://, gs://, memory://, ...: listed through fsspec
            found_urls, skipped_urls = _walk_url(item)
            for obj, reason in skipped_urls.items():
                rules.ignore(obj, reason, ignored)
            for url, root in found_urls:
                seen.setdefault(url, root)
            continue
        matches = sorted(glob.glob(item, recursive=True)) if glob.has_magic(item) else [item]
        if not matches:
            raise InputError(f"glob {item!r} matches no file or directory; check the pattern")
        if not matches or not all(os.path.exists(m) for m in matches):
            raise InputError(f"input {item!r}: no such file or directory; check the path")
        for match in matches:
            p = Path(match)
            if p.is_dir():
                found, skipped = _walk(p, rules)
                ignored.extend(skipped)
                for f in found:
                    seen.setdefault(os.path.normpath(f), str(p))
            elif (why := rules.refuse(match, named=True)) is not None:
                rules.ignore(os.path.normpath(match), why, ignored)
            else:
                seen.setdefault(os.path.normpath(match), str(p.parent))
    for path in [p for p in seen if p.endswith(".bin") and p[: -len(".bin")] + ".idx" in seen]:
        del seen[path]  # a Megatron pair is one dataset, read from its .idx
        idx = os.path.basename(path[: -len(".bin")] + ".idx")
        rules.ignore(path, f"the data of the Megatron indexed dataset {idx}, read with it", ignored)
    for path in list(seen):
        fmt = _detect(path)
        if fmt is not None and (why := fmt.unread(path)) is not None:
            del seen[path]  # read by no reader here: listed with the reason, never passed
            rules.ignore(path, why, ignored)
    for path, raw in _compressed_copies(seen):
        del seen[path]  # streaming's keep_zip cache: the shard is read from its raw copy
        rules.ignore(
            path, f"the compressed copy of {os.path.basename(raw)}, which is read", ignored
        )
    if not seen:
        refused = "; ".join(f"{p!r}: {why}" for p, why in sorted(rules.reasons.items())[:3])
        raise InputError(
            f"inputs {inputs!r}: no data files found ({_known_formats()}); "
            + (f"ignored {refused}" if refused else "check the path, or name a file explicitly")
        )
    ignored = sorted(set(ignored) - set(seen))
    return (
        sorted(seen.items()),
        ignored,
        {p: rules.reasons[p] for p in ignored if p in rules.reasons},
    )


def _partition_keys(path: str, root: str) -> tuple[str, ...]:
    if "=" not in path:  # no hive folder (the relative path is made of the path's names)
        return ()
    rel = os.path.relpath(path, root)
    return tuple(seg.split("=", 1)[0] for seg in Path(rel).parts[:-1] if "=" in seg)


def _stat(path: str) -> tuple[int, float, str]:
    """Size, mtime and ETag ("" for local files): the identity of a file for resume."""
    if _storage.is_url(path):
        return _storage.stat(path)
    try:
        st = os.stat(path)
    except OSError:  # a dangling symlink, or gone since listing: its unit reports it corrupt
        return 0, 0.0, ""
    return st.st_size, st.st_mtime, ""


def plan_units(files: list[tuple[str, str]], unit_bytes: int = 512 << 20) -> list[WorkUnit]:
    """One unit per file, or per row-group range for files larger than ``unit_bytes``."""
    units: list[WorkUnit] = []
    for path, root in files:
        size, mtime, etag = _stat(path)
        fmt = _detect(path) or UnknownFormat()
        pieces = fmt.plan(path, size, unit_bytes)
        keys = _partition_keys(path, root)
        for i, extra in enumerate(pieces):
            units.append(
                WorkUnit(
                    path,
                    fmt.name,
                    size,
                    mtime,
                    part=i,
                    n_parts=len(pieces),
                    partition_columns=keys,
                    etag=etag,
                    **extra,
                )
            )
    return units
