"""GuardedLoader on one process: planted bad samples, workers, shuffling, nesting, modes."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from datacheck.checks._numpy import RowMap, check_values
from datacheck.checks._rules import Bound, ColumnRules
from datacheck.errors import BadSampleError, DatacheckError, UsageError
from datacheck.torch import GuardedLoader, LoaderConfig, indices_from_scan, read_quarantine
from datacheck.torch._checks import launch_check

N = 60
BAD = {3: "nan", 17: "inf", 29: "extreme", 30: "nan", 44: "-inf", 59: "extreme"}
GOOD = sorted(set(range(N)) - set(BAD))


class Planted(Dataset):
    """Samples whose image is filled with their index; BAD ones carry a planted value.

    With ``calls`` set, every ``__getitem__`` appends its index to a per-process file there,
    so calls made in DataLoader worker processes are seen by the test.
    """

    def __init__(self, n: int = N, bad: dict[int, str] | None = None, calls: Path | None = None):
        self.n, self.bad, self.calls = n, BAD if bad is None else bad, calls

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        if self.calls is not None:
            with open(self.calls / f"{os.getpid()}.txt", "a") as f:
                f.write(f"{i}\n")
        image = torch.full((3, 4, 4), float(i))
        kind = self.bad.get(i)
        if kind == "nan":
            image[1, 2, 3] = float("nan")
        elif kind in ("inf", "-inf"):
            image[0, 0, 0] = float(kind)
        elif kind == "extreme":
            image[2, 1, 1] = 1e6
            image[2, 1, 2] = -7e4
        return {"image": image, "label": i, "name": f"s{i}"}


def calls_in(folder: Path) -> Counter:
    out: Counter = Counter()
    for path in folder.glob("*.txt"):
        out.update(int(line) for line in path.read_text().split())
    return out


def run_epoch(loader: GuardedLoader) -> list[int]:
    """Iterate once, checking each yielded batch is internally consistent; return labels."""
    seen: list[int] = []
    for batch in loader:
        labels = batch["label"].tolist()
        assert batch["image"][:, 0, 1, 1].tolist() == [float(i) for i in labels]
        assert batch["name"] == [f"s{i}" for i in labels]
        assert len(labels) > 0
        seen.extend(labels)
    return seen


@pytest.mark.parametrize("num_workers", [0, 2])
def test_drop_yields_every_good_sample_once_and_quarantines_exactly_the_bad(tmp_path, num_workers):
    dl = DataLoader(Planted(), batch_size=8, shuffle=True, num_workers=num_workers)
    loader = GuardedLoader(dl, quarantine=tmp_path / "q", drop_on="warning")
    assert loader.in_workers == (num_workers > 0)  # flags computed in the workers
    seen = run_epoch(loader)
    assert sorted(seen) == GOOD and len(seen) == len(set(seen))
    q = read_quarantine(tmp_path / "q")
    assert set(q["index"]) == set(BAD)
    by_index = {i: set(g) for i, g in q.groupby("index")["check"]}
    expected = {i: {"inf" if k == "-inf" else k} for i, k in BAD.items()}
    assert by_index == expected
    assert set(q.loc[q["check"] == "extreme", "severity"]) == {"warning"}
    assert set(q.loc[q["check"].isin(["nan", "inf"]), "severity"]) == {"error"}
    assert set(q["key"]) == {"image"}
    extreme = q[q["check"] == "extreme"]
    assert extreme["count"].tolist() == [2, 2] and extreme["value"].tolist() == ["1000000"] * 2
    s = loader.stats
    assert (s.checked, s.bad, s.dropped, s.yielded, s.skipped_batches) == (N, 6, 6, N - 6, 0)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_next_run_skips_quarantined_indices_without_loading_them(tmp_path, num_workers):
    first = GuardedLoader(
        DataLoader(Planted(), batch_size=8, shuffle=True),
        quarantine=tmp_path / "q",
        drop_on="warning",
    )
    run_epoch(first)
    calls = tmp_path / "calls"
    calls.mkdir()
    dl = DataLoader(Planted(calls=calls), batch_size=8, shuffle=True, num_workers=num_workers)
    second = GuardedLoader(dl, quarantine=tmp_path / "q")
    # to see the dataset is the one the quarantine was written for, the loader read its first,
    # middle and last samples, those not quarantined (30 and 59 are): only sample 0
    assert calls_in(calls) == {0: 1}
    for f in calls.iterdir():
        f.unlink()
    seen = run_epoch(second)
    assert sorted(seen) == GOOD
    loaded = calls_in(calls)
    assert set(loaded) == set(GOOD) and set(loaded.values()) == {1}
    assert second.stats.excluded == len(BAD) and second.stats.bad == 0
    # re-formed full batches: 54 good samples in batches of 8
    assert second.stats.batches == 7


def test_samples_quarantined_in_one_epoch_are_not_loaded_in_the_next(tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    dl = DataLoader(Planted(calls=calls), batch_size=8, shuffle=True)
    loader = GuardedLoader(dl, drop_on="warning")
    loader.set_epoch(0)
    run_epoch(loader)
    loader.set_epoch(1)
    assert sorted(run_epoch(loader)) == GOOD
    loaded = calls_in(calls)
    assert all(loaded[i] == 1 for i in BAD) and all(loaded[i] == 2 for i in GOOD)
    assert loader.excluded_indices == frozenset(BAD)


def test_epochs_counted_without_set_epoch(tmp_path):
    loader = GuardedLoader(DataLoader(Planted(bad={5: "nan"}), batch_size=8), quarantine=tmp_path)
    run_epoch(loader)
    assert read_quarantine(tmp_path)[["index", "epoch", "step"]].values.tolist() == [[5, 0, 0]]


class Nested(Dataset):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> dict:
        a = torch.full((2,), float(i))
        b = torch.full((3,), float(i), dtype=torch.float16)
        if i == 4:
            b[1] = float("inf")
        ids = torch.tensor([i, 7 if i != 6 else 500])
        return {"inputs": (a, [b, ids]), "meta": {"w": torch.tensor(float(i))}, "tag": f"t{i}"}


def test_nested_batches_keep_their_structure_and_name_the_leaf(tmp_path):
    dl = DataLoader(Nested(), batch_size=4)
    loader = GuardedLoader(dl, quarantine=tmp_path, ranges={"inputs.1.*": (0, 99)})
    batches = list(loader)
    labels = [int(v) for b in batches for v in b["meta"]["w"].tolist()]
    assert labels == [0, 1, 2, 3, 5, 7, 8, 9]
    b = batches[1]
    assert isinstance(b["inputs"], list | tuple) and isinstance(b["inputs"][1], list)
    assert b["inputs"][0][:, 0].tolist() == [5.0, 7.0] and b["tag"] == ["t5", "t7"]
    assert b["inputs"][1][0].dtype == torch.float16
    q = read_quarantine(tmp_path)
    assert q[["index", "key", "check", "value"]].values.tolist() == [
        [4, "inputs.1.0", "inf", "inf"],
        [6, "inputs.1.1", "out_of_range", "500"],
    ]


def test_integer_leaves_are_not_checked_without_a_range(tmp_path):
    loader = GuardedLoader(DataLoader(Nested(), batch_size=4), quarantine=tmp_path)
    assert sum(len(b["tag"]) for b in loader) == 9  # only the fp16 Inf
    assert read_quarantine(tmp_path)["index"].tolist() == [4]


def test_raise_names_the_dataset_indices_and_quarantines_first(tmp_path):
    dl = DataLoader(Planted(bad={17: "nan", 20: "inf"}), batch_size=8)
    loader = GuardedLoader(dl, quarantine=tmp_path, on_bad="raise")
    it = iter(loader)
    assert [len(next(it)["label"]) for _ in range(2)] == [8, 8]
    with pytest.raises(BadSampleError, match=r"dataset indices \[17, 20\]") as info:
        next(it)
    assert info.value.indices == (17, 20)
    assert isinstance(info.value, DatacheckError)
    assert read_quarantine(tmp_path)["index"].tolist() == [17, 20]


def test_raise_on_the_first_batch(tmp_path):
    loader = GuardedLoader(DataLoader(Planted(), batch_size=8), on_bad="raise")
    with pytest.raises(BadSampleError, match=r"\[3\]"):
        next(iter(loader))


def test_skip_batch_drops_whole_batches_with_a_bad_sample(tmp_path):
    loader = GuardedLoader(
        DataLoader(Planted(), batch_size=10),
        quarantine=tmp_path,
        on_bad="skip_batch",
        drop_on="warning",
    )
    assert [b["label"].tolist() for b in loader] == []  # each batch of 10 holds one bad sample
    assert loader.stats.skipped_batches == 6 and loader.stats.skipped_samples == N - 6
    loader2 = GuardedLoader(
        DataLoader(Planted(bad={12: "nan"}), batch_size=10), on_bad="skip_batch"
    )
    got = [b["label"].tolist() for b in loader2]
    assert [g[0] for g in got] == [0, 20, 30, 40, 50] and all(len(g) == 10 for g in got)


def test_a_batch_emptied_by_drop_is_skipped_unless_allowed():
    dl = DataLoader(Planted(n=6, bad={2: "nan", 3: "inf"}), batch_size=2)
    assert [b["label"].tolist() for b in GuardedLoader(dl)] == [[0, 1], [4, 5]]
    dl = DataLoader(Planted(n=6, bad={2: "nan", 3: "inf"}), batch_size=2)
    loader = GuardedLoader(dl, allow_empty=True)
    batches = [b["label"].tolist() for b in loader]
    assert batches == [[0, 1], [], [4, 5]]
    assert loader.stats.skipped_batches == 0


def test_deferred_mode_gives_the_same_samples_and_manifest(tmp_path):
    dl = DataLoader(
        Planted(), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1)
    )
    eager_seen = run_epoch(GuardedLoader(dl, quarantine=tmp_path / "a"))
    dl = DataLoader(
        Planted(), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1)
    )
    deferred_seen = run_epoch(GuardedLoader(dl, quarantine=tmp_path / "b", deferred=True))
    assert eager_seen == deferred_seen
    cols = ["index", "check", "key", "step"]
    a, b = read_quarantine(tmp_path / "a"), read_quarantine(tmp_path / "b")
    pd.testing.assert_frame_equal(a[cols], b[cols])


def test_max_abs_per_key_and_disabled():
    dl = DataLoader(Planted(), batch_size=8)
    assert len(run_epoch(GuardedLoader(dl, max_abs=None, drop_on="warning"))) == N - 4
    dl = DataLoader(Planted(), batch_size=8)
    loader = GuardedLoader(dl, max_abs={"label": 1.0}, drop_on="warning")
    assert len(run_epoch(loader)) == N - 4
    dl = DataLoader(Planted(), batch_size=8)
    loader = GuardedLoader(dl, max_abs={"im*": 50.0}, drop_on="warning")
    assert len(run_epoch(loader)) == N - 6 - 8  # 51..58 too


def test_set_epoch_is_forwarded_to_a_distributed_sampler(tmp_path):
    ds = Planted()
    sampler = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=0)
    loader = GuardedLoader(DataLoader(ds, batch_size=4, sampler=sampler), quarantine=tmp_path)
    orders = []
    for epoch in (0, 3):
        loader.set_epoch(epoch)
        assert sampler.epoch == epoch
        orders.append(run_epoch(loader))
    assert orders[0] != orders[1]
    q = read_quarantine(tmp_path)
    assert set(q["epoch"]) == {0, 3} and q["index"].is_unique  # never loaded twice
    first = set(q.loc[q["epoch"] == 0, "index"])
    assert first | set(orders[0]) == set(sampler_indices(ds, epoch=0))
    assert not first & set(orders[1])


def sampler_indices(ds: Dataset, epoch: int) -> list[int]:
    sampler = DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    return list(sampler)


def test_custom_batch_sampler_filters_within_batches(tmp_path):
    batches = [[0, 1, 2, 3], [4, 5], [17], [6, 7]]
    dl = DataLoader(Planted(), batch_sampler=batches)
    run_epoch(GuardedLoader(dl, quarantine=tmp_path))
    dl = DataLoader(Planted(), batch_sampler=batches)
    loader = GuardedLoader(dl, quarantine=tmp_path)
    got = [b["label"].tolist() for b in loader]
    assert got == [[0, 1, 2], [4, 5], [6, 7]]
    assert loader.stats.excluded == 2


def test_exclude_from_a_scan_manifest_is_never_loaded(tmp_path):
    manifest = pd.DataFrame(
        {"path": ["a.parquet", "a.parquet", "b.parquet", "b.parquet"], "row": [1, 2, 0, None]}
    )
    manifest.astype({"row": "Int64"}).to_parquet(tmp_path / "quarantine.parquet")
    mapping = {("a.parquet", r): r for r in range(30)} | {
        ("b.parquet", r): 30 + r for r in range(30)
    }
    exclude = indices_from_scan(tmp_path / "quarantine.parquet", mapping)
    assert exclude == {1, 2, 30}
    calls = tmp_path / "calls"
    calls.mkdir()
    loader = GuardedLoader(DataLoader(Planted(calls=calls, bad={}), batch_size=8), exclude=exclude)
    assert sorted(run_epoch(loader)) == sorted(set(range(N)) - exclude)
    assert not set(calls_in(calls)) & exclude


def pack(samples: list[dict]) -> dict:
    """A collate that packs every sample's image into one long row (merges samples)."""
    return {"image": torch.cat([s["image"].reshape(1, -1) for s in samples], dim=1)}


def stack_images(samples: list[dict]) -> tuple[torch.Tensor, list[int]]:
    return torch.stack([s["image"] for s in samples]), [s["label"] for s in samples]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_collate_that_merges_samples_is_refused_with_a_clear_message(num_workers):
    dl = DataLoader(Planted(), batch_size=8, collate_fn=pack, num_workers=num_workers)
    loader = GuardedLoader(dl)
    assert loader.in_workers == (num_workers > 0)
    with pytest.raises(UsageError, match="merges or splits samples"):
        next(iter(loader))


def test_a_custom_collate_keeping_one_row_per_sample_is_supported():
    dl = DataLoader(Planted(), batch_size=8, collate_fn=stack_images)
    loader = GuardedLoader(dl, drop_on="warning")
    labels = [i for images, ids in loader for i in ids]
    assert labels == GOOD


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: DataLoader(Planted(), batch_size=None), "batch_size"),
        (lambda: DataLoader(Planted(), batch_size=2, num_workers=1, in_order=False), "in_order"),
        (lambda: [1, 2], "DataLoader"),
    ],
)
def test_unguardable_loaders_are_refused(make, match):
    with pytest.raises(UsageError, match=match):
        GuardedLoader(make())


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"on_bad": "ignore"}, "drop, raise, skip_batch"),
        ({"max_abs": -1.0}, "positive"),
        ({"ranges": {"ids": (5, 1)}}, "above max"),
        ({"ranges": {"ids": 5}}, r"\(min, max\)"),
        ({"device": "gpu0"}, "torch device"),
    ],
)
def test_invalid_options_say_what_and_how_to_fix(options, match):
    with pytest.raises(UsageError, match=match):
        LoaderConfig(**options)


def test_config_and_options_are_exclusive():
    with pytest.raises(UsageError, match="either"):
        GuardedLoader(DataLoader(Planted(), batch_size=2), LoaderConfig(), on_bad="raise")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_torch_body_agrees_with_the_numpy_body_on_every_row(dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(32, 5, 7, generator=gen, dtype=torch.float64) * 10
    flat = x.view(-1)
    picks = torch.randperm(flat.numel(), generator=gen)[:40]
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 7e4, -7e4, 6e4, 65504.0])
    flat[picks] = specials[torch.arange(40) % len(specials)].double()
    x = x.to(dtype)
    rules = ColumnRules(bounds=(Bound(65504.0),))
    found = launch_check({"x": x}, 32, lambda k, d: rules).result()
    ours = sorted((f.pos, f.check, f.count, f.value) for f in found)
    ref = x.to(torch.float32).numpy().reshape(32, -1)
    expected = []
    for h in check_values(ref.reshape(-1), None, RowMap(32, stride=ref.shape[1]), rules):
        texts = pc.cast(pa.array(h.values, pa.float64()), pa.string()).to_pylist()
        expected += zip(
            h.rows.tolist(), [h.check] * len(texts), h.counts.tolist(), texts, strict=True
        )
    assert ours == sorted(expected)
    kinds = {"nan", "inf"} if dtype == torch.float16 else {"nan", "inf", "extreme"}
    assert {c for _, c, _, _ in ours} == kinds  # 7e4 overflows float16 to Inf


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("deferred", [False, True])
def test_checks_on_the_gpu(tmp_path, deferred):
    dl = DataLoader(Planted(), batch_size=8, shuffle=True, pin_memory=True)
    loader = GuardedLoader(
        dl, quarantine=tmp_path, device="cuda", deferred=deferred, drop_on="warning"
    )
    seen = []
    for batch in loader:
        assert batch["image"].is_cuda
        seen.extend(batch["label"].tolist())
    assert sorted(seen) == GOOD
    assert set(read_quarantine(tmp_path)["index"]) == set(BAD)


class Bare(Dataset):
    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([float(i), float("nan") if i == 7 else 0.0])


def test_a_bare_tensor_batch_is_keyed_batch(tmp_path):
    loader = GuardedLoader(DataLoader(Bare(), batch_size=5), quarantine=tmp_path)
    assert [b[:, 0].tolist() for b in loader] == [[0, 1, 2, 3, 4], [5, 6, 8, 9], [10, 11]]
    assert read_quarantine(tmp_path)[["index", "key"]].values.tolist() == [[7, "batch"]]


@pytest.mark.slow
def test_persistent_workers_keep_indices_matched_across_epochs(tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    dl = DataLoader(
        Planted(calls=calls), batch_size=8, shuffle=True, num_workers=2, persistent_workers=True
    )
    loader = GuardedLoader(dl, quarantine=tmp_path / "q", drop_on="warning")
    for epoch in range(3):
        loader.set_epoch(epoch)
        assert sorted(run_epoch(loader)) == GOOD
    # this process read only the dataset's probe (first, middle, last) for the quarantine's
    # dataset fingerprint, at the first record; the workers read everything else
    probe = calls.joinpath(f"{os.getpid()}.txt")
    assert sorted(map(int, probe.read_text().split())) == [0, 30, 59]
    probe.unlink()
    loaded = calls_in(calls)
    assert all(loaded[i] == 1 for i in BAD) and all(loaded[i] == 3 for i in GOOD)
    assert loader.stats.excluded == 2 * len(BAD)


finite = st.floats(-1e6, 1e6, width=32)
special = st.sampled_from([float("nan"), float("inf"), -float("inf"), 65504.0, -65505.0, 7e4])


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.lists(st.one_of(finite, special), min_size=3, max_size=3), min_size=1, max_size=9
    ),
    bound=st.sampled_from([None, 1.0, 65504.0]),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
)
def test_property_torch_findings_equal_the_numpy_oracle(rows, bound, dtype):
    x = torch.tensor(rows, dtype=torch.float64).to(dtype)
    rules = ColumnRules(bounds=(Bound(bound),) if bound is not None else ())
    ours = sorted(
        (f.pos, f.check, f.count) for f in launch_check(x, len(rows), lambda k, d: rules).result()
    )
    ref = x.to(torch.float64).numpy()
    expected = sorted(
        (r, h.check, c)
        for h in check_values(ref.reshape(-1), None, RowMap(len(rows), stride=3), rules)
        for r, c in zip(h.rows.tolist(), h.counts.tolist(), strict=True)
    )
    assert ours == expected


def test_batches_dealt_out_in_turn_pad_a_short_share_with_its_first_batch():
    from datacheck.torch._loader_shard import Strided

    batches = [[i] for i in range(5)]
    shares = [list(Strided(batches, r, 2)) for r in range(2)]
    assert shares == [[[0], [2], [4]], [[1], [3], [1]]]  # rank 1 one short: padded
    assert [len(Strided(batches, r, 2)) for r in range(2)] == [3, 3]
    assert list(Strided([[0]], 1, 2)) == [[]]  # nothing at all: an empty batch, skipped


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_tuple_batch_names_its_positions_item_0_item_1(tmp_path, caplog, num_workers):
    """A dataset of ``(x, y)`` pairs (TensorDataset): the positions are 'item 0', 'item 1' in
    the quarantine, the messages and ``ranges=``; a key naming no leaf is refused."""
    x = torch.arange(32, dtype=torch.float32).repeat(3, 1).T.contiguous()
    x[6, 1] = float("nan")
    y = torch.arange(32)
    ds = torch.utils.data.TensorDataset(x, y)
    dl = DataLoader(ds, batch_size=8, num_workers=num_workers)
    loader = GuardedLoader(dl, quarantine=tmp_path / "q", ranges={"item 1": (0, 29)})
    got = sorted(int(v) for _, ys in loader for v in ys)
    assert got == [i for i in range(30) if i != 6]
    q = read_quarantine(tmp_path / "q")
    assert q[["index", "key", "check"]].values.tolist() == [
        [6, "item 0", "nan"],
        [30, "item 1", "out_of_range"],
        [31, "item 1", "out_of_range"],
    ]
    assert "nan in 'item 0'" in caplog.text
    wrong = GuardedLoader(DataLoader(ds, batch_size=8), ranges={"1": (0, 29)})
    with pytest.raises(UsageError, match=r"ranges key '1' names no leaf.*'item 0', 'item 1'"):
        next(iter(wrong))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("planted", [65504.0, 65505.0, float("nan"), float("inf"), -1e30, 3e19])
def test_the_sum_of_squares_clean_proof_never_hides_a_value(dtype, planted):
    """The one-pass clean proof (a dot product) on a large leaf agrees with the exact check:
    a value at the bound passes, one past it, a NaN, an Inf, an overflowing square are found."""
    from datacheck.torch._checks import LeafRules

    x = torch.randn(512, 2048, generator=torch.Generator().manual_seed(0)).to(dtype)
    x[300, 1000] = planted
    found = launch_check({"x": x}, 512, LeafRules(65504.0, {})).result()
    expected = {65504.0: set(), 65505.0: {"extreme"}, -1e30: {"extreme"}, 3e19: {"extreme"}}
    want = expected.get(planted, {"nan" if planted != planted else "inf"})
    assert {f.check for f in found} == want
    assert all(f.pos == 300 for f in found)
