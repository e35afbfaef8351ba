"""``torch.save`` (its zip format and the legacy pickle format) and
``torch.load(weights_only=True)`` as the oracle: a tensor, dicts of tensors (nested), a list of
samples, half and bfloat16."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ._kit import copy_of, flip, only_entry, scan, sites, truncate

torch = pytest.importorskip("torch")

OBJECTS: dict[str, Callable[[], Any]] = {
    "tensor": lambda: torch.arange(40, dtype=torch.float32).reshape(20, 2),
    "dict": lambda: {"x": torch.zeros(20, 3), "y": torch.arange(20)},
    "nested": lambda: {"model": {"w": torch.ones(20, 4, dtype=torch.float16)}, "step": 7},
    "bf16": lambda: {"emb": torch.zeros(20, 8, dtype=torch.bfloat16)},
    "samples": lambda: [{"x": torch.zeros(3), "label": torch.tensor(i)} for i in range(20)],
}
PLANTED = {  # where a NaN goes: (key, the object's value to set)
    "tensor": "tensor",
    "dict": "x",
    "nested": "model.w",
    "bf16": "emb",
    "samples": "x",
}


def plant(obj: Any, kind: str, row: int, value: float) -> Any:
    if kind == "tensor":
        obj[row, 1] = value
    elif kind == "dict":
        obj["x"][row, 0] = value
    elif kind == "nested":
        obj["model"]["w"][row, 2] = value
    elif kind == "bf16":
        obj["emb"][row, 5] = value
    else:
        obj[row]["x"][1] = value
    return obj


def save(obj: Any, path: Path, legacy: bool) -> Path:
    torch.save(obj, path, _use_new_zipfile_serialization=not legacy)
    return path


def torch_reads(path: Path) -> bool:
    """The oracle: torch loads it without unpickling code, every tensor's bytes readable."""
    try:
        with warnings.catch_warnings():  # torch warns of what it tolerates (a pickle protocol)
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=True)
        stack = [obj]
        while stack:
            item = stack.pop()
            if isinstance(item, torch.Tensor):
                item.clone()
            elif isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, (list, tuple)):
                stack.extend(item)
    except Exception:  # noqa: BLE001 - whatever torch raises: it cannot load the file
        return False
    return True


def agrees(path: Path) -> dict:
    entry = only_entry(path)
    assert (entry["status"] == "corrupt") == (not torch_reads(path)), (entry, torch_reads(path))
    return entry


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
@pytest.mark.parametrize("kind", sorted(OBJECTS))
def test_torch_save_clean_planted_and_damaged(kind: str, legacy: bool, tmp_path: Path) -> None:
    clean = save(OBJECTS[kind](), tmp_path / f"{kind}.pt", legacy)
    entry = only_entry(clean)
    assert entry["status"] == "ok" and entry["rows"] == 20, entry
    for value, check in ((float("nan"), "nan"), (float("-inf"), "inf")):
        path = save(plant(OBJECTS[kind](), kind, 13, value), tmp_path / f"{check}.pt", legacy)
        assert sites(scan(path)) == {(path.name, 13, PLANTED[kind], check)}
    size = clean.stat().st_size
    cut = truncate(copy_of(clean, tmp_path / "cut" / clean.name), size // 2)
    assert not torch_reads(cut)
    agrees(cut)
    agrees(flip(copy_of(clean, tmp_path / "head" / clean.name), 1))  # the magic / zip header
    agrees(flip(copy_of(clean, tmp_path / "mid" / clean.name), size // 2))
    agrees(flip(copy_of(clean, tmp_path / "end" / clean.name), -30))


def test_a_pickle_beyond_tensors_is_corrupt_and_never_run(tmp_path: Path) -> None:
    """What weights_only refuses (an arbitrary object): torch's own safe loader says no."""
    path = tmp_path / "obj.pt"
    torch.save({"x": torch.zeros(2), "when": __import__("datetime").date(2026, 1, 1)}, path)
    assert not torch_reads(path)
    assert "unpickling" in agrees(path)["error"]
