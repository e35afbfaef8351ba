"""Stream pipelines under :class:`~datacheck.torch.GuardedLoader`: what goes in the pipeline.

The loader itself takes a stream loader as it is (a DataLoader over an IterableDataset,
WebDataset's ``WebLoader``, MosaicML's and litdata's ``StreamingDataLoader``, a
``torchdata.nodes.Loader``). These are the few pieces a pipeline may add:

- :func:`report_errors`: WebDataset's ``handler=``; a sample that fails to read or decode is
  reported to the loader (named by its ``__key__`` and shard) and the stream goes on;
- :func:`reporting`: wraps your own decode function the same way (a generator's ``map``, a
  ``torchdata.nodes`` mapper);
- :func:`skip_quarantined` and :func:`quarantined_keys`: the next run leaves the quarantined
  samples out at the source (``wds.select``, ``Dataset.filter``, ``nodes.Filter``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from datacheck.torch._identity import SampleId
from datacheck.torch.stream._collate import Excluded, Identify, KeyFn, as_sample_id
from datacheck.torch.stream._items import Failed, Tagged, failure, report

__all__ = ["quarantined_keys", "report_errors", "reporting", "skip_quarantined"]


def report_errors(exn: BaseException) -> bool:
    """A WebDataset ``handler=``: report a sample that failed to the loader and go on.

    WebDataset's decoder names the sample (``__key__``, shard ``__url__``); a shard that
    cannot be read names its URL. Pass it wherever WebDataset takes a handler:
    ``wds.WebDataset(urls, handler=report_errors).decode("pil", handler=report_errors)``.
    An error of your own ``.map(f)`` carries no key (WebDataset does not pass the sample to
    the handler): it is recorded and counted, unnamed; decode in ``.decode()`` where you can.

    Returns:
        True (WebDataset's "skip it and continue").
    """
    key, url = getattr(exn, "key", None), getattr(exn, "url", None)
    if url is None:
        url = next((a for a in reversed(getattr(exn, "args", ())) if _is_url(a)), None)
    id = SampleId(None if url is None else str(url), str(key)) if key is not None else None
    report(failure(exn, id, None if id is not None else (f"shard {url}" if url else None)))
    return True


def _is_url(arg: Any) -> bool:
    return isinstance(arg, str) and ("/" in arg or arg.endswith((".tar", ".tgz", ".tar.gz")))


class reporting:  # noqa: N801 - used as a function
    """``fn`` as a decode stage that reports its errors instead of raising.

    ``reporting(load)(item)`` is ``load(item)`` tagged with the item's identity, or, when it
    raises one of ``catch``, a failure the loader records (and the stream goes on).

    Args:
        fn: the function that loads or decodes one item.
        key_fn: the identity of an item (its input): None: the item itself when it is a str or
            int (a path, a row number), else the loaded sample's own (``__key__``, ``key_fn=``
            of the loader).
        catch: the exceptions reported (others propagate).
    """

    def __init__(
        self,
        fn: Callable[[Any], Any],
        key_fn: KeyFn | None = None,
        catch: tuple[type[BaseException], ...] = (Exception,),
    ) -> None:
        self.fn, self.key_fn, self.catch = fn, key_fn, catch

    def _id(self, item: Any) -> SampleId | None:
        if self.key_fn is not None:
            return as_sample_id(self.key_fn(item))
        if isinstance(item, str | int | os.PathLike) and not isinstance(item, bool):
            return SampleId(None, os.fspath(item) if isinstance(item, os.PathLike) else str(item))
        return None

    def __call__(self, item: Any) -> Any:
        try:
            out = self.fn(item)
        except self.catch as exc:
            return failure(exc, self._id(item))
        id = self._id(item)
        return out if id is None else Tagged(out, id)


class skip_quarantined:  # noqa: N801 - used as a function
    """A filter predicate: False for a sample the quarantine holds (``wds.select``,
    ``datasets`` ``.filter``, ``torchdata.nodes.Filter``).

    Args:
        folder: the loader's ``quarantine=`` folder (read once, here).
        key_fn: the sample's identity, as the loader's ``key_fn=`` (None: its ``__key__`` and
            ``__url__``).
    """

    def __init__(self, folder: str | os.PathLike[str], key_fn: KeyFn | None = None) -> None:
        from datacheck.torch._quarantine import quarantined_ids

        self.excluded = Excluded(quarantined_ids(folder))
        self.identify = Identify(key_fn)

    def __call__(self, sample: Any) -> bool:
        if type(sample) is Tagged:
            return not self.excluded.holds(sample.id)
        if type(sample) is Failed:
            return True
        return not self.excluded.holds(self.identify(sample))


def quarantined_keys(folder: str | os.PathLike[str]) -> set[str]:
    """The keys of the stream samples the quarantine in ``folder`` holds (``sample`` column),
    for a filter of your own: ``wds.select(lambda s: s["__key__"] not in bad)``."""
    from datacheck.torch._quarantine import quarantined_ids

    return {i.sample for i in quarantined_ids(folder)}
