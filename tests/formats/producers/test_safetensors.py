"""``safetensors`` files written by its torch and numpy savers (with ``__metadata__``), read back
by ``safetensors.safe_open`` as the oracle: float32/16, bfloat16, int64, bool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ._kit import copy_of, flip, only_entry, scan, sites, truncate

st_numpy = pytest.importorskip("safetensors.numpy")
torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")


def numpy_tensors() -> dict[str, np.ndarray]:
    return {
        "w": np.zeros((16, 4), np.float32),
        "h": np.ones((16,), np.float16),
        "ids": np.arange(16, dtype=np.int64),
        "mask": np.ones((16, 2), bool),
    }


def torch_tensors() -> dict[str, Any]:
    return {
        "w": torch.zeros(16, 4),
        "b": torch.zeros(16, 8, dtype=torch.bfloat16),
        "ids": torch.arange(16),
    }


def write(saver: str, tensors: dict[str, Any], path: Path) -> Path:
    meta = {"format": "pt" if saver == "torch" else "np", "producer": "test"}
    (st_torch if saver == "torch" else st_numpy).save_file(tensors, str(path), metadata=meta)
    return path


def st_reads(path: Path) -> bool:
    """The oracle: safetensors opens the file and returns every tensor."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                f.get_tensor(key)
    except Exception:  # noqa: BLE001
        try:  # bfloat16 has no numpy type: torch's side reads it
            with safe_open(str(path), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118
                    f.get_tensor(key)
        except Exception:  # noqa: BLE001
            return False
    return True


def agrees(path: Path) -> dict:
    entry = only_entry(path)
    assert (entry["status"] == "corrupt") == (not st_reads(path)), entry
    return entry


@pytest.mark.parametrize("saver", ["numpy", "torch"])
def test_safetensors_clean_planted_and_damaged(saver: str, tmp_path: Path) -> None:
    make = torch_tensors if saver == "torch" else numpy_tensors
    clean = write(saver, make(), tmp_path / "clean.safetensors")
    entry = only_entry(clean)
    assert entry["status"] == "ok" and entry["rows"] == 16, entry
    assert entry["columns"]["w"] == "float32"
    planted = make()
    planted["w"][5, 1] = float("nan")
    planted["w"][9, 0] = float("inf")
    if saver == "torch":
        planted["b"][3, 7] = float("nan")  # bfloat16, widened for the check
    path = write(saver, planted, tmp_path / "planted.safetensors")
    expected = {("planted.safetensors", 5, "w", "nan"), ("planted.safetensors", 9, "w", "inf")}
    if saver == "torch":
        expected.add(("planted.safetensors", 3, "b", "nan"))
    assert sites(scan(path)) == expected
    size = clean.stat().st_size
    cut = truncate(copy_of(clean, tmp_path / "cut" / clean.name), size - 5)
    assert not st_reads(cut) and agrees(cut)["status"] == "corrupt"
    agrees(flip(copy_of(clean, tmp_path / "len" / clean.name), 1))  # the header's length
    agrees(flip(copy_of(clean, tmp_path / "json" / clean.name), 12))  # inside the header
    agrees(flip(copy_of(clean, tmp_path / "data" / clean.name), -3))  # a value changes
