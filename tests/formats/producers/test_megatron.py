"""Megatron indexed datasets (``.bin`` + ``.idx``) as megatron-core 0.16's
``IndexedDatasetBuilder`` writes them, read back by its ``IndexedDataset``: the oracle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ._kit import copy_of, entries, flip, scan, sites, truncate

indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")
torch = pytest.importorskip("torch")
N = 6


def write(folder: Path, dtype: type, nan_at: int | None = None) -> Path:
    """``N`` documents of one sequence each (``i + 3`` tokens); a NaN in sequence ``nan_at``
    of a float dataset.  Returns the path prefix."""
    folder.mkdir(parents=True)
    prefix = folder / "corpus_text_document"
    builder = indexed.IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for i in range(N):
        seq = torch.arange(i + 3, dtype=torch.float64 if dtype is np.float32 else torch.int64)
        if i == nan_at:
            seq[1] = float("nan")
        builder.add_item(seq)
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return prefix


def oracle(prefix: Path) -> list[np.ndarray]:
    """Every sequence as IndexedDataset reads it, copied: its arrays are views of a memory
    map that closes with the dataset."""
    ds = indexed.IndexedDataset(str(prefix))
    return [np.array(ds[i], copy=True) for i in range(len(ds))]


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.int64, np.float32])
def test_clean_dataset_is_ok(dtype: type, tmp_path: Path) -> None:
    prefix = write(tmp_path / "m", dtype)
    report = scan(prefix.parent)
    (entry,) = report.data["files"]
    assert entry["status"] == "ok" and entry["rows"] == N, entry
    assert entry["columns"] == {"tokens": np.dtype(dtype).name}
    assert [len(s) for s in oracle(prefix)] == [i + 3 for i in range(N)]


def test_nan_in_a_float_dataset_found_at_its_sequence(tmp_path: Path) -> None:
    prefix = write(tmp_path / "m", np.float32, nan_at=4)
    assert sites(scan(prefix.parent)) == {("corpus_text_document.idx", 4, "tokens", "nan")}
    assert np.isnan(oracle(prefix)[4][1])


def test_ids_past_the_vocabulary(tmp_path: Path) -> None:
    prefix = write(tmp_path / "m", np.int32)
    schema = tmp_path / "s.yaml"
    schema.write_text("tokens:\n  vocab_size: 6\n")  # sequences 4 and 5 hold ids 6 and 7
    found = sites(scan(prefix.parent, schema=str(schema)))
    assert found == {("corpus_text_document.idx", r, "tokens", "out_of_range") for r in (4, 5)}


@pytest.mark.parametrize("part", ["bin", "idx"])
def test_truncated_is_corrupt(part: str, tmp_path: Path) -> None:
    prefix = write(tmp_path / "m", np.int32)
    truncate(Path(f"{prefix}.{part}"), -4)
    (entry,) = scan(prefix.parent).data["files"]
    assert entry["status"] == "corrupt", entry
    with pytest.raises(Exception):  # noqa: B017 - numpy cannot map what is not there
        oracle(prefix)


def test_flipped_pointer_is_corrupt(tmp_path: Path) -> None:
    """A byte of sequence 2's pointer in the index: the oracle reads other tokens for it (or
    fails); datacheck names the sequence."""
    prefix = write(tmp_path / "m", np.int32)
    clean = oracle(prefix)
    damaged = copy_of(prefix.parent, tmp_path / "d") / prefix.name
    flip(Path(f"{damaged}.idx"), 34 + 4 * N + 8 * 2, 0x04)  # pointers start after the lengths
    entry = entries(scan(damaged.parent))["corpus_text_document.idx"]
    assert entry["status"] == "corrupt" and "sequence 2: pointer" in entry["error"], entry
    try:
        read = oracle(damaged)
    except Exception:  # noqa: BLE001 - failing is agreeing
        return
    assert not np.array_equal(read[2], clean[2])
