"""Compressed MDS shards (``shard.NNNNN.mds.zstd``, ``.gz``, ``.bz2``, ``.br``, ``.snappy``).

MosaicML Streaming compresses a whole shard when its writer is given ``compression`` (e.g.
``"zstd:7"``): only the compressed file is written, and its ``index.json`` entry says
``compression``, ``zip_data`` (basename, bytes and hashes of the compressed file) and
``raw_data`` (the same of the shard before compression).

Shards on object stores are copied the same way (without decompression).  Decompression is
streamed and bounded: the output goes to an anonymous temporary file (then memory-mapped like
an uncompressed shard), never above the ``raw_data`` byte count of the index
(:data:`MAX_UNINDEXED_BYTES` without one) whatever the compressed stream's own header claims,
so a decompression bomb stops at the cap and is ``corrupt``.  Raw snappy cannot be streamed: its
stated size is held to the cap, then it is decompressed whole.  The hashes of both ``zip_data``
and ``raw_data`` are checked (the compressed file's first, so a damaged file is named by its
hash), every one listed (:class:`Digests`).  gz and bz2 come with Python; zstd needs ``zstandard``, brotli ``brotli`` 1.2 or later
(whose decompressor bounds its output), snappy ``cramjam`` (all in the ``media`` extra): without
its package a shard is ``corrupt`` with a one-line reason naming the extra, never skipped.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import mmap
import os
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from typing import IO, Any

from datacheck._extras import needs
from datacheck.formats import _storage
from datacheck.formats._tensor_common import MappedFile, TensorFileError

__all__ = [
    "CODECS",
    "MAX_UNINDEXED_BYTES",
    "XXHASHES",
    "Digests",
    "materialize_shard",
    "shard_codec",
]

CODECS = ("zstd", "gz", "bz2", "br", "snappy")
"""Streaming's compression families, by the file extension each adds."""
MAX_UNINDEXED_BYTES = 4 << 30
"""Cap on a compressed shard's decompressed size when no ``index.json`` entry says it."""
_READ = 1 << 20
_ZSTD_PIECE = 1 << 10
"""Compressed bytes fed to zstd at a time: one piece inflates to at most ~32 MiB (RLE
blocks), so no single step can allocate a bomb's worth of output before the cap is checked."""


XXHASHES = ("xxh32", "xxh64", "xxh128", "xxh3_64", "xxh3_128")
"""The ``xxhash`` package's algorithms, which streaming's ``hashes`` setting offers beside
hashlib's (``streaming/base/hashing.py``: hashlib's named constructors, ``shake_*`` aside)."""


def _hasher(algo: str) -> Any:
    if algo in hashlib.algorithms_available and not algo.startswith("shake_"):
        return hashlib.new(algo)
    if algo in XXHASHES:
        try:
            import xxhash
        except ModuleNotFoundError:
            raise TensorFileError(
                needs(f"index.json lists a {algo} hash: checking it", "xxhash", "media")
            ) from None
        return getattr(xxhash, algo)()
    raise TensorFileError(
        f"index.json lists a hash {_short(algo)} that datacheck does not know (it checks "
        "hashlib's and xxhash's, as streaming writes them): the shard cannot be verified"
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Digests:
    """The hashes an index entry's ``raw_data``/``zip_data`` lists, fed as the bytes pass.

    Every listed hash is checked: one whose package is missing (``xxhash`` for ``xxh*``) or
    that datacheck does not know makes the shard corrupt with the reason, never a silent pass
    (as for a codec whose package is missing).

    Raises:
        TensorFileError: the listed hashes are not a mapping of names to hex digests, or one
            cannot be computed here.
    """

    def __init__(self, what: str, spec: Mapping[str, Any]) -> None:
        self.what = what
        hashes = spec.get("hashes") or {}
        if not isinstance(hashes, dict):
            raise TensorFileError(f"index.json: the {what}'s hashes are {_short(hashes)}")
        for algo, value in hashes.items():
            if not isinstance(value, str):
                raise TensorFileError(
                    f"index.json: the {what}'s {_short(algo)} hash is {_short(value)}, not a "
                    "hex digest"
                )
        self.want: dict[str, str] = {algo: value.lower() for algo, value in hashes.items()}
        self.hashers = {algo: _hasher(algo) for algo in self.want}

    def update(self, data: bytes | memoryview | mmap.mmap) -> None:
        for h in self.hashers.values():
            h.update(data)

    def verify(self) -> None:
        for algo, h in self.hashers.items():
            if (got := h.hexdigest()) != self.want[algo]:
                raise TensorFileError(
                    f"{algo} of the {self.what} is {got}, index.json says {self.want[algo]}"
                )


def shard_codec(path: str, entry: Mapping[str, Any] | None) -> str | None:
    """The codec of a shard (None: not compressed), by index entry and extension.

    Raises:
        TensorFileError: the index and the file name disagree.
    """
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    ext = name.rsplit(".", 1)[-1].lower()
    by_name = ext if ext in CODECS else None
    raw = (entry or {}).get("raw_data")
    if isinstance(raw, dict) and raw.get("basename") == name:
        return None  # the decompressed copy (streaming's keep_zip cache keeps both)
    declared = (entry or {}).get("compression")
    if not isinstance(declared, str) or not declared:
        return by_name
    family = declared.split(":", 1)[0].lower()
    if family != by_name:
        raise TensorFileError(
            f"index.json says compression {declared!r}, the file name says "
            f"{by_name or 'uncompressed'}: the index does not describe this file"
        )
    return family


def _needs(codec: str, package: str) -> TensorFileError:
    return TensorFileError(needs(f"{codec}-compressed shard: reading it", package, "media"))


def _zstd_chunks(src: IO[bytes]) -> Iterator[bytes]:
    try:
        import zstandard
    except ModuleNotFoundError:
        raise _needs("zstd", "zstandard") from None
    block, at = b"", 0  # the compressed bytes read, and how far they were fed
    while True:
        dec = zstandard.ZstdDecompressor().decompressobj()
        while not dec.eof:
            if at == len(block):
                block, at = src.read(_READ), 0
                if not block:
                    raise TensorFileError("zstd stream ends mid-frame: the shard is truncated")
            piece = memoryview(block)[at : at + _ZSTD_PIECE]
            at += len(piece)
            try:
                if out := dec.decompress(piece):
                    yield out
            except zstandard.ZstdError as exc:
                raise TensorFileError(f"zstd: {exc}") from None
        block, at = dec.unused_data + block[at:], 0
        if not block and not (block := src.read(_READ)):
            return  # end of input after a whole frame; more bytes would be another frame


def _stdlib_chunks(codec: str, src: IO[bytes]) -> Iterator[bytes]:
    try:
        with gzip.GzipFile(fileobj=src) if codec == "gz" else bz2.BZ2File(src) as fh:
            while out := fh.read(_READ):  # read(n) inflates at most n bytes
                yield out
    except (OSError, EOFError, ValueError, zlib.error) as exc:
        raise TensorFileError(f"{codec}: {exc or type(exc).__name__}") from None


def _brotli_chunks(src: IO[bytes]) -> Iterator[bytes]:
    try:
        import brotli
    except ModuleNotFoundError:
        raise _needs("br", "brotli (1.2 or later)") from None
    dec = brotli.Decompressor()
    if not hasattr(dec, "can_accept_more_data"):  # before 1.2 output could not be bounded
        raise _needs("br", "brotli (1.2 or later)")
    try:
        while piece := src.read(_READ):
            yield dec.process(piece, _READ)
            while not dec.can_accept_more_data():  # the output held back by the bound
                yield dec.process(b"", _READ)
        while not dec.is_finished() and (out := dec.process(b"", _READ)):
            yield out
        if not dec.is_finished():
            raise TensorFileError("br stream ends early: the shard is truncated")
    except brotli.error as exc:
        raise TensorFileError(f"br: {exc}") from None


def _snappy_chunks(src: IO[bytes], limit: int) -> Iterator[bytes]:
    """Streaming's snappy is the raw format: a varint preamble with the decompressed length,
    which is held to ``limit`` before anything is allocated (the decoder then checks it)."""
    try:
        import cramjam
    except ModuleNotFoundError:
        raise _needs("snappy", "cramjam") from None
    data = src.read(limit + limit // 6 + 64)  # snappy's worst case: +1/6, plus a preamble
    if src.read(1):
        raise TensorFileError(
            f"snappy: the compressed shard is larger than {limit} bytes can compress to: "
            "damaged, or not what index.json describes; not decompressed"
        )
    try:
        size = cramjam.snappy.decompress_raw_len(data)
        if size > limit:
            raise TensorFileError(
                f"snappy: the stream says it inflates to {size} bytes, past {limit}: a "
                "decompression bomb or a damaged shard; not decompressed"
            )
        yield bytes(cramjam.snappy.decompress_raw(data))
    except cramjam.DecompressionError as exc:
        raise TensorFileError(str(exc)) from None


def _copy_chunks(src: IO[bytes]) -> Iterator[bytes]:
    while data := src.read(_READ):
        yield data


def _chunks(codec: str | None, src: IO[bytes], limit: int) -> Iterator[bytes]:
    if codec is None:
        return _copy_chunks(src)
    if codec == "zstd":
        return _zstd_chunks(src)
    if codec == "br":
        return _brotli_chunks(src)
    if codec == "snappy":
        return _snappy_chunks(src, limit)
    return _stdlib_chunks(codec, src)


def _too_big(codec: str | None, limit: int, exact: bool) -> str:
    said = f"index.json says {limit}" if exact else f"the cap is {limit}"
    if codec is None:
        return f"the shard holds more than {limit} bytes ({said})"
    return (
        f"{codec}: inflates past {limit} bytes ({said}): a decompression bomb or a damaged "
        "shard; not read further"
    )


def _limit(raw: Mapping[str, Any]) -> tuple[int, bool]:
    """The most bytes the shard may inflate to, and whether the index says exactly that."""
    size = raw.get("bytes")
    if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
        return size, True
    return MAX_UNINDEXED_BYTES, False


def _open(path: str) -> IO[bytes]:
    return _storage.source(path) if _storage.is_url(path) else open(path, "rb")  # noqa: SIM115


def _size(path: str) -> int:
    return _storage.stat(path)[0] if _storage.is_url(path) else os.path.getsize(path)


def materialize_shard(path: str, codec: str | None, entry: Mapping[str, Any] | None) -> MappedFile:
    """Copy a shard (decompressed when ``codec`` says so; local or on an object store) into a
    memory-mapped temporary file, bounded and hash-checked.

    Raises:
        TensorFileError: sizes or hashes differ from the index, the stream is damaged or
            truncated, it inflates past the cap, or its codec cannot be read here.
    """
    zip_spec = (entry or {}).get("zip_data") or {}
    raw_spec = (entry or {}).get("raw_data") or {}
    size = _size(path)
    if codec is None:  # an uncompressed shard on an object store: raw_data describes it
        zip_spec = {}
    if isinstance(zip_spec.get("bytes"), int) and zip_spec["bytes"] != size:
        raise TensorFileError(f"index.json says {zip_spec['bytes']} bytes, the file holds {size}")
    limit, exact = _limit(raw_spec)
    zipped, raw = Digests("compressed shard", zip_spec), Digests("decompressed shard", raw_spec)
    if zipped.want:  # first, so a damaged file is named by its hash, not by a decoder error
        with _open(path) as fh:
            while data := fh.read(_READ):
                zipped.update(data)
        zipped.verify()
    with _open(path) as fh, tempfile.TemporaryFile(prefix="datacheck-mds-") as out:
        total = 0
        for chunk in _chunks(codec, fh, limit):
            total += len(chunk)
            if total > limit:
                raise TensorFileError(_too_big(codec, limit, exact))
            raw.update(chunk)
            out.write(chunk)
        if exact and total != limit:
            what = f"{codec}: inflates to" if codec else "the shard holds"
            raise TensorFileError(f"{what} {total} bytes, index.json says {limit}")
        raw.verify()
        out.flush()
        return MappedFile.of_file(out)
