"""Hugging Face ``datasets`` streams: each example named by its shard and row, decoded one by one.

An ``IterableDataset`` (``load_dataset(..., streaming=True)``, ``Dataset.to_iterable_dataset()``)
runs a chain of examples iterables, innermost the one reading the shards. In the process that
iterates it (a DataLoader worker, or the main process), on a private copy of the chain:

- the innermost iterable's reader is wrapped so that every row leaves it as a one-row table (or
  example) keyed ``datacheck:<shard>#<row>``: the data file (``load_dataset``) or the shard's
  fingerprint (``to_iterable_dataset``), and the row in it. Keys travel with their rows through
  ``filter``, ``shuffle``, ``take``/``skip`` and formatting (the chain carries them, row by row: a
  chain that mixes rows into one table under one key in its Arrow path, a shuffle buffer, is
  iterated through its Python path instead). ``map`` numbers its output rows afresh: rows after
  a ``map`` have no name here (None; give the loader a ``key_fn`` on an id column).
- the last step, formatting (where ``Image``/``Audio`` columns decode), runs per example inside a
  ``try``, as ``IterableDataset.__iter__`` runs it otherwise, so a row that fails to decode is a
  failure and the stream goes on. An error raised inside the chain (your ``map`` function, a
  shard that cannot be read) still ends that process's stream (a generator that raised).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import get_worker_info

from datacheck.torch._identity import SampleId
from datacheck.torch.stream._collate import Excluded, Identify
from datacheck.torch.stream._items import Skipped, Tagged, failure

KEY_PREFIX = "datacheck:"


def is_hf_iterable(dataset: Any) -> bool:
    """Whether ``dataset`` is a ``datasets.IterableDataset`` (without importing datasets)."""
    import sys

    mod = sys.modules.get("datasets.iterable_dataset")
    cls = getattr(mod, "IterableDataset", None)
    return isinstance(cls, type) and isinstance(dataset, cls)


def _source(kwargs: dict[str, Any], key: Any) -> str:
    """The shard a reader's key points into: its data file, or its shard's fingerprint."""
    shard = getattr(key, "original_shard_id", key[0] if isinstance(key, tuple) else key)
    files = kwargs.get("base_files") or kwargs.get("files")
    if isinstance(files, list | tuple) and isinstance(shard, int) and 0 <= shard < len(files):
        return str(files[shard])
    shards = kwargs.get("shards")
    if isinstance(shards, list | tuple) and isinstance(shard, int) and 0 <= shard < len(shards):
        return f"dataset {getattr(shards[shard], '_fingerprint', shard)}"
    return f"shard {shard}"


def _tables(read: Callable[..., Iterator[Any]], **kwargs: Any) -> Iterator[tuple[str, Any]]:
    rows: dict[str, int] = {}
    for key, table in read(**kwargs):
        source = _source(kwargs, key)
        start = rows.get(source, 0)
        rows[source] = start + len(table)
        for i in range(len(table)):
            yield f"{KEY_PREFIX}{source}#{start + i}", table.slice(i, 1)


def _examples(read: Callable[..., Iterator[Any]], **kwargs: Any) -> Iterator[tuple[str, Any]]:
    rows: dict[str, int] = {}
    for key, example in read(**kwargs):
        source = _source(kwargs, key)
        row = rows.get(source, 0)
        rows[source] = row + 1
        yield f"{KEY_PREFIX}{source}#{row}", example


def _tagged(node: Any) -> Any:
    """A copy of the chain under ``node`` whose readers key every row (see the module doc)."""
    node = copy.copy(node)
    if hasattr(node, "ex_iterable"):
        node.ex_iterable = _tagged(node.ex_iterable)
    elif isinstance(getattr(node, "ex_iterables", None), list):
        node.ex_iterables = [_tagged(n) for n in node.ex_iterables]
    elif hasattr(node, "generate_tables_fn"):
        node.generate_tables_fn = functools.partial(_tables, node.generate_tables_fn)
    elif hasattr(node, "generate_examples_fn"):
        node.generate_examples_fn = functools.partial(_examples, node.generate_examples_fn)
    return node


def _id(key: Any) -> SampleId | None:
    text = str(key)
    if not text.startswith(KEY_PREFIX) or f"_{KEY_PREFIX}" in text:
        return None  # not ours, or a row made from several (batched map)
    source, _, row = text[len(KEY_PREFIX) :].rpartition("#")
    return SampleId(source, row) if source and row.isdigit() else None


def hf_items(
    ds: Any,
    catch: tuple[type[BaseException], ...],
    excluded: Excluded,
    identify: Identify | None = None,
) -> Iterator[Any]:
    """The examples of ``ds`` as ``IterableDataset`` yields them in this process, tagged with
    their shard and row; a row that fails to format/decode is a failure (see the module doc),
    named by the user's ``key_fn`` on the row as stored when there is one."""
    from datasets.iterable_dataset import shift_ex_examples_rngs

    ds = copy.copy(ds)
    ds._ex_iterable = _tagged(ds._ex_iterable)
    ex_iterable = ds._prepare_ex_iterable_for_iteration()
    info = get_worker_info()
    if info is not None:  # split the shards between workers as IterableDataset._iter_pytorch
        mine = ex_iterable.split_shard_indices_by_worker(
            num_shards=info.num_workers, index=info.id, contiguous=False
        )
        if not mine:
            return
        ex_iterable = ex_iterable.shard_data_sources(
            num_shards=info.num_workers, index=info.id, contiguous=False
        )
        ex_iterable = shift_ex_examples_rngs(ex_iterable=ex_iterable, value=info.id)
    by_key = identify is not None and identify.key_fn is not None and bool(excluded)
    for key, make in _rows(ds, ex_iterable):
        id = _id(key)
        if by_key:  # the quarantine names samples by the user's key: read it as stored
            id = _stored_id(make, identify) or id  # type: ignore[arg-type]
        if excluded.holds(id):
            yield Skipped(id)  # type: ignore[arg-type]
            continue
        try:
            example = make()
        except catch as exc:
            if identify is not None and identify.key_fn is not None:
                id = _stored_id(make, identify) or id
            yield failure(exc, id, None if id is not None else "a datasets example")
            continue
        yield example if id is None else Tagged(example, id)


def _stored_id(make: Any, identify: Identify) -> SampleId | None:
    """``key_fn`` on the row a failed thunk was formatting, as stored (nothing decoded)."""
    raw: Any = make.args[0] if isinstance(make, functools.partial) and make.args else None
    if raw is not None and hasattr(raw, "to_pylist"):  # a one-row table
        raw = raw.to_pylist()[0]
    try:
        return identify(raw)
    except Exception:  # the key cannot be read either: the shard and row name it
        return None


_KEEP_ROWS = frozenset(
    {
        "ArrowExamplesIterable",
        "ExamplesIterable",
        "RebatchedArrowExamplesIterable",
        "FormattedExamplesIterable",
        "SelectColumnsIterable",
        "StepExamplesIterable",
        "SkipExamplesIterable",
        "TakeExamplesIterable",
        "RepeatExamplesIterable",
    }
)
"""Examples iterables whose Arrow path keeps each row's key (one-row tables in, the same out).
Others (a shuffle buffer, a map, a filter) mix rows into tables under one key there, so the
examples then take the Python path, where every row keeps its own key."""


def _arrow_keeps_rows(node: Any) -> bool:
    while node is not None:
        if type(node).__name__ not in _KEEP_ROWS:
            return False
        node = getattr(node, "ex_iterable", None)
    return True


def _rows(ds: Any, ex_iterable: Any) -> Iterator[tuple[Any, Callable[[], Any]]]:
    """(key, formatting thunk) of each row: the thunk runs the step that may fail alone."""
    from datasets.formatting import TensorFormatter, get_formatter
    from datasets.iterable_dataset import FormattedExamplesIterable

    formatting = ds._formatting
    arrow = formatting and (ex_iterable.iter_arrow or formatting.is_table)
    if arrow and (formatting.is_table or _arrow_keeps_rows(ex_iterable)):
        named = _arrow_keeps_rows(ex_iterable)  # a table format mixing rows names none
        formatter = get_formatter(formatting.format_type, features=ds.features)
        for key, table in ex_iterable.iter_arrow():
            yield key if named else None, functools.partial(formatter.format_row, table)
        return
    if not isinstance(ex_iterable, FormattedExamplesIterable):
        for key, example in ex_iterable:
            yield key, functools.partial(_same, example)
        return
    fmt, inner = ex_iterable, ex_iterable.ex_iterable
    features = fmt.features if fmt.features and not inner.is_typed else None
    kind = fmt.formatting.format_type if fmt.formatting and not fmt.formatting.is_table else None
    formatter = get_formatter(kind, features=features, token_per_repo_id=fmt.token_per_repo_id)
    tensorize = formatter.recursive_tensorize if isinstance(formatter, TensorFormatter) else None
    for key, example in inner:
        yield key, functools.partial(_format, example, features, tensorize, fmt.token_per_repo_id)


def _same(example: Any) -> Any:
    return example


def _format(example: Any, features: Any, tensorize: Any, tokens: Any) -> Any:
    """What ``FormattedExamplesIterable.__iter__`` does to one example (features, then tensors)."""
    from datasets.iterable_dataset import _apply_feature_types_on_example

    if features is not None:
        example = _apply_feature_types_on_example(example, features, token_per_repo_id=tokens)
    return tensorize(example) if tensorize is not None else example
