"""Planted samples shared by the stream tests, and the checks every stack must pass.

Sample ``i`` is a ``3 x 4 x 4`` float32 image filled with ``i``; three are planted: a NaN
(:data:`NAN`), one that cannot be read (:data:`UNREADABLE`: each stack writes it damaged in its
own format) and one holding 1e30 (:data:`HUGE`: fine in fp32, an ``fp16_safe`` error with
``fits="fp16"``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from datacheck.torch import GuardedLoader, read_quarantine

N = 40
BATCH = 8
NAN, UNREADABLE, HUGE = 5, 11, 23
BAD = {NAN: "nan", UNREADABLE: "load_error", HUGE: "fp16_safe"}
CLEAN = sorted(set(range(N)) - set(BAD))


def image(i: int) -> np.ndarray:
    """The planted image of sample ``i`` (the unreadable one is a clean image here)."""
    x = np.full((3, 4, 4), float(i), np.float32)
    if i == NAN:
        x[0, 1, 2] = np.nan
    if i == HUGE:
        x[2, 3, 1] = 1e30
    return x


@dataclass
class Epoch:
    """What one pass over a guarded loader yielded."""

    labels: list[int] = field(default_factory=list)
    batches: list[tuple[int, list[int], list[Any]]] = field(default_factory=list)
    """(step, labels, batch_indices) of each yielded batch."""


def run_epoch(loader: GuardedLoader, label: Any = "cls", image: Any = "npy") -> Epoch:
    """One pass; every batch's images must agree with its labels (rows stay aligned)."""
    out = Epoch()
    for batch in loader:
        labels = [int(v) for v in batch[label]]
        pixels = np.asarray(batch[image])[:, 0, 0, 0].tolist()
        assert pixels == [float(i) for i in labels], (pixels, labels)
        out.labels += labels
        out.batches.append((loader.step, labels, list(loader.batch_indices)))
    return out


def assert_clean_once(epoch: Epoch, clean: Iterable[int] = CLEAN) -> None:
    """Every clean sample exactly once, no bad one."""
    counts = Counter(epoch.labels)
    assert sorted(counts) == sorted(clean), sorted(set(clean) ^ set(counts))
    assert max(counts.values()) == 1, [k for k, v in counts.items() if v > 1]


def assert_recorded(folder: Any, names: dict[int, str]) -> pd.DataFrame:
    """The quarantine holds the three planted samples, each under its check and its name
    (``names[i]``: the identity the pipeline gives sample ``i``)."""
    q = read_quarantine(folder)
    got = dict(zip(q["sample"].tolist(), q["check"].tolist(), strict=True))
    assert got == {names[i]: check for i, check in BAD.items()}, got
    assert q["index"].isna().all()
    return q


def assert_dropped_where_they_appear(
    epoch: Epoch,
    q: pd.DataFrame,
    batch: int = BATCH,
    order: Iterable[int] = range(N),
    *,
    slot: bool = True,
) -> None:
    """In a single ordered stream (no workers), batch ``s`` is the ``s``-th run of ``batch``
    items of ``order``: each bad sample is missing from exactly its own batch, recorded at that
    step, and the batch's clean samples are all there (never a whole batch lost for one sample).

    ``slot``: the unreadable sample takes a place in its batch (a failure the stream yields);
    else (a handler that skips it, as WebDataset's) the next sample takes it.
    """
    items = [i for i in order if slot or i != UNREADABLE]
    step_of = {i: p // batch for p, i in enumerate(items)}
    if not slot:  # reported while the batch of the next sample was being filled
        after = list(order)
        step_of[UNREADABLE] = step_of[after[after.index(UNREADABLE) + 1]]
    by_step = {step: labels for step, labels, _ in epoch.batches}
    for i in BAD:
        step = step_of[i]
        expected = [j for j in items if step_of[j] == step and j not in BAD]
        assert by_step[step] == expected, (i, step, by_step.get(step))
        rec = q[q["check"] == BAD[i]]
        assert rec["step"].tolist() == [step], rec
