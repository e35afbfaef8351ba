"""The new readers on damaged input: every cut and flipped byte ends as findings, never a crash."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
from _mediakit import write_hf_split, write_mds
from test_formats_animation import animation
from test_formats_image import image_bytes
from test_formats_tfrecord import records, write
from test_formats_tokens import docs, write_megatron

import datacheck


def _tar(path: Path) -> Path:
    with tarfile.open(path, "w") as tf:
        for i in range(3):
            data = image_bytes("PNG" if i % 2 else "JPEG")
            info = tarfile.TarInfo(f"s{i}.{'png' if i % 2 else 'jpg'}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _fixture(kind: str, d: Path) -> tuple[Path, Path]:
    """(folder to scan, file to damage)."""
    if kind == "jpeg":
        (d / "a.jpg").write_bytes(image_bytes("JPEG"))
        return d, d / "a.jpg"
    if kind == "png":
        (d / "a.png").write_bytes(image_bytes("PNG"))
        return d, d / "a.png"
    if kind == "tar":
        return d, _tar(d / "s.tar")
    if kind == "megatron":
        idx, _ = write_megatron(d / "c", docs(10))
        return d, idx
    if kind == "tfrecord":
        return d, write(d / "a.tfrecord", records(4))
    if kind == "gif":  # animated: damage in a later frame counts too
        (d / "a.gif").write_bytes(animation("GIF"))
        return d, d / "a.gif"
    if kind.startswith("mds"):
        codec = kind.partition(".")[2] or None
        folder = write_mds(d / "mds", n=4, compression=codec, hashes=())
        return folder, next(folder.glob("shard.*"))
    folder = write_hf_split(d / "train", n=4, files=1)
    return folder, folder / "data-00000-of-00001.arrow"


KINDS = ["jpeg", "png", "gif", "tar", "megatron", "tfrecord", "mds", "mds.zstd", "mds.br", "hf"]


@pytest.mark.parametrize("kind", KINDS)
def test_cuts_and_flips_never_crash(kind: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(sum(map(ord, kind)))
    for trial in range(6):
        d = tmp_path / f"t{trial}"
        d.mkdir()
        folder, victim = _fixture(kind, d)
        data = bytearray(victim.read_bytes())
        if trial < 3:
            data = data[: int(rng.integers(0, len(data)))]
        else:
            for at in rng.integers(0, len(data), 3):
                data[at] ^= int(rng.integers(1, 256))
        victim.write_bytes(bytes(data))
        report = datacheck.scan(str(folder), out=str(d / "out"), executor="inprocess")
        entry = next(f for f in report.data["files"] if f["path"] == str(victim))
        assert entry["status"] in ("ok", "flagged", "corrupt")
        if trial < 3 and kind not in ("tar", "tfrecord", "hf", "gif"):  # no cut goes unnoticed
            assert entry["status"] != "ok", (kind, len(data), entry)
