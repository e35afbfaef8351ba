"""Image decode benchmark: ``datacheck scan`` on a folder of JPEGs against a plain decode loop.

Writes ``--images`` (default 2,000) real-sized JPEGs (500x375, ImageNet's typical size, quality
90, smooth content with noise: ~60 KB each) in ImageFolder layout (10 class folders), two of
them truncated, then, in ONE run, times each variant in a fresh subprocess (the shared harness,
``_harness.py``), interleaved, fastest of ``--rounds``:

1. floor: a ``multiprocessing.Pool`` of ``--workers`` processes, each reading a file and
   ``Image.open(...).load()`` (the decode a DataLoader worker does), ``imap_unordered`` with
   chunks of 32 files;
2. scan:  ``datacheck.scan(folder, executor="processes", workers=--workers)``: every image
   decoded in crash-isolated workers (small units sent in jobs of up to 64), report and
   manifest written; both truncated files must be ``corrupt``.

Both variants include starting their worker processes.  Results: ``results/images.json``.

    python benchmarks/bench_images.py                 # 2,000 images, 2 workers
    python benchmarks/bench_images.py --images 200    # smoke run
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import tempfile
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from _harness import Table, child_main, interleaved, write_results

SIZE = (500, 375)


def _image(rng: np.random.Generator) -> bytes:
    from PIL import Image

    w, h = SIZE
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack(
        [np.sin(xx / rng.uniform(20, 80) + c) * np.cos(yy / rng.uniform(20, 80)) for c in range(3)],
        axis=-1,
    )
    pixels = np.clip(128 + 90 * base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def write_folder(root: Path, n: int) -> list[Path]:
    rng = np.random.default_rng(0)
    variants = [_image(rng) for _ in range(16)]  # decode cost is per pixel, not per content
    paths = []
    for i in range(n):
        cls = root / f"class{i % 10:02d}"
        cls.mkdir(parents=True, exist_ok=True)
        data = variants[i % len(variants)]
        if i in (7, n // 2):
            data = data[: len(data) // 2]
        path = cls / f"{i:06d}.jpg"
        path.write_bytes(data)
        paths.append(path)
    return paths


def _decode(path: str) -> bool:
    from PIL import Image

    try:
        with open(path, "rb") as fh, Image.open(io.BytesIO(fh.read())) as im:
            im.load()
    except OSError:
        return False
    return True


def floor(args: list[str]) -> dict:
    root, workers = args[0], int(args[1])
    files = sorted(str(p) for p in Path(root).rglob("*.jpg"))
    with get_context("spawn").Pool(workers) as pool:
        ok = sum(pool.imap_unordered(_decode, files, chunksize=32))
    return {"images": len(files), "bad": len(files) - ok}


def scan(args: list[str]) -> dict:
    import datacheck

    root, workers = args[0], int(args[1])
    out = tempfile.mkdtemp()
    try:
        report = datacheck.scan(root, out=out, executor="processes", workers=workers)
        status = report.data["summary"]["status"]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"images": sum(status.values()), "bad": status["corrupt"]}


VARIANTS = {"floor": floor, "scan": scan}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-images-"))
    try:
        paths = write_folder(tmp / "imgs", opts.images)
        mb = sum(p.stat().st_size for p in paths) / 2**20
        load = list(os.getloadavg())
        best = interleaved(
            __file__, list(VARIANTS), [str(tmp / "imgs"), str(opts.workers)], rounds=opts.rounds
        )
        for v in best.values():
            assert v["bad"] == 2, v
        fl, sc = best["floor"]["seconds"], best["scan"]["seconds"]
        table = Table(
            ["variant", "seconds", "images/s", "vs floor", "peak RSS MB"],
            [
                [name, r["seconds"], r["images"] / r["seconds"], fl / r["seconds"], r["rss_mb"]]
                for name, r in (
                    ("plain Pillow decode loop (floor)", best["floor"]),
                    ("datacheck scan (isolated workers, the default)", best["scan"]),
                )
            ],
            title=f"{opts.images} JPEGs {SIZE[0]}x{SIZE[1]} ({mb:.0f} MB), {opts.workers} workers",
        )
        params = {"images": opts.images, "size": SIZE, "mb": round(mb, 1), "workers": opts.workers}
        params["throughput_ratio"] = round(fl / sc, 3)
        write_results("images", best, table=table, params=params, load_before=load)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if not child_main(VARIANTS):
        main()
