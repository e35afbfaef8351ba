"""The ``images:`` and ``tokens:`` sections of a schema file: rules for media and token data.

They sit beside pandera's ``columns:`` (pandera never sees them)::

    images:
      mode: RGB                 # or a list: [RGB, L]; another mode -> schema (error)
      min_size: [32, 32]        # width, height; smaller -> schema (error)
      max_size: [4096, 4096]    # larger -> schema (error)
      max_pixels: 89478485      # decompression-bomb guard, checked from the header before
                                # decoding (default: Pillow's limit); more -> schema, not decoded
      max_total_pixels: 357913940  # all frames of an animation (GIF, TIFF pages, WebP, APNG)
                                # together (default: 4 x max_pixels), from the frame count
                                # before any frame is decoded; more -> schema, not decoded
                                # (so are more than MAX_FRAMES = 100,000 frames)
      constant: true            # every pixel one value (a blank frame) -> constant (warning)
    tokens:
      vocab_size: 50257         # an id outside [0, vocab_size) -> out_of_range (error)
      dtype: uint16             # flat token files (nanoGPT train.bin) have no header: say it here
      empty: warning            # empty documents/sequences: warning (default) | error | off

Every image is fully decoded whatever the schema says; without a ``tokens:`` section token
ids are only checked against their dtype.  Mistakes raise :class:`~datacheck.errors.SchemaError`
naming the setting, the value and the fix.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from datacheck.checks._registry import Severity
from datacheck.errors import SchemaError

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "ImageRules",
    "MAX_FRAMES",
    "MediaSchema",
    "TOKEN_DTYPES",
    "TOTAL_PIXELS_FACTOR",
    "TokenRules",
    "parse_media_sections",
]

DEFAULT_MAX_PIXELS = 89_478_485
"""Pillow's own ``Image.MAX_IMAGE_PIXELS`` (about 0.25 GiB of 24-bit pixels)."""
TOTAL_PIXELS_FACTOR = 4
"""The default budget of an animation's frames together, in units of ``max_pixels``: one frame
is decoded at a time, so this bounds time (a few seconds of decoding), not memory."""
MAX_FRAMES = 100_000
"""More frames than this are refused whatever their size: a frame costs time even at one
pixel (about 33 us in Pillow), so a GIF of millions of 1x1 frames would run for minutes."""
IMAGE_MODES = (
    *("1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "LAB"),
    *("HSV", "I", "F", "I;16", "I;16B", "I;16L"),
)
"""Pillow's image modes."""
TOKEN_DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "int64")
_IMAGE_KEYS = ("constant", "max_pixels", "max_size", "min_size", "mode", "max_total_pixels")
_TOKEN_KEYS = ("dtype", "empty", "vocab_size")
SECTIONS = ("images", "tokens")
"""Top-level schema keys this module reads."""


@dataclass(frozen=True)
class ImageRules:
    """What every decoded image must satisfy (all optional but the bomb guard)."""

    modes: tuple[str, ...] = ()
    """Accepted Pillow modes; empty = any."""
    min_size: tuple[int, int] | None = None
    """Smallest (width, height)."""
    max_size: tuple[int, int] | None = None
    """Largest (width, height)."""
    max_pixels: int | None = DEFAULT_MAX_PIXELS
    """Images with more pixels are refused before decoding (None: no limit)."""
    constant: bool = False
    """Warn about images whose every pixel has one value (the first frame of an animation)."""
    max_total_pixels: int | None = None
    """Pixels of all frames of an animation together; None: ``TOTAL_PIXELS_FACTOR`` x
    ``max_pixels`` (no limit when ``max_pixels`` is None)."""

    @property
    def frame_budget(self) -> int | None:
        """The most pixels decoded for one file, all frames together (None: no limit)."""
        if self.max_total_pixels is not None:
            return self.max_total_pixels
        return None if self.max_pixels is None else TOTAL_PIXELS_FACTOR * self.max_pixels

    def frames_bomb(self, frames: int, pixels: int) -> str | None:
        """Why ``frames`` frames of ``pixels`` pixels in all must not be decoded (or None)."""
        if frames > MAX_FRAMES:
            return f"{frames} frames, above {MAX_FRAMES} (frame-count bomb guard): not decoded"
        budget = self.frame_budget
        if budget is not None and pixels > budget:
            return (
                f"{frames} frames, {pixels} pixels in all, above max_total_pixels {budget} "
                "(frame-count bomb guard): not decoded"
            )
        return None

    def bomb(self, size: tuple[int, int]) -> str | None:
        """Why an image of this size must not be decoded (None when it may be)."""
        w, h = size
        if self.max_pixels is not None and w * h > self.max_pixels:
            return (
                f"{w}x{h} = {w * h} pixels, above max_pixels {self.max_pixels} "
                "(decompression-bomb guard): not decoded"
            )
        return None

    def header_problem(self, mode: str, size: tuple[int, int]) -> str | None:
        """What the header says is against the rules (checked before any pixel is decoded)."""
        w, h = size
        if self.modes and mode not in self.modes:
            return f"mode {mode}, schema says {' or '.join(self.modes)}"
        if self.min_size is not None and (w < self.min_size[0] or h < self.min_size[1]):
            return f"size {w}x{h}, below min_size {self.min_size[0]}x{self.min_size[1]}"
        if self.max_size is not None and (w > self.max_size[0] or h > self.max_size[1]):
            return f"size {w}x{h}, above max_size {self.max_size[0]}x{self.max_size[1]}"
        return None


@dataclass(frozen=True)
class TokenRules:
    """Token-id datasets (Megatron ``.bin``/``.idx``, flat ``train.bin``)."""

    vocab_size: int | None = None
    """Ids must lie in ``[0, vocab_size)``; None: only the dtype bounds them."""
    dtype: str | None = None
    """The id dtype of flat token files (required for them; Megatron's ``.idx`` says its own)."""
    empty: Severity | None = Severity.WARNING
    """Severity of an empty document or sequence (None: not reported)."""


@dataclass(frozen=True)
class MediaSchema:
    """The ``images:`` and ``tokens:`` sections; the defaults apply without a schema."""

    images: ImageRules = field(default_factory=ImageRules)
    tokens: TokenRules = field(default_factory=TokenRules)


def media_rules(options: Mapping[str, Any]) -> MediaSchema:
    """The media rules a reader was given in its options (defaults without a schema)."""
    rules = options.get("media")
    return rules if isinstance(rules, MediaSchema) else MediaSchema()


def _unknown(name: Any, valid: tuple[str, ...], at: str) -> SchemaError:
    close = difflib.get_close_matches(str(name), valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return SchemaError(f"{at}: unknown setting {name!r}{hint}; valid: {', '.join(valid)}")


def _positive_int(value: Any, what: str) -> int:
    if type(value) is not int or value <= 0:
        raise SchemaError(f"{what} must be a positive integer, got {value!r}")
    return value


def _size(value: Any, what: str) -> tuple[int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise SchemaError(f"{what} must be [width, height], got {value!r}")
    return _positive_int(value[0], what), _positive_int(value[1], what)


def _parse_images(section: Any, at: str) -> ImageRules:
    if not isinstance(section, Mapping):
        raise SchemaError(f"{at}: expected a mapping of rules (e.g. mode: RGB), got {section!r}")
    for name in section:
        if name not in _IMAGE_KEYS:
            raise _unknown(name, _IMAGE_KEYS, at)
    modes = section.get("mode") or ()
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    for mode in modes:
        if mode not in IMAGE_MODES:
            raise _unknown(mode, IMAGE_MODES, f"{at}, mode")
    constant = section.get("constant", False)
    if not isinstance(constant, bool):
        raise SchemaError(f"{at}: constant must be true or false, got {constant!r}")
    max_pixels = section.get("max_pixels", DEFAULT_MAX_PIXELS)
    if max_pixels is not None:
        max_pixels = _positive_int(max_pixels, f"{at}: max_pixels")
    size = {k: _size(section[k], f"{at}: {k}") if k in section else None for k in _IMAGE_KEYS[2:4]}
    total = section.get("max_total_pixels")
    if total is not None:
        total = _positive_int(total, f"{at}: max_total_pixels")
    return ImageRules(modes, size["min_size"], size["max_size"], max_pixels, constant, total)


def _parse_tokens(section: Any, at: str) -> TokenRules:
    if not isinstance(section, Mapping):
        raise SchemaError(f"{at}: expected a mapping (e.g. vocab_size: 50257), got {section!r}")
    for name in section:
        if name not in _TOKEN_KEYS:
            raise _unknown(name, _TOKEN_KEYS, at)
    vocab = section.get("vocab_size")
    if vocab is not None:
        vocab = _positive_int(vocab, f"{at}: vocab_size")
    dtype = section.get("dtype")
    if dtype is not None and dtype not in TOKEN_DTYPES:
        raise _unknown(dtype, TOKEN_DTYPES, f"{at}, dtype")
    empty = section.get("empty", "warning")
    valid = ("warning", "error", "off")
    if empty not in valid and empty is not False:
        raise SchemaError(f"{at}: empty must be one of {', '.join(valid)}, got {empty!r}")
    severity = None if empty in ("off", False) else Severity(empty)
    return TokenRules(vocab, dtype, severity)


def parse_media_sections(doc: Mapping[str, Any], where: str) -> MediaSchema | None:
    """The ``images:``/``tokens:`` sections of a schema document (None if it has neither).

    Raises:
        SchemaError: for any mistake, naming the setting, the value and the fix.
    """
    if not any(k in doc for k in SECTIONS):
        return None
    images = ImageRules()
    tokens = TokenRules()
    if doc.get("images") is not None:
        images = _parse_images(doc["images"], f"schema {where}, images")
    if doc.get("tokens") is not None:
        tokens = _parse_tokens(doc["tokens"], f"schema {where}, tokens")
    return MediaSchema(images, tokens)
