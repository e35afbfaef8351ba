"""A map-style quarantine survives the dataset changing: mapped by file and row, key or content,
or refused with what changed; never a different sample skipped."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from datacheck.errors import UsageError
from datacheck.torch import GuardedLoader, read_quarantine
from tests.torch.test_loader import calls_in
from tests.torch.test_loader_images import TRUNCATED, ImageFolderLike, write_image_folder

Image = pytest.importorskip("PIL.Image")


def labels_of(loader: GuardedLoader, name: str = "y") -> list:
    return [
        v
        for batch in loader
        for v in (batch[name] if isinstance(batch, dict) else batch[1]).tolist()
    ]


def test_a_grown_image_folder_skips_the_same_files_by_path_not_by_index(tmp_path):
    root = write_image_folder(tmp_path / "data")
    q = tmp_path / "q"
    first = GuardedLoader(DataLoader(ImageFolderLike(root), batch_size=4), quarantine=q)
    for _ in first:
        pass
    rec = read_quarantine(q)
    assert sorted(rec["source"].str.replace(str(root) + "/", "")) == sorted(TRUNCATED)
    assert rec["dataset"].str.startswith("n=20 files=").all() and (rec["sample"] == "0").all()
    # two new images sort first in "cat": every old index moves by two
    Image.new("RGB", (24, 24)).save(root / "cat" / "000a.jpg")
    Image.new("RGB", (24, 24)).save(root / "cat" / "000b.jpg")
    calls = tmp_path / "calls"
    calls.mkdir()
    grown = ImageFolderLike(root, calls)
    again = GuardedLoader(DataLoader(grown, batch_size=4, num_workers=2), quarantine=q)
    seen = [i for _ in again for i in again.batch_indices]
    bad = {
        i for i, (p, _) in enumerate(grown.samples) if p.replace(str(root) + "/", "") in TRUNCATED
    }
    assert sorted(seen) == sorted(set(range(22)) - bad)  # no clean image skipped
    assert not set(calls_in(calls)) & bad  # the truncated ones never opened again
    assert again.stats.load_errors == 0


class Rows(Dataset):
    """Samples ``ids``: value ``i``; a NaN at 5, 1e5 (above fp16: ``extreme``) at 23, and an
    unreadable 11 when ``unreadable``."""

    def __init__(self, ids: list[int], key: bool = False, unreadable: bool = False) -> None:
        self.ids, self.key, self.unreadable = ids, key, unreadable

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, at: int) -> dict:
        i = self.ids[at]
        if self.unreadable and i == 11:
            raise OSError("truncated")
        x = torch.full((4,), float(i))
        if i == 5:
            x[1] = float("nan")
        if i == 23:
            x[2] = 1e5
        out = {"x": x, "y": i}
        return {**out, "id": f"row-{i}"} if self.key else out


def test_a_reordered_dataset_without_files_matches_by_content_and_skips_no_clean_sample(tmp_path):
    q = tmp_path / "q"
    first = GuardedLoader(
        DataLoader(Rows(list(range(40))), batch_size=8), quarantine=q, drop_on="warning"
    )
    assert sorted(labels_of(first)) == sorted(set(range(40)) - {5, 23})
    rec = read_quarantine(q)
    assert (
        rec["sample"].str.startswith("content:").all()
        and rec["dataset"]
        .str.match(r"n=40 probe=0:[0-9a-f]{16},20:[0-9a-f]{16},39:[0-9a-f]{16}$")
        .all()
    )
    # another order and more rows: index 23 is now another sample. drop_on="error" would keep
    # the extreme one: only its content fingerprint leaves it out
    ids = list(range(45))[::-1]
    again = GuardedLoader(DataLoader(Rows(ids), batch_size=8), quarantine=q)
    assert sorted(labels_of(again)) == sorted(set(range(45)) - {5, 23})
    assert again.stats.excluded == 2 and len(read_quarantine(q)) == 2


def test_a_changed_dataset_matches_by_key_fn(tmp_path):
    q = tmp_path / "q"
    key = lambda row: row["id"]  # noqa: E731
    first = GuardedLoader(
        DataLoader(Rows(list(range(40)), key=True), batch_size=8),
        quarantine=q,
        drop_on="warning",
        key_fn=key,
    )
    labels_of(first)
    assert sorted(read_quarantine(q)["sample"]) == ["row-23", "row-5"]
    again = GuardedLoader(
        DataLoader(Rows(list(range(50))[::-1], key=True), batch_size=8), quarantine=q, key_fn=key
    )
    assert sorted(labels_of(again)) == sorted(set(range(50)) - {5, 23})


def test_a_changed_dataset_whose_records_name_only_an_index_is_refused_with_what_changed(tmp_path):
    q = tmp_path / "q"
    first = GuardedLoader(
        DataLoader(Rows(list(range(40)), unreadable=True), batch_size=8), quarantine=q
    )
    labels_of(first)
    assert read_quarantine(q)["check"].tolist() == ["nan", "load_error"]
    with pytest.raises(UsageError) as err:
        GuardedLoader(DataLoader(Rows(list(range(42))), batch_size=8), quarantine=q)
    text = str(err.value)
    assert "1 record(s) (e.g. index 11)" in text and "(n=40 probe=" in text and "now n=42" in text
    assert "path_of=" in text and "skip_quarantined=False" in text
    # the same dataset again: by index, as written
    same = GuardedLoader(
        DataLoader(Rows(list(range(40)), unreadable=True), batch_size=8), quarantine=q
    )
    assert sorted(labels_of(same)) == sorted(set(range(40)) - {5, 11})
    assert same.stats.load_errors == 0


def test_a_reordered_dataset_of_the_same_length_is_seen_to_have_changed(tmp_path):
    """Same length, other order: index 11 is another sample now. The probe (first, middle and
    last samples) tells, so the load error's index-only record is refused, not trusted."""
    q = tmp_path / "q"
    labels_of(
        GuardedLoader(
            DataLoader(Rows(list(range(40)), unreadable=True), batch_size=8), quarantine=q
        )
    )
    with pytest.raises(UsageError, match="another dataset"):
        GuardedLoader(DataLoader(Rows(list(range(40))[::-1]), batch_size=8), quarantine=q)


def test_records_of_an_older_datacheck_are_used_by_index(tmp_path):
    q = tmp_path / "q"
    q.mkdir()
    old = {
        "index": 7,
        "check": "nan",
        "severity": "error",
        "key": "x",
        "value": "nan",
        "count": 1,
        "rank": 0,
        "epoch": 0,
        "step": 0,
        "time": "2024-05-01T12:00:00+00:00",
    }
    (q / "quarantine-rank00000.jsonl").write_text(json.dumps(old) + "\n")
    loader = GuardedLoader(DataLoader(Rows(list(range(40))), batch_size=8), quarantine=q)
    assert 7 not in labels_of(loader) and loader.stats.excluded == 1


def test_a_shuffled_hf_dataset_skips_the_same_rows_of_its_arrow_file(tmp_path):
    datasets = pytest.importorskip("datasets")
    values = [[float(i)] * 4 for i in range(40)]
    values[5][1] = float("nan")
    datasets.Dataset.from_dict({"x": values, "y": list(range(40))}).save_to_disk(
        str(tmp_path / "hf")
    )
    q = tmp_path / "q"
    ds = datasets.load_from_disk(str(tmp_path / "hf")).with_format("torch")
    labels_of(GuardedLoader(DataLoader(ds, batch_size=8), quarantine=q))
    rec = read_quarantine(q)
    assert rec["source"].str.endswith(".arrow").all() and rec["sample"].tolist() == ["5"]
    assert rec["dataset"].str.contains("hf=").all()
    shuffled = datasets.load_from_disk(str(tmp_path / "hf")).shuffle(seed=1).with_format("torch")
    again = GuardedLoader(DataLoader(shuffled, batch_size=8), quarantine=q)
    assert sorted(labels_of(again)) == sorted(set(range(40)) - {5})
    assert again.stats.bad == 0 and again.stats.excluded == 1


def test_the_probe_repeats_under_random_augmentation_and_leaves_the_rngs_as_they_were():
    from datacheck.torch._map_identity import MapIdentity
    from datacheck.torch._sample_paths import SamplePaths

    class Noisy(Dataset):
        def __len__(self) -> int:
            return 10

        def __getitem__(self, i: int) -> torch.Tensor:
            return torch.rand(4) + i

    def fingerprint() -> str:
        return MapIdentity(Noisy(), SamplePaths(None, None)).fingerprint()

    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    first = fingerprint()
    assert torch.rand(1) == before  # the caller's stream of random numbers is untouched
    assert fingerprint() == first and "probe=none" not in first
