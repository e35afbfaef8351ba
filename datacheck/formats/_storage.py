"""Remote storage through fsspec: ``s3://``, ``gs://``, ``memory://``, ... .

Discovery lists and globs object stores here (which objects are data is its own rule), and
readers open remote paths through
:func:`source` (random access, for Parquet / Arrow footers) or :func:`stream` (sequential,
with decompression by extension, for CSV / JSON Lines).  Local paths never come through
fsspec: :func:`source` hands them back unchanged so pyarrow keeps its native, memory-mapped
path.  Credentials come from the user's usual mechanism (environment, ``~/.aws``,
``AWS_ENDPOINT_URL``, gcloud's application default credentials); datacheck passes none.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import posixpath
from typing import TYPE_CHECKING, Any

from datacheck.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "is_url",
    "json_document",
    "list_objects",
    "read_head",
    "read_small",
    "source",
    "stat",
    "stream",
]

_MTIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "modified", "created")
_ETAG_KEYS = ("ETag", "etag", "md5Hash", "generation", "version_id")


def is_url(path: str) -> bool:
    """True for ``protocol://...`` paths (anything fsspec opens), False for local paths."""
    proto, sep, _ = str(path).partition("://")
    return bool(sep) and proto.replace("+", "").replace("-", "").isalnum() and len(proto) > 1


def in_this_process_only(path: str) -> bool:
    """True for ``memory://`` paths: that filesystem lives in this process, and a worker
    process cannot read it."""
    return str(path).startswith("memory://")


def _fs(url: str) -> tuple[Any, str]:
    import fsspec

    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise InputError(
            f"input {url!r}: cannot open this storage ({exc}); install its fsspec driver "
            "(s3fs for s3://, gcsfs for gs://)"
        ) from exc


def _name(fs: Any, path: str) -> str:
    return fs.unstrip_protocol(path)


def list_objects(url: str) -> list[tuple[str, str, bool]]:
    """Every object under one URL (an object, a prefix or a glob) as ``(url, root, named)``.

    ``named`` is True for an object the URL or glob names itself, False for one found under a
    prefix.  Nothing is filtered here: which objects are data is discovery's rule.

    Raises:
        InputError: the URL matches nothing, or the storage cannot be reached.
    """
    fs, path = _fs(url)
    fs.invalidate_cache()  # a resumed scan must see the objects as they are now
    try:
        matches = sorted(fs.glob(path)) if any(c in path for c in "*?[") else [path]
        found: list[tuple[str, str, bool]] = []
        for match in matches:
            if fs.isdir(match):
                root = _name(fs, match)
                found += [
                    (_name(fs, p), root, False) for p in sorted(fs.find(match, withdirs=False))
                ]
            elif fs.isfile(match):
                found.append((_name(fs, match), _name(fs, posixpath.dirname(match)), True))
    except Exception as exc:  # noqa: BLE001 - the storage boundary: botocore, gcsfs, HTTP errors
        raise InputError(
            f"input {url!r}: cannot list ({type(exc).__name__}: {exc}); check the URL and your "
            "credentials (environment, ~/.aws, AWS_ENDPOINT_URL, gcloud)"
        ) from exc
    if not found:
        raise InputError(f"input {url!r}: no such object or prefix; check the URL")
    return found


def _timestamp(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            value = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return 0.0  # an unknown date format: size and ETag still identify the object
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.timestamp()
    return 0.0


def stat(url: str) -> tuple[int, float, str]:
    """``(size, mtime, etag)`` of an object; the ETag (or generation, md5) may be ``""``."""
    fs, path = _fs(url)
    try:
        info = fs.info(path)
    except Exception as exc:  # noqa: BLE001 - the storage boundary
        raise InputError(f"input {url!r}: cannot stat ({type(exc).__name__}: {exc})") from exc
    mtime = next((_timestamp(info[k]) for k in _MTIME_KEYS if info.get(k) is not None), 0.0)
    etag = next((str(info[k]).strip('"') for k in _ETAG_KEYS if info.get(k)), "")
    return int(info.get("size") or 0), mtime, etag


def _fs_head(fs: Any, path: str, n: int = 16) -> bytes:
    try:
        with fs.open(path, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def read_head(url: str, n: int = 16) -> bytes:
    """The first ``n`` bytes of an object (``b""`` when unreadable: its unit reports that)."""
    fs, path = _fs(url)
    return _fs_head(fs, path, n)


def read_small(path: str, limit: int) -> bytes | None:
    """A small file's bytes, local or remote; None when it holds more than ``limit`` bytes.

    Raises:
        OSError: it cannot be read (missing, no permission).
    """
    if "://" in path and is_url(path):
        fs, p = _fs(path)
        with fs.open(p, "rb") as fh:
            data = _read_upto(fh, limit + 1)
    else:
        data = _read_local(path, limit + 1)
    return None if len(data) > limit else data


def _read_local(path: str, n: int) -> bytes:
    """At most ``n`` bytes of a local file: one ``pread`` of its size (+1, which tells a file
    that grew past the limit) when the kernel gives it all; more reads only after a short
    one (a FUSE or network mount), up to ``n`` or the end.  Never ``n`` reserved at once: the
    size comes first (from ``lseek``, which costs no ``stat`` result)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        want = min(size, n - 1) + 1
        data = os.pread(fd, want, 0)
        if len(data) == size or len(data) >= want or not data:
            return data  # all of it (the size it has), past the limit, or empty
        parts, got = [data], len(data)
        while got < want and (part := os.pread(fd, min(want - got, 1 << 20), got)):
            parts.append(part)
            got += len(part)
        return b"".join(parts)
    finally:
        os.close(fd)


def _read_upto(fh: Any, n: int, block: int = 1 << 20) -> bytes:
    """At most ``n`` bytes of ``fh``, read a block at a time (never ``n`` reserved at once)."""
    parts: list[bytes] = []
    got = 0
    while got < n:
        part = fh.read(min(block, n - got))
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def json_document(path: str, limit: int) -> Any:
    """A small JSON file (a dataset folder's index), local or remote, parsed; None when it is
    missing, above ``limit`` bytes or not JSON.  Cached by the file's identity (size, mtime,
    ETag): the shards of a folder all ask, and a changed file is read again."""
    try:
        if is_url(path):
            stamp: tuple[Any, ...] = stat(path)
        else:
            st = os.stat(path)
            stamp = (st.st_size, st.st_mtime_ns, st.st_ino)
    except (OSError, InputError):
        return None
    return _json_document(path, stamp, limit)


@functools.lru_cache(maxsize=16)
def _json_document(path: str, stamp: tuple[Any, ...], limit: int) -> Any:
    try:
        data = read_small(path, limit)
        return None if data is None else json.loads(data)
    except (OSError, ValueError, RecursionError):  # RecursionError: nested past the C stack
        return None


def source(path: str) -> Any:
    """What pyarrow should open: the path itself when local, else a seekable fsspec file."""
    if not is_url(path):
        return path
    fs, p = _fs(path)
    return fs.open(p, "rb")


def stream(path: str) -> pa.NativeFile:
    """A sequential input stream, decompressed according to the extension (``.gz``, ...)."""
    import pyarrow as pa

    if not is_url(path):
        return pa.input_stream(path, compression="detect")
    import fsspec

    fh = fsspec.open(path, "rb", compression="infer").open()
    return pa.PythonFile(fh, mode="r")
