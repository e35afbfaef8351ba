"""A scan's output folder: never read as data, one writer at a time, replaced whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import datacheck
from datacheck.errors import InputError


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "datacheck", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
    )


def test_a_scan_never_reads_its_own_report(tmp_path: Path) -> None:
    assert _cli("demo", str(tmp_path / "d")).returncode == 0
    first = _cli("scan", ".", cwd=tmp_path / "d")  # --out: ./datacheck-report, inside
    second = _cli("scan", ".", cwd=tmp_path / "d")
    assert first.returncode == second.returncode == 1
    for r in (first, second):
        assert r.stdout.startswith("scanned 5 files (1 ok, 3 flagged, 1 corrupt)"), r.stdout
    report = datacheck.load_report(tmp_path / "d" / "datacheck-report")
    out = str(tmp_path / "d" / "datacheck-report")
    assert not any(f["path"].startswith(out) for f in report.data["files"])
    assert out in report.data["ignored"]
    assert report.data["ignored_why"][out].startswith("a datacheck scan's output folder")
    # An old report folder alone is no data: one line, exit 2.
    alone = _cli("scan", out)
    assert alone.returncode == 2 and len(alone.stderr.strip().splitlines()) == 1
    assert "no data files found" in alone.stderr and "output folder" in alone.stderr


def test_an_interrupted_scans_folder_is_not_data_either(tmp_path: Path) -> None:
    data = datacheck.write_demo(tmp_path / "d")
    out = tmp_path / "d" / "partial"
    out.mkdir()
    (out / "parts").mkdir()
    # What an interrupted scan leaves: its journal (header line) and a part.
    datacheck.scan(data / "train" / "shard-001.parquet", out=tmp_path / "src")
    journal = {"journal": 1, "scan": {"inputs": [str(data)], "schema": None}}
    (out / "journal.jsonl").write_text(json.dumps(journal, separators=(",", ":")) + "\n")
    (out / "parts" / "0.parquet").write_bytes(
        (tmp_path / "src" / "quarantine.parquet").read_bytes()
    )
    with pytest.raises(InputError, match="output folder"):
        datacheck.scan(out, out=tmp_path / "o")
    report = datacheck.scan(tmp_path / "d", out=tmp_path / "o2")
    assert str(out) in report.data["ignored_why"]


def test_a_second_scan_into_a_busy_out_stops_with_one_line(tmp_path: Path) -> None:
    data = datacheck.write_demo(tmp_path / "d")
    out = tmp_path / "out"
    started, release = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def hold(result: object, done: int, total: int) -> None:
        started.set()
        release.wait(60)  # the first scan holds its --out while the second one tries

    def first() -> None:
        outcome["report"] = datacheck.scan(data, out=out, progress=hold, executor="inprocess")

    t = threading.Thread(target=first)
    t.start()
    try:
        assert started.wait(120)
        r = _cli("scan", str(data), "--out", str(out))
    finally:
        release.set()
        t.join(120)
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert f"is being written by another scan (pid {os.getpid()} on " in line
    assert "pass another --out" in line
    report = outcome["report"]
    assert isinstance(report, datacheck.Report) and report.summary["files"] == 5
    # Released when the first one ends: the next scan writes it.
    assert _cli("scan", str(data), "--out", str(out)).returncode == 1


def test_the_manifest_is_replaced_whole_and_report_json_last(tmp_path: Path) -> None:
    data = datacheck.write_demo(tmp_path / "d")
    out = tmp_path / "out"
    datacheck.scan(data, out=out)
    seen: list[tuple[bool, bool]] = []
    real_replace = os.replace

    def watch(src: object, dst: object) -> None:
        if str(dst).endswith("quarantine.parquet"):  # the moment the new manifest lands
            seen.append(((out / "report.json").exists(), Path(str(src)).suffix == ".tmp"))
        real_replace(src, dst)

    os.replace = watch  # type: ignore[assignment]
    try:
        datacheck.scan(data / "train" / "shard-001.parquet", out=out)
    finally:
        os.replace = real_replace  # type: ignore[assignment]
    assert seen == [(False, True)]  # the old report gone first; the manifest written aside
    report = datacheck.load_report(out)
    assert report.summary["files"] == 1 and len(report.findings) == 3
    assert not list(out.glob("*.tmp"))
