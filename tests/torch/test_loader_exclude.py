"""GuardedLoader exclusion: exclude() during a run, exclude= from a scan report or file paths."""

from __future__ import annotations

import os

import pandas as pd
import pytest
from torch.utils.data import DataLoader, Dataset, Subset

from datacheck.errors import UsageError
from datacheck.report import ReportData
from datacheck.torch import GuardedLoader
from tests.torch.test_loader import Planted, calls_in, run_epoch

N = 60


@pytest.mark.parametrize("num_workers", [0, 2])
def test_exclude_during_a_run_skips_at_the_sampler_and_drops_batches_in_flight(
    tmp_path, num_workers
):
    calls = tmp_path / "calls"
    calls.mkdir()
    dl = DataLoader(Planted(calls=calls, bad={}), batch_size=4, num_workers=num_workers)
    loader = GuardedLoader(dl)
    seen = []
    for step, batch in enumerate(loader):
        labels = batch["label"].tolist()
        assert labels == loader.batch_indices and loader.step == step
        seen += labels
        if step == 0:
            loader.exclude([5, 6, 50, 5])  # 5, 6: next batch, already drawn with workers
    assert not {5, 6, 50} & set(seen)
    assert sorted(seen) == sorted(set(range(N)) - {5, 6, 50})
    assert 50 not in calls_in(calls)  # drawn after it was excluded: never loaded
    assert loader.excluded_indices == {5, 6, 50}
    assert loader.stats.excluded == 3 and loader.stats.bad == 0
    before = calls_in(calls)
    assert sorted(run_epoch(loader)) == sorted(set(range(N)) - {5, 6, 50})
    assert (calls_in(calls) - before).keys() == set(range(N)) - {5, 6, 50}


def test_exclude_refuses_what_is_not_an_index():
    loader = GuardedLoader(DataLoader(Planted(bad={}), batch_size=4))
    with pytest.raises(UsageError, match="neither a dataset index"):
        loader.exclude(["x"])


class Files(Dataset):
    """An ImageFolder-shaped dataset: ``samples`` lists (path, class); loads nothing real."""

    def __init__(self, root: str, n: int = 12) -> None:
        self.samples = [(os.path.join(root, f"c{i % 2}", f"{i}.jpg"), i % 2) for i in range(n)]
        self.loaded: list[int] = []

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> int:
        self.loaded.append(i)
        return i


def scan_report(tmp_path, corrupt: list[str]) -> ReportData:
    files = [{"path": p, "status": "corrupt", "rows": 0} for p in corrupt]
    files.append({"path": "elsewhere/ok.jpg", "status": "ok", "rows": 1})
    return ReportData(tmp_path / "report", data={"files": files})


def test_exclude_a_scan_report_skips_the_files_it_called_corrupt(tmp_path, caplog):
    root = str(tmp_path / "train")
    ds = Files(root)
    report = scan_report(tmp_path, [os.path.join(root, "c1", "3.jpg"), "train/c0/8.jpg", "x.jpg"])
    loader = GuardedLoader(DataLoader(ds, batch_size=5), exclude=report)
    got = [i for b in loader for i in b.tolist()]
    assert got == [i for i in range(12) if i not in (3, 8)]
    assert not {3, 8} & set(ds.loaded)
    assert "1 of 3 file(s) are not in the dataset" in caplog.text  # x.jpg


def test_exclude_paths_indices_frames_and_a_subset(tmp_path):
    root = str(tmp_path / "train")
    sub = Subset(Files(root), [10, 11, 0, 1, 2])  # Subset index 1 is file 11
    paths = [os.path.join(root, "c1", "11.jpg")]
    loader = GuardedLoader(DataLoader(sub, batch_size=2), exclude=[*paths, 3])
    assert [i for b in loader for i in b.tolist()] == [10, 0, 2]  # not 11 (path), 1 (index 3)
    frame = pd.DataFrame({"path": ["a", "b"], "row": [1, 2], "index": pd.array([4, None], "Int64")})
    loader = GuardedLoader(DataLoader(Files(root), batch_size=4), exclude=frame)
    assert loader.excluded_indices == {4}


def test_path_of_names_the_files_of_a_dataset_that_does_not_list_them(tmp_path):
    shard = lambda i: f"/data/shard{i // 4}.parquet"  # noqa: E731 - rows of shards
    loader = GuardedLoader(
        DataLoader(Planted(bad={}), batch_size=8), exclude=["/data/shard2.parquet"], path_of=shard
    )
    assert loader.excluded_indices == {8, 9, 10, 11}
    with pytest.raises(UsageError, match="does not list its files: pass path_of="):
        GuardedLoader(DataLoader(Planted(bad={}), batch_size=8), exclude=["/data/x.jpg"])
