"""GuardedLoader: a sample whose loading raises is quarantined as load_error, not the run's end."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from datacheck.errors import BadSampleError
from datacheck.torch import GuardedLoader, read_quarantine
from tests.torch.test_loader import calls_in

N = 40
BROKEN = {3, 17, 18, 31}


class Flaky(Dataset):
    """Samples ``BROKEN`` raise OSError; every load is recorded per process in ``calls``."""

    def __init__(self, calls=None, broken=frozenset(BROKEN), batched: bool = False) -> None:
        self.calls, self.broken = calls, set(broken)
        if batched:
            self.__getitems__ = self._many

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict:
        if self.calls is not None:
            import os

            with open(self.calls / f"{os.getpid()}.txt", "a") as f:
                f.write(f"{i}\n")
        if i in self.broken:
            raise OSError(f"image file is truncated ({i} bytes not processed)")
        return {"x": torch.full((3,), float(i)), "label": i}

    def _many(self, indices: list[int]) -> list[dict]:
        return [self[i] for i in indices]


@pytest.mark.parametrize(("num_workers", "batched"), [(0, False), (2, False), (0, True)])
def test_a_sample_that_raises_is_quarantined_and_dropped_and_training_continues(
    tmp_path, num_workers, batched
):
    dl = DataLoader(Flaky(batched=batched), batch_size=8, shuffle=True, num_workers=num_workers)
    loader = GuardedLoader(dl, quarantine=tmp_path / "q", max_load_errors=None)
    seen = []
    for batch in loader:
        assert batch["x"][:, 0].tolist() == [float(i) for i in batch["label"].tolist()]
        assert batch["label"].tolist() == loader.batch_indices
        seen += batch["label"].tolist()
    assert sorted(seen) == sorted(set(range(N)) - BROKEN)
    q = read_quarantine(tmp_path / "q")
    assert sorted(q["index"]) == sorted(BROKEN)
    assert set(q["check"]) == {"load_error"} and set(q["severity"]) == {"error"}
    assert q.set_index("index").loc[17, "value"] == (
        "OSError: image file is truncated (17 bytes not processed)"
    )
    s = loader.stats
    assert (s.load_errors, s.bad, s.dropped, s.checked, s.yielded) == (4, 4, 4, N - 4, N - 4)


def test_the_next_run_never_loads_them(tmp_path):
    run = GuardedLoader(DataLoader(Flaky(), batch_size=8), quarantine=tmp_path / "q")
    list(run)
    calls = tmp_path / "calls"
    calls.mkdir()
    dl = DataLoader(Flaky(calls=calls), batch_size=8, num_workers=2)
    again = GuardedLoader(dl, quarantine=tmp_path / "q")
    assert sum(len(b["label"]) for b in again) == N - len(BROKEN)
    assert set(calls_in(calls)) == set(range(N)) - BROKEN


def test_raise_names_the_index_and_the_exception(tmp_path):
    loader = GuardedLoader(DataLoader(Flaky(), batch_size=8), quarantine=tmp_path, on_bad="raise")
    with pytest.raises(BadSampleError, match=r"indices \[3\].*index 3: OSError: image file") as e:
        list(loader)
    assert e.value.indices == (3,)
    assert "Where the first one raised" in str(e.value) and "__getitem__" in str(e.value)
    assert read_quarantine(tmp_path)["index"].tolist() == [3]


def test_skip_batch_skips_the_batch_of_a_sample_that_raised():
    loader = GuardedLoader(DataLoader(Flaky(), batch_size=8), on_bad="skip_batch")
    assert [b["label"][0].item() for b in loader] == [8, 32]  # batches 0, 2, 3 hold one
    assert loader.stats.skipped_batches == 3


def test_a_batch_where_every_sample_raises_is_skipped():
    loader = GuardedLoader(DataLoader(Flaky(broken=range(8, 16)), batch_size=8))
    assert [b["label"][0].item() for b in loader] == [0, 16, 24, 32]
    assert loader.stats.skipped_batches == 1 and loader.stats.load_errors == 8


def test_load_errors_can_be_narrowed_or_turned_off():
    loader = GuardedLoader(DataLoader(Flaky(), batch_size=8), load_errors=(KeyError,))
    with pytest.raises(OSError, match="truncated"):
        list(loader)
    loader = GuardedLoader(DataLoader(Flaky(), batch_size=8), load_errors=())
    assert loader.loader.dataset is loader.dataset  # the Dataset runs untouched
    with pytest.raises(OSError, match="truncated"):
        list(loader)


@pytest.mark.parametrize(
    ("budget", "raises_at"), [(3, 31), (0, 3), (0.05, None), (0.2, None), (None, None)]
)
def test_max_load_errors_counts_or_fractions(budget, raises_at):
    loader = GuardedLoader(DataLoader(Flaky(), batch_size=8), max_load_errors=budget)
    if raises_at is None:
        assert sum(len(b["label"]) for b in loader) == N - 4
        return
    with pytest.raises(BadSampleError, match="failed to load, over max_load_errors") as e:
        list(loader)
    assert e.value.indices[-1] == raises_at


def test_a_broken_mount_trips_the_fraction_budget_with_a_clear_message():
    loader = GuardedLoader(DataLoader(Flaky(broken=range(10, N)), batch_size=4))
    with pytest.raises(BadSampleError, match=r"14 of 24 samples seen .* unmounted") as e:
        list(loader)  # checked per batch, once more than 10 failed (LOAD_ERROR_GRACE)
    assert "index 23: OSError" in str(e.value)
