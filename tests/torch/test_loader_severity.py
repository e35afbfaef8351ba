"""GuardedLoader drops errors, not warnings, by default; fits= catches what overflows fp16/bf16."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from datacheck.checks._registry import BF16_MAX, FP16_OVERFLOW
from datacheck.errors import UsageError
from datacheck.torch import GuardedLoader, LoaderConfig, read_quarantine


class Prices(Dataset):
    """fp32 prices, most of them legitimately above 65504; one NaN (index 7)."""

    def __init__(self, values: list[float]) -> None:
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> dict:
        return {"price": torch.tensor([self.values[i], 1.0]), "i": i}


VALUES = [1e5 + i for i in range(16)]
VALUES[7] = float("nan")


def indices(loader: GuardedLoader) -> list[int]:
    return [i for b in loader for i in b["i"].tolist()]


def test_fp32_values_above_65504_are_kept_by_default_and_counted(tmp_path, caplog):
    loader = GuardedLoader(DataLoader(Prices(VALUES), batch_size=4), quarantine=tmp_path)
    assert indices(loader) == [i for i in range(16) if i != 7]
    assert read_quarantine(tmp_path)["index"].tolist() == [7]  # only the NaN
    assert loader.stats.warned == 15 and loader.stats.bad == 1
    assert caplog.text.count("kept, since drop_on='error'") == 1  # once per leaf and check


def test_drop_on_warning_drops_extreme_values_too(tmp_path):
    loader = GuardedLoader(
        DataLoader(Prices(VALUES), batch_size=4), quarantine=tmp_path, drop_on="warning"
    )
    assert indices(loader) == []
    q = read_quarantine(tmp_path)
    assert set(q["check"]) == {"nan", "extreme"} and len(set(q["index"])) == 16


@pytest.mark.parametrize(
    ("fits", "values", "dropped"),
    [
        ("fp16", [65504.0, 65519.0, 65520.0, -7e4, 1.0], {2, 3}),
        ("bf16", [1e38, 3.38e38, 3.3962e38, -3.4e38, 1.0], {2, 3}),
    ],
)
def test_fits_drops_inputs_that_overflow_the_training_dtype(tmp_path, fits, values, dropped):
    loader = GuardedLoader(
        DataLoader(Prices(values), batch_size=5), quarantine=tmp_path, fits=fits, max_abs=None
    )
    assert indices(loader) == [i for i in range(5) if i not in dropped]
    q = read_quarantine(tmp_path)
    assert set(q["check"]) == {f"{fits}_safe"} and set(q["index"]) == dropped
    assert set(q["severity"]) == {"error"}
    limit = FP16_OVERFLOW if fits == "fp16" else BF16_MAX
    for i in range(5):  # what the cast turns into Inf (bf16: a margin, as the schema's check)
        cast = torch.tensor([values[i]]).to(torch.float16 if fits == "fp16" else torch.bfloat16)
        assert torch.isinf(cast).item() == (i in dropped) == (abs(values[i]) > limit)


def test_fits_ignores_leaves_already_in_a_narrower_dtype():
    class Half(Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> torch.Tensor:
            return torch.tensor([60000.0, float(i)], dtype=torch.float16)

    assert sum(len(b) for b in GuardedLoader(DataLoader(Half(), batch_size=2), fits="fp16")) == 4


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"drop_on": "info"}, "error, warning"),
        ({"fits": "fp8"}, "fp16, bf16"),
        ({"max_load_errors": 1.5}, r"\[0, 1\)"),
        ({"max_load_errors": -1}, "negative"),
        ({"max_load_errors": "5"}, "count"),
        ({"load_errors": OSError}, "tuple of exception classes"),
    ],
)
def test_invalid_options_say_what_and_how_to_fix(options, match):
    with pytest.raises(UsageError, match=match):
        LoaderConfig(**options)
