"""What runs where the DataLoader fetches a batch (a worker process, or the main one).

:class:`SafeDataset` wraps the user's Dataset so that a sample whose loading raises becomes a
:class:`LoadFailure` instead of an exception that ends the run: the batch is fetched as usual
(one ``__getitems__`` call, or one ``__getitem__`` per index, as the DataLoader does), and
only when that raises are its indices fetched again one at a time to find the failing ones, so
a clean batch costs nothing more (the samples before the failing one load twice).  :class:`GuardedCollate` then collates the samples that loaded and, when asked,
flags bad samples right there (:func:`~datacheck.torch._checks.flag_leaves`), returning one
:class:`Fetched` the main process unpacks.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch.utils.data import Dataset

from datacheck.torch._checks import RulesFor, flag_leaves

_MESSAGE_LIMIT = 500
"""Characters of an exception's message kept in a record."""


@dataclass(frozen=True)
class LoadFailure:
    """A sample whose loading raised, as the main process learns of it."""

    pos: int
    """Position of the sample in the batch the sampler drew (-1: a stream's, in no batch)."""
    index: Any
    """The sample's dataset index; a stream sample's :class:`SampleId` (None: not named)."""
    error: str
    """``Type: message`` of the exception (the record's value)."""
    trace: str
    """The formatted traceback, where it was raised (for logs and ``on_bad='raise'``)."""
    where: str | None = None
    """Where in a stream it happened, when the sample is not named (worker, position, shard)."""


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."


class _Samples(list[Any]):
    """The samples that loaded, with the failures beside them (read by GuardedCollate)."""

    failures: tuple[LoadFailure, ...] = ()


class SafeDataset(Dataset[Any]):
    """The user's Dataset, whose samples fail one by one instead of the whole run.

    Attribute reads and writes go through to the wrapped dataset, so a ``worker_init_fn`` that
    sets up ``get_worker_info().dataset`` (opening a file per worker) keeps working.
    """

    _OWN = frozenset({"dataset", "catch", "_batched"})

    def __init__(self, dataset: Any, catch: tuple[type[BaseException], ...]) -> None:
        object.__setattr__(self, "dataset", dataset)
        object.__setattr__(self, "catch", catch)
        object.__setattr__(self, "_batched", bool(getattr(dataset, "__getitems__", None)))

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        dataset = self.dataset
        try:  # the DataLoader's own fetch; costs nothing more while nothing raises
            if self._batched:
                return list(dataset.__getitems__(indices))
            return [dataset[i] for i in indices]
        except self.catch:
            return self._one_by_one(indices)

    def _one_by_one(self, indices: Sequence[int]) -> _Samples:
        """The batch again, one sample at a time: the ones that raise become failures."""
        samples, failures = _Samples(), []
        for pos, index in enumerate(indices):
            try:
                samples.append(self._one(index))
            except self.catch as exc:
                trace = "".join(traceback.format_exception(exc))
                failures.append(LoadFailure(pos, int(index), _describe(exc), trace))
        samples.failures = tuple(failures)
        return samples

    def _one(self, index: int) -> Any:
        if self._batched:
            return self.dataset.__getitems__([index])[0]
        return self.dataset[index]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in self._OWN:
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.dataset, name, value)

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in self._OWN}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class Fetched(NamedTuple):
    """A batch as the guarded DataLoader yields it to the main process."""

    batch: Any
    """The user's collated batch of the samples that loaded (None: none did)."""
    flags: torch.Tensor | None
    """Per-leaf, per-sample flags computed in the worker (None: not flagged, or clean)."""
    keys: list[str]
    """Leaf keys of the rows of ``flags``."""
    failures: tuple[LoadFailure, ...]
    """Samples that failed to load, by position in the drawn batch."""


class GuardedCollate:
    """The user's collate_fn over the samples that loaded; then, optionally, the flagging pass.

    With ``rules_for`` (batches stay on the CPU and workers exist) the per-sample reductions run
    here, in parallel with training, and the main process only reads the flags.
    """

    def __init__(self, collate: Callable[[list[Any]], Any], rules_for: RulesFor | None) -> None:
        self.collate, self.rules_for = collate, rules_for

    def __call__(self, samples: list[Any]) -> Fetched:
        failures = getattr(samples, "failures", ())
        if failures and not samples:
            return Fetched(None, None, [], failures)
        batch = self.collate(list(samples) if failures else samples)
        if self.rules_for is None:
            return Fetched(batch, None, [], failures)
        checked, flags = flag_leaves(batch, len(samples), self.rules_for)
        stacked = torch.stack(flags) if flags else None
        return Fetched(batch, stacked, [c.key for c in checked], failures)
