"""Dataset metadata of the wrong shape (found by tests/fuzz): an MDS ``index.json`` or a Hugging
Face ``state.json`` holding values of the wrong type, or JSON nested past the C stack, makes
the shard ``corrupt`` or the folder plain files, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _mediakit import write_hf_split, write_mds

import datacheck


def scan(path: Path) -> datacheck.Report:
    return datacheck.scan(str(path), executor="inprocess", workers=1)


def _edit_index(folder: Path, key: str, value: object) -> None:
    index = json.loads((folder / "index.json").read_text())
    index["shards"][0][key] = value
    (folder / "index.json").write_text(json.dumps(index))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("column_names", ["image", -1, "score"], "column_names[1] is -1"),
        ("column_names", 7, "column_names is int, not a list"),
        ("column_encodings", ["jpeg", None, "float32"], "column_encodings[1] is None"),
        ("column_sizes", [None, "8", 4], "column_sizes[1] is '8'"),
        ("column_sizes", [None, -8, 4], "column_sizes[1] is -8"),
    ],
)
def test_mds_columns_of_the_wrong_type_are_corrupt(
    key: str, value: object, message: str, tmp_path: Path
) -> None:
    folder = write_mds(tmp_path / "mds", n=4, hashes=())
    _edit_index(folder, key, value)
    (entry,) = scan(folder).data["files"]
    assert entry["status"] == "corrupt" and message in entry["error"], entry["error"]


def test_hf_state_naming_a_file_by_a_list(tmp_path: Path) -> None:
    folder = write_hf_split(tmp_path / "train", n=4, files=1)
    state = json.loads((folder / "state.json").read_text())
    state["_data_files"][0]["filename"] = []
    (folder / "state.json").write_text(json.dumps(state))
    files = {Path(f["path"]).name: f for f in scan(folder).data["files"]}
    entry = files["data-00000-of-00001.arrow"]
    assert entry["format"] == "arrow"  # no longer a split's data: read as a plain Arrow stream


def test_index_nested_past_the_stack_is_no_index(tmp_path: Path) -> None:
    folder = write_mds(tmp_path / "mds", n=4, hashes=())
    (folder / "index.json").write_text('{"shards": ' + "[" * 200_000 + "]" * 200_000 + "}")
    report = scan(folder)
    shard = next(f for f in report.data["files"] if f["path"].endswith(".mds"))
    assert shard["status"] == "ok" and shard["rows"] == 4  # the offsets alone are checked
