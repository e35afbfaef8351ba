"""The user's IterableDataset, whose errors become :class:`Failed` items instead of the end of
the run (the dataset a plain ``DataLoader`` is rebuilt around).

Whether the stream goes on past a bad record depends on the iterator's shape, not on us:

- an iterator *object* whose ``__next__`` raises for one record and is called again (litdata's
  ``StreamingDataset``, a class with ``__next__``) goes on with the next record;
- a Python *generator* that raises is finished: Python closes it, so that worker's stream ends
  there (the rest of its shard is not delivered this epoch). The failure records where it
  happened (the shard of the last sample it delivered) and says the stream ended. Catch errors
  inside the generator per record instead (a decode stage that reports, see
  :func:`~datacheck.torch.stream.reporting`, or WebDataset's ``handler=``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from datacheck.torch._identity import SampleId
from datacheck.torch.stream._collate import Identify
from datacheck.torch.stream._items import Failed, Tagged, failure

Hook = Callable[[Any], Callable[[], None]]
"""Installs a library's hook on a dataset (in the process that iterates it); returns the undo."""
Items = Callable[[Any], Iterator[Any]]
"""Iterates a library's dataset in its stead, naming samples and reporting failures."""


class StreamSource(IterableDataset[Any]):
    """The user's IterableDataset, with errors from ``next()`` yielded as :class:`Failed`.

    Attribute reads and writes go through to the wrapped dataset (``set_epoch``, and what a
    ``worker_init_fn`` sets on ``get_worker_info().dataset``).
    """

    _OWN = frozenset({"dataset", "catch", "hook", "identify", "items"})

    def __init__(
        self,
        dataset: Any,
        catch: tuple[type[BaseException], ...],
        hook: Hook | None,
        identify: Identify,
        items: Items | None = None,
    ) -> None:
        object.__setattr__(self, "dataset", dataset)
        object.__setattr__(self, "catch", catch)
        object.__setattr__(self, "hook", hook)
        object.__setattr__(self, "identify", identify)
        object.__setattr__(self, "items", items)

    def __iter__(self) -> Iterator[Any]:
        undo = self.hook(self.dataset) if self.hook is not None else None
        try:
            it = self.items(self.dataset) if self.items is not None else iter(self.dataset)
            if not self.catch:
                yield from it
            else:
                yield from self._caught(it)
        finally:
            if undo is not None:
                undo()

    def _caught(self, it: Iterator[Any]) -> Iterator[Any]:
        """Items of ``it``; an error is held until the next ``next()`` tells whether the
        stream goes on (then it is a failure there) or ended with it."""
        last: Any = None
        n = 0
        held: BaseException | None = None
        while True:
            try:
                item = next(it)
            except StopIteration:
                if held is not None:
                    yield failure(held, None, f"{self._where(last, n)}; the stream ended there")
                return
            except self.catch as exc:
                if held is not None:
                    yield failure(held, None, self._where(last, n))
                held = exc
                continue
            if held is not None:
                yield failure(held, None, self._where(last, n))
                held = None
            last, n = item, n + 1
            yield item

    def _where(self, last: Any, n: int) -> str:
        info = get_worker_info()
        worker = f"worker {info.id}" if info is not None else "the main process"
        id = last.id if type(last) is Tagged else None
        if id is None and last is not None and type(last) is not Failed:
            try:
                id = self.identify(last)
            except Exception:  # the position alone still names the place
                id = None
        after = f", after {_name(id)}" if id is not None else ""
        return f"{worker}, item {n} of its stream{after}"

    def __len__(self) -> int:
        return len(self.dataset)  # TypeError where the dataset has no length, as unwrapped

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


def _name(id: SampleId) -> str:
    return f"sample {id.sample!r}" + (f" of {id.source}" if id.source else "")
