"""The runtime quarantine: one append-only JSON Lines file per rank.

Each line is one bad sample in one batch leaf under one check:

========  ==============  ===============================================================
column    type            meaning
========  ==============  ===============================================================
index     Int64           the sample's dataset index (what the sampler handed out); null for
                          a stream sample
sample    string          a stream sample's key, or its row in ``source``; a map-style
                          sample's key where the dataset has one; nullable
source    string          the shard, chunk or file ``sample`` is in; nullable
check     string          check name, as in the scan's ``quarantine.parquet``
severity  string          ``error`` or ``warning``, as in the scan
key       string          batch leaf path, e.g. ``image`` or ``inputs.0``
value     string          first bad value of the sample in that leaf; nullable
count     int32           bad values of the sample in that leaf
rank      int32           the process's rank (0 without torch.distributed)
epoch     int64           the epoch (``set_epoch``, or the count of passes)
step      int64           the batch's position in the epoch (0-based, sampler order)
time      datetime (UTC)  when the batch was checked
dataset   string          fingerprint of the map-style dataset the index refers to; nullable
========  ==============  ===============================================================

A batch's lines are written with one ``write`` and flushed before the batch is yielded, so a
crash (even SIGKILL) loses at most the batch in flight; a torn last line is ignored on read and
cut before the next append (``datacheck._jsonl``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeAlias

import pandas as pd

from datacheck._jsonl import JsonlWriter, read_records
from datacheck.errors import UsageError
from datacheck.torch._identity import SampleId

FILE_PATTERN = "quarantine-rank*.jsonl"
COLUMNS = (
    "index",
    "sample",
    "source",
    "check",
    "severity",
    "key",
    "value",
    "count",
    "rank",
    "epoch",
    "step",
    "time",
    "dataset",
)
_INTS = {"index": "Int64", "count": "int32", "rank": "int32", "epoch": "int64", "step": "int64"}
_TEXT = ("sample", "source", "check", "severity", "key", "value", "dataset")


def rank_file(folder: str | os.PathLike[str], rank: int) -> Path:
    """The manifest file of one rank inside ``folder``."""
    return Path(folder) / f"quarantine-rank{rank:05d}.jsonl"


class QuarantineWriter(JsonlWriter):
    """Appends one rank's records; the file is created on the first bad sample.

    Args:
        folder: the quarantine folder.
        rank: the process's rank (names the file).
        fsync: fsync after every write (else flush only).
        suffix: ``"-guard"`` names the training guard's own file beside the loader's.
    """

    def __init__(
        self, folder: str | os.PathLike[str], rank: int, fsync: bool = False, suffix: str = ""
    ) -> None:
        path = rank_file(folder, rank)
        super().__init__(path.with_name(f"{path.stem}{suffix}{path.suffix}"), fsync=fsync)


def read_quarantine(folder: str | os.PathLike[str]) -> pd.DataFrame:
    """Read every rank's runtime quarantine in ``folder`` as one DataFrame.

    Args:
        folder: the ``quarantine=`` folder a :class:`~datacheck.torch.GuardedLoader` wrote.

    Returns:
        One row per bad sample, leaf and check, with the columns ``index, sample, source,
        check, severity, key, value, count, rank, epoch, step, time, dataset`` (files written
        before ``sample``/``source``/``dataset`` existed read with them null), sorted by epoch,
        step, rank, index and sample. Empty (with those columns) when the folder is missing or
        holds no records.
    """
    rows: list[dict[str, Any]] = []
    for path in sorted(Path(folder).glob(FILE_PATTERN)):
        rows.extend(read_records(path))
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    df = df.astype(_INTS)
    for col in _TEXT:
        df[col] = df[col].astype("string")
    df["time"] = pd.to_datetime(df["time"], utc=True, format="ISO8601")
    df = df.sort_values(["epoch", "step", "rank", "index", "sample"], kind="stable")
    return df.reset_index(drop=True)


def quarantined_indices(folder: str | os.PathLike[str]) -> set[int]:
    """Dataset indices recorded in a runtime quarantine folder (every rank)."""
    return {int(i) for i in read_quarantine(folder)["index"].dropna().tolist()}


def quarantined_ids(folder: str | os.PathLike[str]) -> set[SampleId]:
    """Stream samples recorded in a runtime quarantine folder: ``(source, sample)`` of every
    record that names a sample by key (every rank)."""
    df = read_quarantine(folder)
    named = df.loc[df["sample"].notna(), ["source", "sample"]].drop_duplicates()
    return {
        SampleId(None if pd.isna(src) else str(src), str(key))
        for src, key in zip(named["source"].tolist(), named["sample"].tolist(), strict=True)
    }


IndexOf: TypeAlias = (
    Mapping[tuple[str, int], int] | Callable[[str, int], "int | None"] | pd.DataFrame
)


def indices_from_scan(
    manifest: str | os.PathLike[str] | pd.DataFrame, index_of: IndexOf
) -> set[int]:
    """Dataset indices of the samples a scan quarantined (``datacheck scan``'s manifest).

    Args:
        manifest: the scan's ``quarantine.parquet`` (path or DataFrame with ``path, row``).
        index_of: how a (file, row) maps to a dataset index: a DataFrame with columns
            ``path, row, index``, a mapping ``{(path, row): index}``, or a callable
            ``(path, row) -> index or None``. Pairs without an index are ignored.

    Returns:
        The dataset indices to exclude (pass them as ``exclude=`` to the loader).
    """
    scan = manifest if isinstance(manifest, pd.DataFrame) else pd.read_parquet(manifest)
    missing = {"path", "row"} - set(scan.columns)
    if missing:
        raise UsageError(f"scan quarantine lacks column(s) {sorted(missing)}; expected path, row")
    sites = scan.loc[scan["row"].notna(), ["path", "row"]].drop_duplicates()
    sites = sites.astype({"path": "string", "row": "int64"})
    if isinstance(index_of, pd.DataFrame):
        table = index_of.loc[index_of["index"].notna(), ["path", "row", "index"]]
        table = table.astype({"path": "string", "row": "int64"})
        return set(sites.merge(table, on=["path", "row"])["index"].astype("int64").tolist())
    pairs = zip(sites["path"].tolist(), sites["row"].tolist(), strict=True)
    if isinstance(index_of, Mapping):
        found = (index_of.get((p, r)) for p, r in pairs)
    else:
        found = (index_of(p, r) for p, r in pairs)
    return {int(i) for i in found if i is not None}
