"""Audio as ``soundfile`` (libsndfile) writes it, read back by soundfile as the oracle: WAV in
every PCM width and float, extensible WAV, RF64, FLAC, Ogg Vorbis and Opus, MP3, AIFF."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ._kit import copy_of, flip, only_entry, scan, sites, truncate

sf = pytest.importorskip("soundfile")

FRAMES, RATE = 4000, 16000
CELLS = {  # name: (extension, format, subtype)
    "wav_pcm16": (".wav", "WAV", "PCM_16"),
    "wav_pcm24": (".wav", "WAV", "PCM_24"),
    "wav_pcm32": (".wav", "WAV", "PCM_32"),
    "wav_float": (".wav", "WAV", "FLOAT"),
    "wav_double": (".wav", "WAV", "DOUBLE"),
    "wavex_pcm16": (".wav", "WAVEX", "PCM_16"),
    "wavex_float": (".wav", "WAVEX", "FLOAT"),
    "rf64_float": (".wav", "RF64", "FLOAT"),
    "flac16": (".flac", "FLAC", "PCM_16"),
    "flac24": (".flac", "FLAC", "PCM_24"),
    "ogg_vorbis": (".ogg", "OGG", "VORBIS"),
    "opus": (".opus", "OGG", "OPUS"),
    "mp3": (".mp3", "MP3", "MPEG_LAYER_III"),
    "aiff_float": (".aiff", "AIFF", "FLOAT"),
}
FLOAT_CELLS = sorted(k for k, (_, _, sub) in CELLS.items() if sub in ("FLOAT", "DOUBLE"))


def signal(nan_at: int | None = None) -> np.ndarray:
    t = np.arange(FRAMES) / RATE
    x = 0.3 * np.stack([np.sin(2 * np.pi * 440 * t), np.cos(2 * np.pi * 220 * t)], axis=1)
    if nan_at is not None:
        x[nan_at, 1] = np.nan
        x[nan_at + 10, 0] = np.inf
    return x


def write(cell: str, path: Path, nan_at: int | None = None) -> Path:
    _, fmt, subtype = CELLS[cell]
    rate = 48000 if subtype == "OPUS" else RATE  # Opus takes 8/12/16/24/48 kHz; 48k is usual
    sf.write(path, signal(nan_at), rate, format=fmt, subtype=subtype)
    return path


def sf_reads(path: Path) -> bool:
    """The oracle: libsndfile opens it and decodes every frame."""
    try:
        with sf.SoundFile(path) as f:
            for _ in f.blocks(blocksize=1 << 14):
                pass
    except Exception:  # noqa: BLE001 - LibsndfileError, RuntimeError, ...
        return False
    return True


def agrees(path: Path) -> dict:
    entry = only_entry(path)
    assert (entry["status"] == "corrupt") == (not sf_reads(path)), entry
    return entry


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_soundfile_clean_and_damaged(cell: str, tmp_path: Path) -> None:
    ext = CELLS[cell][0]
    clean = write(cell, tmp_path / f"{cell}{ext}")
    assert sf_reads(clean)
    entry = only_entry(clean)
    assert entry["status"] == "ok" and entry["format"] == "audio", entry
    size = clean.stat().st_size
    cut = agrees(truncate(copy_of(clean, tmp_path / "cut" / clean.name), size // 2))
    if cell.startswith("wav"):  # libsndfile reads the frames a cut WAV holds: a warning
        assert cut["status"] == "flagged" and cut["counts"] == {"truncated": 1}, cut
    for name, at in (("head", 2), ("mid", size // 2), ("tail", -7)):
        agrees(flip(copy_of(clean, tmp_path / name / clean.name), at))


@pytest.mark.parametrize("cell", FLOAT_CELLS)
def test_nan_and_inf_samples_of_float_audio(cell: str, tmp_path: Path) -> None:
    path = write(cell, tmp_path / f"{cell}{CELLS[cell][0]}", nan_at=1234)
    data, _ = sf.read(path)
    assert np.isnan(data[1234, 1]) and np.isinf(data[1244, 0])  # as libsndfile reads them
    assert sites(scan(path)) == {
        (path.name, None, "audio", "nan"),
        (path.name, None, "audio", "inf"),
    }
    f = scan(path).findings
    assert set(f["value"]) == {
        "1 NaN samples (first at frame 1234)",
        "1 Inf samples (first at frame 1234)",
    }
