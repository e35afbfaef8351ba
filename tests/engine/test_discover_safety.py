"""Discovery opens regular files only, and follows no symlink out of the input folders."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datacheck
from datacheck.engine._discover import discover_files
from datacheck.errors import InputError


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    pq.write_table(pa.table({"x": [1.0, 2.0]}), root / "ok.parquet")
    return root


def test_a_fifo_in_the_tree_is_ignored_with_the_reason_and_never_opened(data: Path) -> None:
    os.mkfifo(data / "pipe.csv")  # opening it for reading would block forever
    report = datacheck.scan(data, out=data.parent / "out", executor="inprocess")
    fifo = str(data / "pipe.csv")
    assert report.data["ignored"] == [fifo]
    assert report.data["ignored_why"] == {fifo: "a FIFO: only regular files are read"}
    assert report.summary["files"] == 1


def test_a_fifo_named_explicitly_is_not_opened_either(data: Path) -> None:
    os.mkfifo(data / "pipe.parquet")
    files, ignored, why = discover_files([str(data / "pipe.parquet"), str(data / "ok.parquet")])
    assert [f for f, _ in files] == [str(data / "ok.parquet")]
    assert why == {str(data / "pipe.parquet"): "a FIFO: only regular files are read"}
    with pytest.raises(InputError, match="a FIFO"):
        discover_files([str(data / "pipe.parquet")])


def test_a_socket_is_ignored(data: Path) -> None:
    path = str(data / "s.jsonl")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(path)
        _, ignored, why = discover_files([str(data)])
    assert why == {path: "a socket: only regular files are read"}


def test_a_symlink_out_of_the_input_folder_is_not_followed_unless_asked(
    data: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("user,password\nroot,hunter2\n")
    (data / "passwd.csv").symlink_to(secret)
    (data / "inside.parquet").symlink_to(data / "ok.parquet")  # inside the root: read
    report = datacheck.scan(data, out=tmp_path / "out", executor="inprocess")
    link = str(data / "passwd.csv")
    assert report.data["ignored_why"] == {link: _REASON}
    assert sorted(Path(p).name for p in report.files["path"]) == ["inside.parquet", "ok.parquet"]
    followed = datacheck.scan(data, out=tmp_path / "o2", executor="inprocess", follow_symlinks=True)
    assert link in set(followed.files["path"]) and followed.data["ignored_why"] == {}
    named = datacheck.scan(link, out=tmp_path / "o3", executor="inprocess")  # named: read
    assert list(named.files["path"]) == [link]


_REASON = "a symlink leading outside the scanned folders (--follow-symlinks to scan it)"


def test_symlinked_folders_are_listed_not_dropped_and_cycles_end(
    data: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    pq.write_table(pa.table({"y": [float("nan")]}), other / "more.parquet")
    (data / "linked").symlink_to(other, target_is_directory=True)
    (other / "loop").symlink_to(other, target_is_directory=True)
    files, ignored, why = discover_files([str(data)])
    assert why == {
        str(data / "linked"): "a symlink to a folder, not followed (--follow-symlinks to scan it)"
    }
    files, ignored, why = discover_files([str(data)], follow_symlinks=True)
    assert sorted(Path(f).name for f, _ in files) == ["more.parquet", "ok.parquet"]


def test_a_reader_error_quotes_only_a_short_escaped_excerpt_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    secret = "root:x:0:0:root:/root:/bin/bash\x1b[31m-and-more-secret-text"
    path.write_text(f"a,b\n1,2\n{secret}\n3,4\n5,6\n")
    report = datacheck.scan(path, out=tmp_path / "out", executor="inprocess")
    (bad,) = report.findings.itertuples()  # a line that does not parse: a row, not the file
    assert (bad.check, bad.row) == ("corrupt", 1)
    assert bad.value.startswith("line 3: 1 field, expected 2 (delimiter ','): 'root:x:0")
    assert "secret" not in bad.value and "\x1b" not in bad.value and bad.value.endswith("...'")


def test_a_file_name_that_is_not_utf8_is_reported_corrupt_under_an_escaped_name(
    data: Path,
) -> None:
    raw = os.fsencode(str(data)) + b"/bad\xff.parquet"
    with open(raw, "wb") as fh:
        fh.write((data / "ok.parquet").read_bytes())
    report = datacheck.scan(data, out=data.parent / "out", executor="inprocess")
    files = report.files.set_index("path")
    shown = str(data) + "/bad\\xff.parquet"
    assert files.loc[shown, "status"] == "corrupt"
    assert files.loc[shown, "error"].startswith("the file name is not valid UTF-8")
    assert files.loc[str(data / "ok.parquet"), "status"] == "ok"
    assert report.findings["path"].tolist() == [shown]
