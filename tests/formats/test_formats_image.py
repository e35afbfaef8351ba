"""Images in folders and tar shards: every image fully decoded, faults at the right file/row."""

from __future__ import annotations

import io
import struct
import tarfile
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import datacheck
from datacheck.formats._image import DecodeError


def image_bytes(fmt: str = "JPEG", size: tuple[int, int] = (48, 32), mode: str = "RGB") -> bytes:
    rng = np.random.default_rng(sum(size))
    channels = {"RGB": 3, "L": 1}[mode]
    pixels = rng.integers(0, 255, (size[1], size[0], channels), dtype=np.uint8)
    img = Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode)
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    """A tiny PNG whose header claims width x height RGB pixels (30 GB decoded)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 1024)
    body = png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


def bad_crc_png() -> bytes:
    data = bytearray(image_bytes("PNG"))
    at = data.index(b"IDAT")
    length = struct.unpack(">I", data[at - 4 : at])[0]
    data[at + 4 + length] ^= 0x01  # the IDAT chunk's CRC: pixels still decode
    return bytes(data)


def faults() -> dict[str, bytes]:
    jpeg, png = image_bytes("JPEG"), image_bytes("PNG")
    return {
        "truncated.jpg": jpeg[: len(jpeg) // 2],
        "truncated.png": png[: len(png) // 2],
        "bad_crc.png": bad_crc_png(),
        "empty.jpg": b"",
        "bomb.png": bomb_png(),
    }


def image_folder(root: Path) -> Path:
    """ImageFolder layout: two class folders of good images plus one of every fault."""
    for cls, fmt, ext in (("cat", "JPEG", "jpg"), ("dog", "PNG", "png")):
        (root / cls).mkdir(parents=True)
        for i in range(3):
            (root / cls / f"{i}.{ext}").write_bytes(image_bytes(fmt, (40 + i, 30)))
    (root / "bad").mkdir()
    for name, data in faults().items():
        (root / "bad" / name).write_bytes(data)
    return root


def scan(path: Path, **kw: object) -> datacheck.Report:
    return datacheck.scan(str(path), executor="inprocess", workers=1, **kw)


def by_name(report: datacheck.Report) -> dict[str, dict]:
    return {Path(f["path"]).name: f for f in report.data["files"]}


def test_image_folder_every_fault_found(tmp_path: Path) -> None:
    report = scan(image_folder(tmp_path / "imgs"))
    files = by_name(report)
    assert len(files) == 11
    for name in ("0.jpg", "1.jpg", "2.jpg", "0.png", "1.png", "2.png"):
        assert files[name]["status"] == "ok", files[name]
        assert files[name]["rows"] == 1
    for name in ("truncated.jpg", "truncated.png", "bad_crc.png", "empty.jpg"):
        assert files[name]["status"] == "corrupt", name
    assert "truncated" in files["truncated.jpg"]["error"]
    assert "checksum" in files["bad_crc.png"]["error"]
    assert "empty" in files["empty.jpg"]["error"]
    assert "Traceback" not in "".join(f["error"] or "" for f in files.values())
    bomb = files["bomb.png"]
    assert bomb["status"] == "flagged" and bomb["counts"] == {"schema": 1}
    found = report.findings
    msg = found[found["path"].str.endswith("bomb.png")]["value"].iloc[0]
    assert "max_pixels" in msg and "not decoded" in msg


def test_one_corrupt_finding_per_bad_image(tmp_path: Path) -> None:
    report = scan(image_folder(tmp_path / "imgs"))
    corrupt = report.findings[report.findings["check"] == "corrupt"]
    assert sorted(Path(p).name for p in corrupt["path"]) == sorted(
        ["truncated.jpg", "truncated.png", "bad_crc.png", "empty.jpg"]
    )
    assert corrupt["row"].isna().all()


def test_images_schema_rules(tmp_path: Path) -> None:
    d = tmp_path / "imgs"
    d.mkdir()
    (d / "gray.png").write_bytes(image_bytes("PNG", (40, 30), "L"))
    (d / "small.jpg").write_bytes(image_bytes("JPEG", (8, 8)))
    (d / "big.jpg").write_bytes(image_bytes("JPEG", (300, 20)))
    (d / "ok.jpg").write_bytes(image_bytes("JPEG", (40, 30)))
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (7, 7, 7)).save(buf, "PNG")
    (d / "blank.png").write_bytes(buf.getvalue())
    (d / "huge.png").write_bytes(bomb_png(200, 200))
    schema = tmp_path / "s.yaml"
    schema.write_text(
        "images:\n  mode: RGB\n  min_size: [16, 16]\n  max_size: [256, 256]\n"
        "  max_pixels: 30000\n  constant: true\n"
    )
    report = scan(d, schema=str(schema))
    f = report.findings.set_index(report.findings["path"].map(lambda p: Path(p).name))
    assert set(f.index) == {"gray.png", "small.jpg", "big.jpg", "blank.png", "huge.png"}
    assert "mode L" in f.loc["gray.png", "value"]
    assert "min_size" in f.loc["small.jpg", "value"]
    assert "max_size" in f.loc["big.jpg", "value"]
    assert f.loc["blank.png", "check"] == "constant"
    assert f.loc["blank.png", "severity"] == "warning"
    assert "max_pixels 30000" in f.loc["huge.png", "value"]


@pytest.mark.parametrize(
    "section, message",
    [
        ("images:\n  mode: RBG\n", "did you mean 'RGB'"),
        ("images:\n  min_size: 5\n", "[width, height]"),
        ("images:\n  max_pixel: 5\n", "did you mean 'max_pixels'"),
    ],
)
def test_images_schema_mistakes(section: str, message: str, tmp_path: Path) -> None:
    schema = tmp_path / "s.yaml"
    schema.write_text(section)
    with pytest.raises(datacheck.SchemaError, match=message.replace("[", r"\[")):
        datacheck.load_schema(str(schema))


def write_tar(path: Path, members: list[tuple[str, bytes]], mode: str = "w") -> Path:
    with tarfile.open(path, mode) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("mode", ["w", "w:gz"])
def test_tar_image_members_decoded(mode: str, tmp_path: Path) -> None:
    bad = faults()
    members = []
    for i in range(6):
        members.append((f"s{i:03d}.cls", str(i).encode()))
        members.append((f"s{i:03d}.jpg", image_bytes("JPEG")))
    members[3] = ("s001.jpg", bad["truncated.jpg"])
    members[9] = ("s004.jpg", bad["empty.jpg"])
    members.append(("s006.png", bad["bad_crc.png"]))
    report = scan(write_tar(tmp_path / "shard.tar", members, mode))
    entry = report.data["files"][0]
    assert entry["status"] == "flagged" and entry["rows"] == 7
    assert entry["columns"]["jpg"] == "image"
    f = report.findings
    assert {(int(r.row), r.column, r.check) for r in f.itertuples()} == {
        (1, "jpg", "corrupt"),
        (4, "jpg", "corrupt"),
        (6, "png", "corrupt"),
    }
    assert "truncated" in f[f["row"] == 1]["value"].iloc[0]


def test_image_scan_in_worker_processes(tmp_path: Path) -> None:
    report = datacheck.scan(str(image_folder(tmp_path / "imgs")), executor="processes", workers=2)
    assert report.data["summary"]["status"] == {"ok": 6, "flagged": 1, "corrupt": 4}


def test_report_summarises_image_folders(tmp_path: Path) -> None:
    report = scan(image_folder(tmp_path / "imgs"))
    media = {Path(d["folder"]).name: d for d in report.data["summary"]["media"]}
    assert set(media) == {"cat", "dog", "bad"}
    assert media["cat"]["files"] == media["cat"]["ok"] == 3
    assert (media["bad"]["corrupt"], media["bad"]["flagged"]) == (4, 1)
    assert all(d["format"] == "image" and d["decode_seconds"] > 0 for d in media.values())
    assert media["cat"]["per_second"] > 0
    from datacheck.report._text import render_text

    text = render_text(report)
    assert "media folder" in text and "cat" in text


def test_cli_on_an_image_folder(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = image_folder(tmp_path / "imgs")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "datacheck", "scan", str(root), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "media folder" in proc.stdout and "image file is truncated" in proc.stdout
    report = datacheck.load_report(out)
    assert report.data["summary"]["status"] == {"ok": 6, "flagged": 1, "corrupt": 4}


def test_image_scan_resumes(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "imgs")
    first = scan(root, out=str(tmp_path / "out"))
    again = scan(root, out=str(tmp_path / "out"), resume=True)
    assert again.data["summary"]["status"] == first.data["summary"]["status"]
    assert len(again.findings) == len(first.findings)


def test_parquet_scan_never_imports_pillow_or_soundfile(tmp_path: Path) -> None:
    import subprocess
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1.0, float("nan")]}), tmp_path / "t.parquet")
    code = (
        "import sys, datacheck\n"
        f"datacheck.scan({str(tmp_path / 't.parquet')!r}, executor='inprocess', isolate=False)\n"
        "media = ('PIL', 'soundfile', 'google_crc32c', 'zstandard', 'brotli', 'cramjam',"
        " 'xxhash')\n"
        "print(sorted(m for m in media if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def warning_png() -> bytes:
    """A PNG Pillow decodes with a warning: an APNG control chunk that claims 0 frames."""
    data = image_bytes("PNG")
    at = data.index(b"IDAT") - 4
    return data[:at] + png_chunk(b"acTL", struct.pack(">II", 0, 0)) + data[at:]


def test_decoder_warnings_silenced_only_while_decoding(tmp_path: Path) -> None:
    from datacheck.formats._image import check_image
    from datacheck.schema._media import ImageRules

    with pytest.warns(UserWarning, match="Invalid APNG"):  # Pillow does warn about it
        Image.open(io.BytesIO(warning_png())).load()
    before = warnings.filters[:]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as the test suite runs: a warning would be an error
        assert check_image(warning_png(), ImageRules()) == []
        with pytest.raises(DecodeError, match="checksum"):
            check_image(bad_crc_png(), ImageRules())
        with pytest.raises(UserWarning):  # the filters are back once it returns
            warnings.warn("after", UserWarning, stacklevel=1)
    assert warnings.filters == before
    (tmp_path / "w.png").write_bytes(warning_png())
    assert by_name(scan(tmp_path / "w.png"))["w.png"]["status"] == "ok"


def test_pillow_pixel_limit_off_only_while_ours_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pillow's global MAX_IMAGE_PIXELS (a user's setting) is off while max_pixels rules, and
    back after every image, decodable or not."""
    from datacheck.formats._image import check_image
    from datacheck.schema._media import ImageRules

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # Pillow alone refuses 48x32 now
    with pytest.raises(Image.DecompressionBombError):
        Image.open(io.BytesIO(image_bytes("PNG"))).load()
    assert check_image(image_bytes("PNG"), ImageRules()) == []
    assert Image.MAX_IMAGE_PIXELS == 100
    with pytest.raises(DecodeError):
        check_image(image_bytes("JPEG")[:200], ImageRules())
    assert Image.MAX_IMAGE_PIXELS == 100
    problems = check_image(image_bytes("PNG"), ImageRules(max_pixels=1000))
    assert [p.check for p in problems] == ["schema"] and "max_pixels" in problems[0].message
    assert Image.MAX_IMAGE_PIXELS == 100


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 70_000])
def test_read_bytes_whole_file_or_refused_above_limit(size: int, tmp_path: Path) -> None:
    from datacheck.formats._image import read_bytes

    data = np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8).tobytes()
    path = tmp_path / "f.jpg"
    path.write_bytes(data)
    assert read_bytes(str(path)) == data
    assert read_bytes(str(path), limit=size) == data
    if size:
        with pytest.raises(DecodeError, match="limit"):
            read_bytes(str(path), limit=size - 1)
    with pytest.raises(FileNotFoundError):
        read_bytes(str(tmp_path / "missing.jpg"))


def _outcome(fn: Callable[[], object]) -> tuple[str, str] | None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return type(exc).__name__, str(exc)
    return None


def _damaged(data: bytes, rng: np.random.Generator) -> bytes:
    out = bytearray(data)
    kind = rng.integers(4)
    if kind == 0:  # a flipped byte anywhere
        out[rng.integers(len(out))] ^= 1 << int(rng.integers(8))
    elif kind == 1:  # cut short anywhere
        del out[rng.integers(len(out)) :]
    elif kind == 2:  # a chunk length that says more (or less) than the chunk holds
        at = out.index(b"IDAT") - 4
        out[at : at + 4] = struct.pack(">I", int(rng.integers(0, 2 * len(out))))
    else:  # bytes after IEND, which no check reads
        out += rng.integers(0, 255, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
    return bytes(out)


def test_png_crc_check_says_what_pillow_verify_says() -> None:
    """Every damaged copy Pillow still opens gets the outcome of Pillow's own verify()."""
    from datacheck.formats._image import _png_crcs

    frames = [Image.open(io.BytesIO(image_bytes("PNG", (24, 16 + i)))) for i in range(3)]
    buf = io.BytesIO()
    frames[0].save(buf, "PNG", save_all=True, append_images=frames[1:])  # an APNG
    bases = [image_bytes("PNG"), image_bytes("PNG", mode="L"), buf.getvalue(), warning_png()]
    rng = np.random.default_rng(11)
    compared = {"ok": 0, "bad": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow warns about some of the damage
        for base in bases:
            for _ in range(200):
                data = _damaged(base, rng)
                try:
                    im = Image.open(io.BytesIO(data))
                except Exception:  # noqa: BLE001, S112 - not a PNG any more: not compared
                    continue
                expected = _outcome(im.verify)
                assert _outcome(lambda data=data: _png_crcs(data)) == expected, data
                compared["ok" if expected is None else "bad"] += 1
    assert compared["ok"] > 100 and compared["bad"] > 200, compared
