"""CSV/TSV metric tables (YOLO ``results.csv``, Lightning ``CSVLogger``, Keras ``CSVLogger``).

Headers are stripped and normalised (YOLOv5 pads them: ``      train/box_loss``).  Lightning's
CSVLogger writes train and validation metrics on separate rows of one file; a row whose only
losses are evaluation keys is an evaluation row.
"""

from __future__ import annotations

import csv
from pathlib import Path

from datacheck.history._table import Columns, Table, norm_key, to_float

__all__ = ["read_csv"]


def read_csv(path: Path, keep: set[str]) -> Table:
    """Read a CSV (or, by its name, TSV) file of metrics."""
    table = Table("csv", Columns(keep), Columns(keep))
    delimiter = "\t" if path.name.lower().endswith(".tsv") else ","
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        header = [norm_key(h.strip()) if h.strip() else "" for h in next(reader, [])]
        wanted = [(i, k) for i, k in enumerate(header) if k and table.train.wanted(k)]
        for rec in reader:
            row = {
                k: num for i, k in wanted if i < len(rec) and (num := to_float(rec[i])) is not None
            }
            table.add_row(row)
    return table
