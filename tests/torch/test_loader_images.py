"""End to end: an ImageFolder-style dataset with 3 truncated images trains through GuardedLoader."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import datacheck
from datacheck.torch import GuardedLoader, read_quarantine
from tests.torch.test_loader import calls_in

Image = pytest.importorskip("PIL.Image")

TRUNCATED = ("cat/003.jpg", "dog/001.png", "dog/008.jpg")


def encode(seed: int, fmt: str) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (24, 24, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buf, fmt)
    return buf.getvalue()


def write_image_folder(root: Path) -> Path:
    """root/{cat,dog}/NNN.{jpg,png}: 10 per class; TRUNCATED are cut in half."""
    for c, cls in enumerate(("cat", "dog")):
        (root / cls).mkdir(parents=True)
        for i in range(10):
            ext, fmt = ("png", "PNG") if i % 3 == 1 else ("jpg", "JPEG")
            name = f"{cls}/{i:03d}.{ext}"
            data = encode(10 * c + i, fmt)
            (root / name).write_bytes(data[: len(data) // 2] if name in TRUNCATED else data)
    return root


class ImageFolderLike(Dataset):
    """torchvision's ImageFolder in miniature: ``samples`` lists (path, class); full decode."""

    def __init__(self, root: Path, calls: Path | None = None) -> None:
        classes = sorted(p.name for p in root.iterdir())
        self.samples = [
            (str(p), c) for c, cls in enumerate(classes) for p in sorted((root / cls).iterdir())
        ]
        self.calls = calls

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[i]
        if self.calls is not None:
            with open(self.calls / f"{os.getpid()}.txt", "a") as f:
                f.write(f"{i}\n")
        with Image.open(path) as img:
            pixels = np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0
        return torch.from_numpy(pixels).permute(2, 0, 1), label


def train(loader: GuardedLoader, epochs: int = 2) -> int:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 24 * 24, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 0
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            assert torch.isfinite(loss)
            steps += 1
    return steps


@pytest.mark.slow
def test_truncated_images_are_quarantined_and_never_opened_again(tmp_path):
    root = write_image_folder(tmp_path / "train")
    ds = ImageFolderLike(root)
    bad = {
        i
        for i, (p, _) in enumerate(ds.samples)
        if Path(p).relative_to(root).as_posix() in TRUNCATED
    }
    assert len(bad) == 3
    dl = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2)
    loader = GuardedLoader(dl, quarantine=tmp_path / "q")
    assert train(loader) == 2 * 5  # 20 samples, 4 per batch: every step ran, none skipped
    q = read_quarantine(tmp_path / "q")
    assert set(q["index"]) == bad and len(q) == 3 and set(q["check"]) == {"load_error"}
    assert all(v.startswith("OSError: ") and "runcated" in v for v in q["value"])  # Pillow's words
    assert set(q["key"]) == {ds.samples[i][0] for i in bad}  # the file, as ImageFolder lists it
    assert loader.stats.load_errors == 3 and loader.stats.yielded == 17 + 17  # epoch 2: skipped

    calls = tmp_path / "calls"
    calls.mkdir()
    dl = DataLoader(ImageFolderLike(root, calls), batch_size=4, shuffle=True, num_workers=2)
    again = GuardedLoader(dl, quarantine=tmp_path / "q")
    train(again, epochs=1)
    opened = calls_in(calls)
    assert set(opened) == set(range(20)) - bad and set(opened.values()) == {1}
    assert again.stats.bad == 0 and again.stats.yielded == 17


def test_a_scan_report_keeps_the_corrupt_images_from_ever_being_opened(tmp_path):
    root = write_image_folder(tmp_path / "train")
    report = datacheck.scan(str(root), executor="inprocess", workers=1)
    corrupt = {
        Path(f["path"]).relative_to(root).as_posix()
        for f in report.data["files"]
        if f["status"] == "corrupt"
    }
    assert corrupt == set(TRUNCATED)
    calls = tmp_path / "calls"
    calls.mkdir()
    loader = GuardedLoader(DataLoader(ImageFolderLike(root, calls), batch_size=4), exclude=report)
    assert train(loader, epochs=1) == 5  # 17 samples re-batched by 4
    assert len(calls_in(calls)) == 17 and loader.stats.load_errors == 0
