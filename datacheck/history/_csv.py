"""CSV/TSV metric tables (YOLO ``results.csv``, Lightning ``CSVLogger``, Keras ``CSVLogger``).

Headers are stripped and normalised (YOLOv5 pads them: ``      train/box_loss``).  Lightning's
CSVLogger writes train and validation metrics on separate rows of one file; a row whose only
losses are evaluation keys is an evaluation row.
"""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

from datacheck.history._table import Columns, Table, norm_key, to_float

__all__ = ["read_csv"]


def read_csv(path: Path, keep: set[str]) -> Table:
    """Read a CSV (or, by its name, TSV) file of metrics."""
    table = Table("csv", Columns(keep), Columns(keep))
    delimiter = "\t" if path.name.lower().endswith(".tsv") else ","
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        first = next(reader, [])
        headerless = bool(first) and all(to_float(h) is not None for h in first)
        if headerless:  # numbers from the first row on: the columns have no names
            header = [f"column_{i}" for i in range(1, len(first) + 1)]
            table.notes.append("no header row: the columns are column_1, column_2, ...")
        else:
            header = [norm_key(h.strip()) if h.strip() else "" for h in first]
        rows = itertools.chain([first], reader) if headerless else reader
        for rec in rows:
            row = {
                k: num
                for i, k in enumerate(header)
                if k
                and i < len(rec)
                and (num := to_float(rec[i])) is not None
                and table.train.wanted(k)
            }
            table.add_row(row)
    return table
