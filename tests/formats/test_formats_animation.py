"""Animations (GIF, multi-page TIFF, animated WebP, APNG): every frame decoded, one at a time,
and all frames together held to the frame budget before any is decoded."""

from __future__ import annotations

import io
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import datacheck
from datacheck.schema._media import DEFAULT_MAX_PIXELS, MAX_FRAMES, TOTAL_PIXELS_FACTOR

FORMATS = {"gif": "GIF", "tif": "TIFF", "webp": "WEBP", "png": "PNG"}


def animation(fmt: str, frames: int = 4, sizes: list[tuple[int, int]] | None = None) -> bytes:
    """``frames`` frames of random pixels (32x32, or ``sizes`` per frame: TIFF pages)."""
    rng = np.random.default_rng(frames)
    sizes = sizes or [(32, 32)] * frames
    images = [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for w, h in sizes]
    if fmt == "GIF":
        images = [im.convert("P") for im in images]
    buf = io.BytesIO()
    extra = {"lossless": True} if fmt == "WEBP" else {}
    images[0].save(buf, fmt, save_all=True, append_images=images[1:], **extra)
    return buf.getvalue()


def gif_frame_bomb(frames: int = 40, side: int = 8000) -> bytes:
    """``frames`` 1x1 frames on a ``side`` x ``side`` canvas: a few hundred bytes, and every
    frame decodes to the whole canvas (64 MB each here)."""
    images = [Image.new("P", (1, 1), i) for i in range(frames)]
    buf = io.BytesIO()
    images[0].save(buf, "GIF", save_all=True, append_images=images[1:], optimize=False)
    data = bytearray(buf.getvalue())
    data[6:10] = struct.pack("<HH", side, side)  # the logical screen: every frame's canvas
    return bytes(data)


def gif_of_pixels(frames: int) -> bytes:
    """``frames`` 1x1 frames, written by hand (15 bytes a frame; Pillow takes minutes to save
    that many): header, a two-colour palette, then the same image block again and again."""
    head = b"GIF89a" + struct.pack("<HHBBB", 1, 1, 0x80, 0, 0) + b"\xff\xff\xff\0\0\0"
    frame = b"," + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    return head + frame * frames + b";"


def scan(path: Path, **kw: object) -> datacheck.Report:
    return datacheck.scan(str(path), executor="inprocess", workers=1, **kw)


def by_name(report: datacheck.Report) -> dict[str, dict]:
    return {Path(f["path"]).name: f for f in report.data["files"]}


def test_good_animations_pass(tmp_path: Path) -> None:
    for ext, fmt in FORMATS.items():
        (tmp_path / f"anim.{ext}").write_bytes(animation(fmt))
        assert Image.open(tmp_path / f"anim.{ext}").n_frames == 4
    report = scan(tmp_path)
    assert {n: f["status"] for n, f in by_name(report).items()} == {
        f"anim.{ext}": "ok" for ext in FORMATS
    }


@pytest.mark.parametrize("ext", ["gif", "tif"])
def test_truncated_last_frame_is_corrupt(ext: str, tmp_path: Path) -> None:
    data = animation(FORMATS[ext])
    cut = data[: int(len(data) * 0.95)]
    first = Image.open(io.BytesIO(cut))
    first.load()  # the first frame is whole: a first-frame decode would call it fine
    (tmp_path / f"cut.{ext}").write_bytes(cut)
    entry = by_name(scan(tmp_path))[f"cut.{ext}"]
    assert entry["status"] == "corrupt"
    assert "frame 3 of 4" in entry["error"] and "truncated" in entry["error"], entry["error"]


def test_damaged_later_gif_frame_is_corrupt(tmp_path: Path) -> None:
    data = bytearray(animation("GIF"))
    for at in range(int(len(data) * 0.9), int(len(data) * 0.9) + 8):
        data[at] ^= 0xFF  # inside frame 3's LZW data
    (tmp_path / "flip.gif").write_bytes(bytes(data))
    entry = by_name(scan(tmp_path))["flip.gif"]
    assert entry["status"] == "corrupt" and "frame 3 of 4" in entry["error"], entry


@pytest.mark.parametrize("ext", ["webp", "png"])
def test_truncated_webp_and_apng_are_corrupt(ext: str, tmp_path: Path) -> None:
    data = animation(FORMATS[ext])
    (tmp_path / f"cut.{ext}").write_bytes(data[: int(len(data) * 0.95)])
    assert by_name(scan(tmp_path))[f"cut.{ext}"]["status"] == "corrupt"


def test_frame_count_bomb_refused_before_decoding(tmp_path: Path) -> None:
    data = gif_frame_bomb()
    assert len(data) < 2000
    (tmp_path / "bomb.gif").write_bytes(data)
    report = scan(tmp_path)
    entry = by_name(report)["bomb.gif"]
    assert entry["status"] == "flagged" and entry["counts"] == {"schema": 1}
    (value,) = report.findings["value"]
    budget = TOTAL_PIXELS_FACTOR * DEFAULT_MAX_PIXELS
    assert value == (
        f"40 frames, {40 * 8000 * 8000} pixels in all, above max_total_pixels {budget} "
        "(frame-count bomb guard): not decoded"
    )


def test_too_many_frames_refused_whatever_their_size(tmp_path: Path) -> None:
    (tmp_path / "ok.gif").write_bytes(gif_of_pixels(1000))
    (tmp_path / "many.gif").write_bytes(gif_of_pixels(MAX_FRAMES + 1))
    assert Image.open(tmp_path / "ok.gif").n_frames == 1000
    report = scan(tmp_path)
    assert by_name(report)["ok.gif"]["status"] == "ok"
    (value,) = report.findings["value"]
    assert (
        value
        == f"{MAX_FRAMES + 1} frames, above {MAX_FRAMES} (frame-count bomb guard): not decoded"
    )


def test_schema_frame_budget_and_a_tiff_page_too_big(tmp_path: Path) -> None:
    (tmp_path / "long.gif").write_bytes(animation("GIF", frames=10))  # 10 x 1,024 pixels
    (tmp_path / "short.gif").write_bytes(animation("GIF", frames=2))
    pages = animation("TIFF", sizes=[(32, 32), (32, 32), (150, 150)])
    (tmp_path / "pages.tif").write_bytes(pages)
    schema = tmp_path / "s.yaml"
    schema.write_text("images:\n  max_pixels: 20000\n  max_total_pixels: 5000\n")
    report = scan(tmp_path, schema=str(schema))
    f = report.findings.set_index(report.findings["path"].map(lambda p: Path(p).name))
    assert set(f.index) == {"long.gif", "pages.tif"}
    assert f.loc["long.gif", "value"].startswith("10 frames, 10240 pixels in all, above max_total")
    # the first page's size says 3 x 1,024: only page 2 shows it is 150x150
    assert f.loc["pages.tif", "value"].startswith("frame 2: 150x150 = 22500 pixels, above max_")


def test_schema_max_total_pixels_mistake(tmp_path: Path) -> None:
    schema = tmp_path / "s.yaml"
    schema.write_text("images:\n  max_total_pixels: 0\n")
    with pytest.raises(datacheck.SchemaError, match="max_total_pixels must be a positive"):
        datacheck.load_schema(str(schema))


def test_tar_member_with_a_truncated_later_frame(tmp_path: Path) -> None:
    good = animation("GIF")
    members = [("s000.gif", good), ("s001.gif", good[: int(len(good) * 0.95)]), ("s002.gif", good)]
    with tarfile.open(tmp_path / "shard.tar", "w") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    f = scan(tmp_path / "shard.tar").findings
    assert {(int(r.row), r.column, r.check) for r in f.itertuples()} == {(1, "gif", "corrupt")}
    assert "frame 3 of 4" in f["value"].iloc[0]
