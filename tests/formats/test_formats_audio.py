"""Audio files and tar members: decoded, float PCM NaN/Inf found, undecodable -> corrupt."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import soundfile as sf

import datacheck


def audio_bytes(fmt: str = "WAV", subtype: str = "FLOAT", nan_at: int | None = None) -> bytes:
    x = np.random.default_rng(0).uniform(-0.5, 0.5, (800, 2)).astype(np.float32)
    if nan_at is not None:
        x[nan_at, 1] = np.nan
        x[nan_at + 3, 0] = np.inf
    buf = io.BytesIO()
    sf.write(buf, x, 16000, format=fmt, subtype=subtype)
    return buf.getvalue()


def scan(path: Path, **kw: object) -> datacheck.Report:
    return datacheck.scan(str(path), executor="inprocess", workers=1, **kw)


def test_audio_folder(tmp_path: Path) -> None:
    d = tmp_path / "clips"
    d.mkdir()
    (d / "ok.wav").write_bytes(audio_bytes())
    (d / "ok.flac").write_bytes(audio_bytes("FLAC", "PCM_16"))
    (d / "nan.wav").write_bytes(audio_bytes(nan_at=100))
    wav = audio_bytes()
    (d / "cut.wav").write_bytes(wav[: len(wav) // 2])
    (d / "empty.flac").write_bytes(b"")
    (d / "junk.ogg").write_bytes(b"OggS" + b"\0" * 100)
    report = scan(d)
    files = {Path(f["path"]).name: f for f in report.data["files"]}
    assert files["ok.wav"]["status"] == files["ok.flac"]["status"] == "ok"
    assert files["nan.wav"]["status"] == "flagged"
    assert files["nan.wav"]["counts"] == {"nan": 1, "inf": 1}
    for name in ("empty.flac", "junk.ogg"):
        assert files[name]["status"] == "corrupt", name
    # libsndfile, the oracle, reads the frames a cut WAV holds: those are checked, and the
    # data chunk's claim past the end of the file is a warning
    frames = len(sf.read(d / "cut.wav")[0])
    assert 0 < frames < 800
    assert files["cut.wav"]["status"] == "flagged"
    assert files["cut.wav"]["counts"] == {"truncated": 1}
    f = report.findings
    (cut,) = f[f["check"] == "truncated"]["value"]
    assert cut.endswith(f"; {frames} frames read") and "the data chunk claims 6400 bytes" in cut
    nan = f[f["check"] == "nan"]["value"].iloc[0]
    assert nan == "1 NaN samples (first at frame 100)"


def test_tar_audio_members(tmp_path: Path) -> None:
    members = [("a.wav", audio_bytes()), ("b.wav", audio_bytes(nan_at=5)), ("c.flac", b"fLaC")]
    path = tmp_path / "s.tar"
    with tarfile.open(path, "w") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    report = scan(path)
    sites = {(int(r.row), r.column, r.check) for r in report.findings.itertuples()}
    assert sites == {(1, "wav", "nan"), (1, "wav", "inf"), (2, "flac", "corrupt")}
