"""Image files (every raster format Pillow writes and reads: :data:`IMAGE_EXTS`), each one
fully decoded.

A truncated JPEG passes a header check and ``Image.verify()``: only a full decode (``load()``)
finds it, so every image is decoded, the way a DataLoader worker would.  PNGs are also verified
first, since Pillow's decoder does not check the chunk CRCs.  An image that does not decode is
a ``corrupt`` file (the decoder's one-line reason, no traceback).  Every frame of an animation
(GIF, multi-page TIFF, animated WebP, APNG) is decoded, one at a time: a damaged later frame is
as ``corrupt`` as a damaged first one.  Float frames (mode ``F``: float TIFF, PFM) are checked
for NaN and Inf pixels.  Uncompressed pixel rows that run past the end of the file are
``corrupt`` before anything is allocated (Pillow would allocate the image, then fail).

The schema's ``images:`` rules (:mod:`datacheck.schema._media`) are checked from the header
before any pixel is decoded: ``max_pixels`` (on by default) refuses decompression bombs without
allocating them, frame by frame, and ``max_total_pixels`` (4 x ``max_pixels`` by default)
bounds all frames together, from the frame count before any frame is decoded (a frame-count
bomb); ``mode`` and ``min_size``/``max_size`` are ``schema`` findings; ``constant`` warns about
blank frames.  :func:`check_image` is shared with the containers that hold images
(tar shards, Hugging Face folders, MDS, TFRecord).  Pillow is imported only when an image is
read (the ``media`` extra).
"""

from __future__ import annotations

import io
import re
import struct
import sys
import warnings
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from datacheck._extras import needs
from datacheck.checks._registry import Severity
from datacheck.findings import Finding
from datacheck.formats import Format, Opened, WorkUnit, _storage, register
from datacheck.formats._tensor_common import SampleChunk
from datacheck.schema._media import ImageRules, MediaSchema

__all__ = ["IMAGE_EXTS", "DecodeError", "ImageFormat", "Problem", "check_image", "read_bytes"]

IMAGE_EXTS = (
    *(".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".apng", ".webp", ".bmp", ".dib", ".gif"),
    *(".tif", ".tiff", ".ico", ".ppm", ".pgm", ".pbm", ".pnm", ".pfm", ".tga", ".jp2", ".j2k"),
    *(".avif", ".qoi", ".pcx", ".sgi", ".dds", ".icns", ".mpo"),
)
"""Raster formats Pillow both writes and reads (by their usual extensions): PFM and float
TIFF hold float pixels, checked for NaN and Inf."""
MAX_IMAGE_BYTES = 1 << 30
"""Largest encoded image read into memory."""
IMAGE_KEY = "image"
"""The manifest ``column`` of an image file's findings."""


class DecodeError(ValueError):
    """A media sample (image, audio) that cannot be decoded; the message is the decoder's."""


@dataclass(frozen=True)
class Problem:
    """A rule a decoded sample breaks: check name, severity and a message."""

    check: str
    severity: Severity
    message: str


_PIL: Any = None
"""``PIL.Image``, once imported."""


def _pil() -> Any:
    global _PIL
    if _PIL is None:
        try:
            from PIL import Image
        except ModuleNotFoundError as exc:  # pragma: no cover - the media extra is missing
            raise DecodeError(needs("decoding images", "Pillow", "media")) from exc
        _PIL = Image
    return _PIL


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if text.startswith("cannot identify image file"):
        return "not a decodable image (Pillow cannot identify its format)"
    return f"{text or type(exc).__name__}"[:300]


def check_image(data: bytes, rules: ImageRules) -> list[Problem]:
    """Decode ``data`` fully and return the rules it breaks (empty when it is fine).

    Raises:
        DecodeError: the bytes are not a decodable image (empty, truncated, bad CRC, ...).
    """
    if not data:
        raise DecodeError("empty file (0 bytes): not an image")
    image = _PIL or _pil()
    if _CONTEXT_WARNINGS:  # pragma: no cover - free-threaded Pythons (3.14+)
        with warnings.catch_warnings(action="ignore"):
            return _guarded_decode(image, data, rules)
    # What catch_warnings() + simplefilter("ignore") do, without their bookkeeping (this runs
    # for every image): a warning an "ignore" filter catches leaves nothing in any module's
    # registry, so putting the list back restores the state exactly.
    filters = warnings.filters
    warnings.filters = [_IGNORE, *filters]  # Pillow warns of what it tolerates (bad EXIF, ...)
    try:
        return _guarded_decode(image, data, rules)
    finally:
        warnings.filters = filters


_IGNORE = ("ignore", None, Warning, None, 0)
"""``simplefilter("ignore")``'s entry in ``warnings.filters``."""
_CONTEXT_WARNINGS = bool(getattr(sys.flags, "context_aware_warnings", False))
"""Warning filters held per thread and task (free-threaded Python 3.14+): not the module's list."""


def _guarded_decode(image: Any, data: bytes, rules: ImageRules) -> list[Problem]:
    """:func:`_decode` with Pillow's global pixel limit off: ``max_pixels`` (checked before
    anything is decoded) rules instead."""
    limit = image.MAX_IMAGE_PIXELS
    image.MAX_IMAGE_PIXELS = None
    try:
        return _decode(image, data, rules)
    except _DECODE_ERRORS as exc:
        raise DecodeError(_reason(exc)) from None
    finally:
        image.MAX_IMAGE_PIXELS = limit


_DECODE_ERRORS = (
    *(OSError, SyntaxError, ValueError, EOFError, struct.error),
    # what Pillow's plugins raise on damaged frame tables (GIF, TIFF pages), and MemoryError:
    # a header small enough to pass the guard can still ask for a lot
    *(IndexError, KeyError, TypeError, MemoryError),
)


def _decode(image: Any, data: bytes, rules: ImageRules) -> list[Problem]:
    im = image.open(io.BytesIO(data))
    try:
        size = im.size
        _raw_data_in_file(im, len(data))
        if (bomb := rules.bomb(size)) is not None:
            return [Problem("schema", Severity.ERROR, bomb)]
        problem = rules.header_problem(im.mode, size)
        if im.format == "PNG":  # load() skips chunk CRCs: check them first (no decode)
            _png_crcs(data)
        frames = int(getattr(im, "n_frames", 1))
        if frames > 1 and (bomb := _frames_bomb(im, frames, rules)) is not None:
            return [Problem("schema", Severity.ERROR, bomb)]
        im.load()  # the full decode: a truncated file fails only here
        out = [Problem("schema", Severity.ERROR, problem)] if problem else []
        if rules.constant and _constant(im):
            out.append(Problem("constant", Severity.WARNING, "every pixel has one value"))
        out.extend(_float_pixels(im, None))
        if frames > 1:
            out.extend(_later_frames(im, frames, rules, len(data)))
        return out
    finally:
        im.close()


def _raw_data_in_file(im: Any, size: int) -> None:
    """Refuse a frame whose uncompressed pixel rows (Pillow's ``raw`` tiles: BMP, TIFF, PPM,
    TGA, ...) run past the end of the file, before anything is allocated: Pillow would make
    the whole image, then fail with "image file is truncated" (a 57-byte BMP declaring
    151 M pixels, above the bomb guard's limit but below Pillow's own, is that: ``corrupt``).

    Each row holds at least a bit per pixel, and rows are ``stride`` bytes apart, so a tile
    needs at least ``stride * (rows - 1) + ceil(width / 8)`` bytes from its offset: less than
    that in the file and Pillow's decoder cannot finish it.

    Raises:
        OSError: the pixel data cannot be in the file.
    """
    for tile in getattr(im, "tile", None) or ():
        codec, extents, offset, args = tuple(tile)[:4]
        if codec != "raw" or not extents:
            continue
        w, h = extents[2] - extents[0], extents[3] - extents[1]
        stride = args[1] if isinstance(args, tuple) and len(args) > 1 else 0
        row = (w + 7) // 8
        if w <= 0 or h <= 0:
            continue
        need = max(int(stride or 0), row) * (h - 1) + row
        if offset + need > size:
            raise OSError(
                f"image file is truncated: {w}x{h} uncompressed pixels need at least {need} "
                f"bytes from byte {offset}, the file has {size}"
            )


def _png_crcs(data: bytes) -> None:
    """The CRC of every chunk up to ``IEND``: what Pillow's ``verify()`` checks (with its
    messages), read in place instead of copied chunk by chunk, and without the second
    ``open`` that ``verify()`` would need (it leaves the image unusable).

    Raises:
        OSError, SyntaxError: a chunk is cut short or its CRC does not match.
    """
    view = memoryview(data)
    pos = 8  # after the signature, which open() checked
    while True:
        head = data[pos : pos + 8]
        if len(head) < 4:
            raise OSError("truncated PNG file")
        cid = head[4:]
        if not _IS_CID(cid):
            raise SyntaxError(f"broken PNG file (chunk {cid!r})")
        if cid == b"IEND":
            return
        start = pos + 8
        end = start + int.from_bytes(head[:4], "big")
        if end > len(data):
            raise OSError("Truncated File Read")
        crc = data[end : end + 4]
        if len(crc) < 4:
            raise SyntaxError(f"broken PNG file (incomplete checksum in {cid!r})")
        if zlib.crc32(view[start:end], zlib.crc32(cid)) != int.from_bytes(crc, "big"):
            raise SyntaxError(f"broken PNG file (bad header checksum in {cid!r})")
        pos = end + 4


_IS_CID = re.compile(rb"\w\w\w\w").match
"""A chunk type, as Pillow reads one (four word characters)."""


def _frames_bomb(im: Any, frames: int, rules: ImageRules) -> str | None:
    """The frame-count bomb guard, before any frame is decoded (the first frame's size for
    all; Pillow counts frames from the headers, without decoding)."""
    w, h = im.size
    return rules.frames_bomb(frames, frames * w * h)


def _later_frames(im: Any, frames: int, rules: ImageRules, data_size: int) -> list[Problem]:
    """Decode every frame after the first, one at a time: NaN/Inf in float frames, and why
    the rest is refused when a frame breaks the bomb guard.

    Each frame is held to ``max_pixels`` and all together to the frame budget again as they
    come (a TIFF's pages each have their own size)."""
    total = im.size[0] * im.size[1]
    out: list[Problem] = []
    for i in range(1, frames):
        try:
            im.seek(i)
            _raw_data_in_file(im, data_size)
            if (bomb := rules.bomb(im.size)) is not None:
                return [*out, Problem("schema", Severity.ERROR, f"frame {i}: {bomb}")]
            total += im.size[0] * im.size[1]
            if (bomb := rules.frames_bomb(i + 1, total)) is not None:
                return [*out, Problem("schema", Severity.ERROR, f"frame {i}: {bomb}")]
            im.load()
        except _DECODE_ERRORS as exc:
            raise DecodeError(f"frame {i} of {frames}: {_reason(exc)}") from None
        out.extend(_float_pixels(im, i))
    return out


def _float_pixels(im: Any, frame: int | None) -> list[Problem]:
    """NaN and Inf pixels of a decoded float frame (mode ``F``: a float TIFF, a PFM depth or
    disparity map): integer modes cannot hold them."""
    if im.mode != "F":
        return []
    import numpy as np

    px = np.asarray(im)
    where = "" if frame is None else f"frame {frame}, "
    out = []
    for check, bad in (("nan", np.isnan(px)), ("inf", np.isinf(px))):
        if (n := int(bad.sum())) == 0:
            continue
        y, x = (int(v) for v in np.argwhere(bad)[0])
        what = "NaN" if check == "nan" else "Inf"
        out.append(
            Problem(check, Severity.ERROR, f"{n} {what} pixels ({where}first at x={x}, y={y})")
        )
    return out


def _constant(im: Any) -> bool:
    extrema = im.getextrema()
    if not isinstance(extrema[0], tuple):  # one band: (min, max)
        extrema = (extrema,)
    return all(lo == hi for lo, hi in extrema) and len({lo for lo, _ in extrema}) == 1


def read_bytes(path: str, limit: int = MAX_IMAGE_BYTES) -> bytes:
    """A whole (small) file, local or remote, refusing files above ``limit``."""
    data = _storage.read_small(path, limit)
    if data is None:
        raise DecodeError(f"file above the {limit}-byte limit for an image: not read")
    return data


class ImageFormat(Format):
    """One image file = one sample (row 0); the findings of its rules are file level."""

    name = "image"
    requires = (("PIL", "Pillow", "media"),)
    work_per_byte = 10.0  # a JPEG decodes at ~55 MB/s
    extensions = IMAGE_EXTS
    tabular = False

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        media = options.get("media")
        rules = media.images if isinstance(media, MediaSchema) else _NO_RULES
        problems = check_image(read_bytes(unit.path), rules)
        found = [Finding(unit.path, p.check, p.severity, p.message, IMAGE_KEY) for p in problems]
        chunk = SampleChunk(row_offset=0, samples=1, findings=found)
        return Opened({}, iter((chunk,)), expected_rows=1)


_NO_RULES = ImageRules()
"""The rules without a schema (the default bomb guard)."""

register(ImageFormat())
