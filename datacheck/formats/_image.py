"""Image files (``.jpg .jpeg .png .webp .bmp .gif .tif .tiff``), each one fully decoded.

A truncated JPEG passes a header check and ``Image.verify()``: only a full decode (``load()``)
finds it, so every image is decoded, the way a DataLoader worker would.  PNGs are also verified
first, since Pillow's decoder does not check the chunk CRCs.  An image that does not decode is
a ``corrupt`` file (the decoder's one-line reason, no traceback).  Every frame of an animation
(GIF, multi-page TIFF, animated WebP, APNG) is decoded, one at a time: a damaged later frame is
as ``corrupt`` as a damaged first one.

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

import contextlib
import io
import struct
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from datacheck.checks._registry import Severity
from datacheck.findings import Finding
from datacheck.formats import Format, Opened, WorkUnit, _storage, register
from datacheck.formats._tensor_common import SampleChunk
from datacheck.schema._media import ImageRules, media_rules

__all__ = ["IMAGE_EXTS", "DecodeError", "ImageFormat", "Problem", "check_image", "read_bytes"]

IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
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


def _pil() -> Any:
    try:
        from PIL import Image
    except ModuleNotFoundError as exc:  # pragma: no cover - the media extra is missing
        raise DecodeError(
            "decoding images needs Pillow: pip install 'datacheck-ml[media]'"
        ) from exc
    return Image


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
    image = _pil()
    try:
        with _own_bomb_guard(image):
            return _decode(image, data, rules)
    except _DECODE_ERRORS as exc:
        raise DecodeError(_reason(exc)) from None


_DECODE_ERRORS = (
    *(OSError, SyntaxError, ValueError, EOFError, struct.error),
    # what Pillow's plugins raise on damaged frame tables (GIF, TIFF pages), and MemoryError:
    # a header small enough to pass the guard can still ask for a lot
    *(IndexError, KeyError, TypeError, MemoryError),
)


@contextlib.contextmanager
def _own_bomb_guard(image: Any) -> Iterator[None]:
    """Pillow's global pixel limit off while ``max_pixels`` (checked before decoding) rules."""
    limit = image.MAX_IMAGE_PIXELS
    image.MAX_IMAGE_PIXELS = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow warns of what it tolerates (bad EXIF, ...)
            yield
    finally:
        image.MAX_IMAGE_PIXELS = limit


def _decode(image: Any, data: bytes, rules: ImageRules) -> list[Problem]:
    im = image.open(io.BytesIO(data))
    try:
        if (bomb := rules.bomb(im.size)) is not None:
            return [Problem("schema", Severity.ERROR, bomb)]
        problem = rules.header_problem(im.mode, im.size)
        if im.format == "PNG":  # load() skips chunk CRCs; verify() checks them (no decode)
            im.verify()
            im.close()
            im = image.open(io.BytesIO(data))  # verify() leaves the image unusable
        if (bomb := _frames_bomb(im, rules)) is not None:
            return [Problem("schema", Severity.ERROR, bomb)]
        im.load()  # the full decode: a truncated file fails only here
        out = [Problem("schema", Severity.ERROR, problem)] if problem else []
        if rules.constant and _constant(im):
            out.append(Problem("constant", Severity.WARNING, "every pixel has one value"))
        if (bomb := _later_frames(im, rules)) is not None:
            out.append(Problem("schema", Severity.ERROR, bomb))
        return out
    finally:
        im.close()


def _frames_bomb(im: Any, rules: ImageRules) -> str | None:
    """The frame-count bomb guard, before any frame is decoded (the first frame's size for
    all; Pillow counts frames from the headers, without decoding)."""
    frames = int(getattr(im, "n_frames", 1))
    w, h = im.size
    return rules.frames_bomb(frames, frames * w * h) if frames > 1 else None


def _later_frames(im: Any, rules: ImageRules) -> str | None:
    """Decode every frame after the first, one at a time; why the rest is refused, or None.

    Each frame is held to ``max_pixels`` and all together to the frame budget again as they
    come (a TIFF's pages each have their own size)."""
    frames = int(getattr(im, "n_frames", 1))
    total = im.size[0] * im.size[1]
    for i in range(1, frames):
        try:
            im.seek(i)
            if (bomb := rules.bomb(im.size)) is not None:
                return f"frame {i}: {bomb}"
            total += im.size[0] * im.size[1]
            if (bomb := rules.frames_bomb(i + 1, total)) is not None:
                return f"frame {i}: {bomb}"
            im.load()
        except _DECODE_ERRORS as exc:
            raise DecodeError(f"frame {i} of {frames}: {_reason(exc)}") from None
    return None


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
    extensions = IMAGE_EXTS
    tabular = False

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        problems = check_image(read_bytes(unit.path), media_rules(options).images)
        found = [Finding(unit.path, p.check, p.severity, p.message, IMAGE_KEY) for p in problems]
        chunk = SampleChunk(row_offset=0, tensors={}, samples=1, findings=found)
        return Opened({}, iter([chunk]), expected_rows=1)


register(ImageFormat())
