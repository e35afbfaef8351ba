"""Every raster format Pillow writes, in the modes pipelines write them (16-bit, palette,
CMYK, progressive, float, animated, multi-page), read back by Pillow as the oracle: it opens
the file, ``verify()``s a PNG, and decodes every frame."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ._kit import copy_of, flip, only_entry, scan, sites, truncate

Image = pytest.importorskip("PIL.Image")
features = pytest.importorskip("PIL.features")

W, H = 48, 32


def picture(mode: str, seed: int = 0) -> Any:
    """A noisy picture in ``mode`` (noise: compressors cannot shrink it to nothing)."""
    rng = np.random.default_rng(seed)
    if mode == "F":
        return Image.fromarray(rng.uniform(0, 100, (H, W)).astype(np.float32), "F")
    if mode == "I;16":
        return Image.fromarray(rng.integers(0, 65535, (H, W), dtype=np.uint16))  # I;16
    rgb = Image.fromarray(rng.integers(0, 255, (H, W, 3), dtype=np.uint8), "RGB")
    if mode == "P":
        return rgb.quantize(64)
    return rgb.convert(mode)


def frames(mode: str, n: int = 4) -> list[Any]:
    return [picture(mode, seed) for seed in range(n)]


def save_animation(fmt: str, mode: str, **kw: Any) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        first, *rest = frames(mode)
        first.save(path, format=fmt, save_all=True, append_images=rest, **kw)

    return write


def save(fmt: str, mode: str, **kw: Any) -> Callable[[Path], None]:
    return lambda path: picture(mode).save(path, format=fmt, **kw)


CELLS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "png_rgb": (".png", save("PNG", "RGB")),
    "png_rgba": (".png", save("PNG", "RGBA")),
    "png_16bit": (".png", save("PNG", "I;16")),
    "png_palette": (".png", save("PNG", "P")),
    "apng": (".png", save_animation("PNG", "RGB", duration=50)),
    "jpeg": (".jpg", save("JPEG", "RGB", quality=90)),
    "jpeg_progressive": (".jpg", save("JPEG", "RGB", progressive=True)),
    "jpeg_cmyk": (".jpg", save("JPEG", "CMYK")),
    "jpeg_gray": (".jpeg", save("JPEG", "L")),
    "gif": (".gif", save("GIF", "P")),
    "gif_animated": (".gif", save_animation("GIF", "P", duration=40, loop=0)),
    "tiff_raw": (".tif", save("TIFF", "RGB")),
    "tiff_lzw": (".tiff", save("TIFF", "RGB", compression="tiff_lzw")),
    "tiff_deflate_float": (".tif", save("TIFF", "F", compression="tiff_adobe_deflate")),
    "tiff_multipage": (".tif", save_animation("TIFF", "RGB")),
    "webp_lossy": (".webp", save("WEBP", "RGB", quality=80)),
    "webp_lossless": (".webp", save("WEBP", "RGBA", lossless=True)),
    "webp_animated": (".webp", save_animation("WEBP", "RGB", duration=50)),
    "bmp": (".bmp", save("BMP", "RGB")),
    "bmp_1bit": (".bmp", save("BMP", "1")),
    "ico": (".ico", save("ICO", "RGBA", sizes=[(32, 32), (16, 16)])),
    "ppm": (".ppm", save("PPM", "RGB")),
    "pgm": (".pgm", save("PPM", "L")),
    "pbm": (".pbm", save("PPM", "1")),
    "pfm": (".pfm", save("PPM", "F")),  # PPM's float flavour
    "tga": (".tga", save("TGA", "RGB")),
    "tga_rle": (".tga", save("TGA", "RGBA", compression="tga_rle")),
    "pcx": (".pcx", save("PCX", "RGB")),
    "sgi": (".sgi", save("SGI", "RGB")),
    "qoi": (".qoi", save("QOI", "RGBA")),
    "dds": (".dds", save("DDS", "RGBA")),
}
if features.check("jpg_2000"):
    CELLS["jpeg2000"] = (".jp2", save("JPEG2000", "RGB"))
if features.check("avif"):
    CELLS["avif"] = (".avif", save("AVIF", "RGB", quality=80))
FLOAT_CELLS = ("tiff_deflate_float", "pfm")


def pillow_reads(path: Path) -> bool:
    """The oracle: Pillow opens it, verifies a PNG's chunks, and decodes every frame."""
    data = path.read_bytes()
    try:
        with warnings.catch_warnings():  # Pillow warns of what it tolerates
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as im:
                if im.format == "PNG":
                    im.verify()
            with Image.open(io.BytesIO(data)) as im:
                for i in range(getattr(im, "n_frames", 1)):
                    im.seek(i)
                    im.load()
    except Exception:  # noqa: BLE001 - whatever Pillow raises: it cannot read the image
        return False
    return True


def agrees(path: Path) -> dict:
    entry = only_entry(path)
    assert (entry["status"] == "corrupt") == (not pillow_reads(path)), entry
    return entry


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_pillow_clean_and_damaged(cell: str, tmp_path: Path) -> None:
    ext, write = CELLS[cell]
    clean = tmp_path / f"{cell}{ext}"
    write(clean)
    assert pillow_reads(clean)
    entry = only_entry(clean)
    assert entry["status"] == "ok" and entry["format"] == "image", entry
    size = clean.stat().st_size
    cut = truncate(copy_of(clean, tmp_path / "cut" / clean.name), size // 2)
    agrees(cut)
    for name, at in (("head", 3), ("mid", size // 2), ("tail", -9)):
        agrees(flip(copy_of(clean, tmp_path / name / clean.name), at))


def test_a_truncated_image_is_corrupt_where_pillow_fails(tmp_path: Path) -> None:
    """The cells above agree with Pillow either way; here the half files Pillow cannot decode
    are many (a matrix that never produced a corrupt verdict would prove nothing)."""
    failing = []
    for cell, (ext, write) in sorted(CELLS.items()):
        path = tmp_path / f"{cell}{ext}"
        write(path)
        truncate(path, path.stat().st_size // 2)
        if not pillow_reads(path):
            failing.append(path)
    assert len(failing) >= len(CELLS) // 2, failing
    report = scan(tmp_path)
    status = {Path(e["path"]).name: e["status"] for e in report.data["files"]}
    assert {p.name: status[p.name] for p in failing} == {p.name: "corrupt" for p in failing}


@pytest.mark.parametrize("cell", FLOAT_CELLS)
def test_nan_and_inf_pixels_of_float_images(cell: str, tmp_path: Path) -> None:
    ext = CELLS[cell][0]
    px = np.ones((H, W), np.float32)
    px[5, 7] = np.nan
    px[9, 1] = np.inf
    path = tmp_path / f"{cell}{ext}"
    Image.fromarray(px, "F").save(path, format="PPM" if cell == "pfm" else "TIFF")
    assert sites(scan(path)) == {
        (path.name, None, "image", "nan"),
        (path.name, None, "image", "inf"),
    }
    f = scan(path).findings
    (nan,) = f[f["check"] == "nan"]["value"]
    with Image.open(path) as im:  # where Pillow's own pixels hold it
        y = next(r for r in range(H) if np.isnan(np.asarray(im)[r]).any())
    assert nan.startswith("1 NaN pixels (first at ") and nan.endswith(f"y={y})")


def test_a_raw_bitmap_declaring_more_pixels_than_it_holds_is_corrupt_not_refused(
    tmp_path: Path,
) -> None:
    """Pillow's BMP writer, then the header's height raised to 3,158,064 rows (151 M pixels:
    above max_pixels, below Pillow's error limit): Pillow opens it and fails to decode it, so
    it is corrupt, known from the header and the file's size without allocating the image."""
    path = tmp_path / "tall.bmp"
    Image.new("1", (48, 8)).save(path)
    data = bytearray(path.read_bytes())
    data[22:26] = (3_158_064).to_bytes(4, "little", signed=True)  # BITMAPINFOHEADER height
    path.write_bytes(bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Image.open(path) as im:
            assert im.size[0] * im.size[1] > 89_478_485
    assert not pillow_reads(path)
    entry = agrees(path)
    assert "truncated" in entry["error"], entry
