"""The fuzzer's mutations: byte edits for every file, plus structure-aware ones where a format
would otherwise stop a damaged file at its first check.

Byte edits (one to three per mutant): truncation, bit flips, a run of 0x00/0xFF, a 4- or
8-byte field set to a huge or negative integer anywhere, a 1/2/4/8-byte field of either byte
order set so in the first or last 64 bytes (headers and footers: image sizes, Parquet and
Feather footers, index headers), a chunk duplicated or deleted.  Structure-aware ones:

- ``json``: a JSON file (MDS ``index.json``, Hugging Face ``state.json``...) parsed, one value
  replaced by a hostile one (a huge or negative number, null, a wrong type, nesting) or a key
  deleted, then written back as valid JSON;
- ``inner``: a gzip/zstd file decompressed, its payload damaged, compressed again (the reader
  gets past the codec);
- ``crc``: after byte edits, TFRecord and PNG checksums recomputed, so the damage reaches the
  record and chunk parsers instead of the checksum check.
"""

from __future__ import annotations

import copy
import gzip
import json
import random
import struct
import zlib
from typing import Any

HOSTILE_INTS = (2**31 - 1, 2**32 - 1, 2**40, 2**62, -1, -(2**31), 0)
HOSTILE_JSON: tuple[Any, ...] = (
    *(2**63, 2**64 + 1, -1, -(2**40), 0, 1e308, -0.5, None, True, "", "x" * 300),
    *([], {}, [[[[[[[[1]]]]]]]], {"a": {"b": {"c": None}}}, "../../etc/passwd"),
)


def _int_field(rng: random.Random, data: bytearray) -> None:
    width = rng.choice([4, 8])
    if len(data) <= width:
        return
    at = rng.randrange(len(data) - width)
    value = rng.choice(HOSTILE_INTS)
    data[at : at + width] = (value % (1 << (8 * width))).to_bytes(width, "little")


def _edge_field(rng: random.Random, data: bytearray) -> None:
    """A header or footer field: within 64 bytes of either end, any width, either order."""
    width = rng.choice([1, 2, 4, 8])
    if len(data) <= width:
        return
    span = min(64, len(data) - width)
    at = rng.randrange(span)
    if rng.random() < 0.5:
        at = len(data) - width - at
    value = rng.choice(HOSTILE_INTS) % (1 << (8 * width))
    data[at : at + width] = value.to_bytes(width, rng.choice(["little", "big"]))


def _edit(rng: random.Random, data: bytearray) -> None:
    op = rng.choice(["truncate", "flip", "run", "int", "int", "edge", "edge", "dup", "cut"])
    if op == "truncate":
        del data[rng.randrange(len(data)) :]
    elif op == "flip":
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif op == "run":
        i = rng.randrange(len(data))
        n = rng.randint(1, 64)
        data[i : i + n] = bytes([rng.choice([0, 0xFF])]) * len(data[i : i + n])
    elif op == "int":
        _int_field(rng, data)
    elif op == "edge":
        _edge_field(rng, data)
    elif op == "dup":
        i = rng.randrange(len(data))
        data[i:i] = data[i : i + rng.randint(1, 256)]
    else:
        i = rng.randrange(len(data))
        del data[i : i + rng.randint(1, 256)]


def mutate(seed: bytes, rng: random.Random) -> bytes:
    """One to three byte edits of ``seed``."""
    data = bytearray(seed)
    for _ in range(rng.randint(1, 3)):
        if not data:
            break
        _edit(rng, data)
    return bytes(data)


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every value in a JSON document (the root excluded)."""
    out = []
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    )
    for key, value in items:
        out.append((*path, key))
        out += _nodes(value, (*path, key))
    return out


def mutate_json(seed: bytes, rng: random.Random) -> bytes | None:
    """One value of a JSON document replaced by a hostile one, or its key deleted; None when
    ``seed`` is not a JSON container."""
    try:
        doc = json.loads(seed)
    except ValueError:
        return None
    nodes = _nodes(doc)
    if not nodes:
        return None
    for _ in range(rng.randint(1, 2)):
        path = rng.choice(nodes)
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if rng.random() < 0.2:
                del parent[path[-1]]
            else:
                parent[path[-1]] = copy.deepcopy(rng.choice(HOSTILE_JSON))  # never shared
        except (KeyError, IndexError, TypeError):  # a path the first edit removed
            continue
    return json.dumps(doc).encode()


def _decompress(data: bytes) -> tuple[str, bytes] | None:
    try:
        if data[:2] == b"\x1f\x8b":
            return "gz", gzip.decompress(data)
        if data[:4] == b"\x28\xb5\x2f\xfd":
            import zstandard

            return "zstd", zstandard.ZstdDecompressor().decompress(data)
    except Exception:  # noqa: BLE001 - any seed that does not round-trip gets byte edits
        return None
    return None


def _compress(codec: str, data: bytes) -> bytes:
    if codec == "gz":
        return gzip.compress(data, mtime=0)
    import zstandard

    return zstandard.ZstdCompressor(level=3).compress(data)


def fix_tfrecord(data: bytes) -> bytes:
    """Recompute the checksums of every TFRecord frame whose length still fits."""
    from datacheck._tfrecord import masked_crc

    out, pos = bytearray(data), 0
    while pos + 12 <= len(out):
        (length,) = struct.unpack_from("<Q", out, pos)
        struct.pack_into("<I", out, pos + 8, masked_crc(bytes(out[pos : pos + 8])))
        end = pos + 12 + length
        if end + 4 > len(out):
            break
        struct.pack_into("<I", out, end, masked_crc(bytes(out[pos + 12 : end])))
        pos = end + 4
    return bytes(out)


def fix_png(data: bytes) -> bytes:
    """Recompute the CRC of every PNG chunk whose length still fits."""
    out, pos = bytearray(data), 8
    while pos + 12 <= len(out):
        (length,) = struct.unpack_from(">I", out, pos)
        end = pos + 8 + length
        if end + 4 > len(out):
            break
        struct.pack_into(">I", out, end, zlib.crc32(bytes(out[pos + 4 : end])))
        pos = end + 4
    return bytes(out)


def _fixer(name: str) -> Any:
    if name.endswith(".tfrecord"):
        return fix_tfrecord
    if name.endswith(".png"):
        return fix_png
    return None


def mutant(name: str, seed: bytes, rng: random.Random) -> tuple[str, bytes]:
    """(kind, bytes) of one mutant of the file ``name`` holding ``seed``."""
    if name.endswith(".json") and rng.random() < 0.6:
        data = mutate_json(seed, rng)
        if data is not None:
            return "json", data
    fix = _fixer(name)
    inner = _decompress(seed) if rng.random() < 0.5 else None
    if inner is not None:
        codec, payload = inner
        damaged = mutate(payload, rng)
        if fix is not None and rng.random() < 0.5:
            damaged = fix(damaged)
        return "inner", _compress(codec, damaged)
    data = mutate(seed, rng)
    if fix is not None and _decompress(seed) is None and rng.random() < 0.5:
        return "crc", fix(data)
    return "bytes", data
