"""Audio files (``.wav .flac .ogg .opus .mp3 .aiff``, as far as libsndfile decodes them), fully
decoded.

Every frame is decoded (``soundfile``, a thin binding to libsndfile), a block at a time.  Float
PCM (WAV ``FLOAT``/``DOUBLE``) is checked for NaN and Inf like any tensor; integer PCM cannot
hold them.  A file libsndfile cannot open or decode is ``corrupt``.  libsndfile is the oracle:
a WAV whose ``data`` chunk claims more bytes than the file holds (a recorder that died before
it finished the file) is read by it, frames present only, so those are checked and the file
gets a ``truncated`` warning naming both sizes, never ``corrupt``.
:func:`check_audio` is shared with tar shards and Hugging Face ``Audio`` columns.  soundfile is
imported only when audio is read (the ``media`` extra).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from datacheck._extras import needs
from datacheck.checks._registry import Severity
from datacheck.findings import Finding
from datacheck.formats import Format, Opened, WorkUnit, register
from datacheck.formats._image import DecodeError, Problem, read_bytes
from datacheck.formats._tensor_common import SampleChunk

__all__ = ["AUDIO_EXTS", "AudioFormat", "check_audio"]

AUDIO_EXTS = (".wav", ".flac", ".ogg", ".opus", ".mp3", ".aiff", ".aif")
AUDIO_KEY = "audio"
_BLOCK = 1 << 16
_FLOAT_SUBTYPES = ("FLOAT", "DOUBLE")


def _soundfile() -> Any:
    try:
        import soundfile
    except (ModuleNotFoundError, OSError) as exc:  # pragma: no cover - media extra missing
        raise DecodeError(needs("decoding audio", "soundfile", "media")) from exc
    return soundfile


def _wav_truncation(data: bytes) -> str | None:
    """A RIFF/WAVE file whose ``data`` chunk claims bytes past the end of the file."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        if cid == b"data":
            have = len(data) - pos - 8
            if size > have and size != 0xFFFFFFFF:  # 0xFFFFFFFF: a streamed, unsized WAV
                return f"the data chunk claims {size} bytes, the file holds {have}"
            return None
        pos += 8 + size + (size & 1)
    return None


def check_audio(data: bytes) -> list[Problem]:
    """Decode ``data`` fully; NaN/Inf in float PCM are the problems returned.

    Raises:
        DecodeError: the bytes are not decodable audio (empty, truncated, unknown format).
    """
    if not data:
        raise DecodeError("empty file (0 bytes): not audio")
    cut = _wav_truncation(data)
    sf = _soundfile()
    nan = inf = 0
    first: int | None = None
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            floating = f.subtype in _FLOAT_SUBTYPES
            frame = 0
            for block in f.blocks(blocksize=_BLOCK, dtype="float32", always_2d=True):
                if floating:
                    bad_nan, bad_inf = np.isnan(block), np.isinf(block)
                    nan, inf = nan + int(bad_nan.sum()), inf + int(bad_inf.sum())
                    rows = np.flatnonzero((bad_nan | bad_inf).any(axis=1))
                    if first is None and len(rows):
                        first = frame + int(rows[0])
                frame += len(block)
    except (RuntimeError, ValueError, OSError, EOFError) as exc:  # LibsndfileError too
        raise DecodeError(_reason(exc)) from None
    out = [Problem("truncated", Severity.WARNING, f"{cut}; {frame} frames read")] if cut else []
    if nan:
        out.append(Problem("nan", Severity.ERROR, f"{nan} NaN samples (first at frame {first})"))
    if inf:
        out.append(Problem("inf", Severity.ERROR, f"{inf} Inf samples (first at frame {first})"))
    return out


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if text.startswith("Error opening <"):  # "Error opening <_io.BytesIO ...>: reason"
        text = "cannot open: " + text.split(">: ", 1)[-1]
    return (text or type(exc).__name__)[:300]


class AudioFormat(Format):
    """One audio file = one sample (row 0); NaN/Inf in it are file-level findings."""

    name = "audio"
    requires = (("soundfile", "soundfile", "media"),)
    work_per_byte = 4.0  # FLAC/Ogg decode at ~100 MB/s
    extensions = AUDIO_EXTS
    tabular = False

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        problems = check_audio(read_bytes(unit.path))
        found = [Finding(unit.path, p.check, p.severity, p.message, AUDIO_KEY) for p in problems]
        chunk = SampleChunk(row_offset=0, tensors={}, samples=1, findings=found)
        return Opened({}, iter([chunk]), expected_rows=1)


register(AudioFormat())
