"""Every view reads ``quarantine.parquet`` a batch at a time (``report/_manifest.py``): the
same answers as reading it whole, in bounded memory, stopping early where it can."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import datacheck as dc
from datacheck.errors import UsageError
from datacheck.findings import read_manifest
from datacheck.report import _data
from datacheck.report._manifest import count_by, iter_manifest
from datacheck.report._samples import first_per, sample_findings


def _mixed_dataset(root: Path) -> Path:
    """Three shards: many NaN in one, warnings (fp16 overflow, nulls) and Inf in others."""
    root.mkdir()
    rng = np.random.default_rng(3)
    for i in range(3):
        n = 150_000
        a = rng.standard_normal(n)
        b = rng.standard_normal(n).astype(np.float32)
        if i == 0:
            a[::3] = np.nan  # 50,000 NaN: several manifest batches
        if i == 1:
            b[[5, 70_000, 149_999]] = 1e5  # warnings (fp16 overflow), late in the file
            a[[1, 2]] = np.inf
        mask = np.zeros(n, dtype=bool)
        mask[[10, 140_000]] = i == 2
        pq.write_table(
            pa.table({"a": a, "b": pa.array(b, mask=mask)}),
            root / f"part-{i}.parquet",
            row_group_size=40_000,
        )
    return root


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dc.Report:
    tmp = tmp_path_factory.mktemp("m")
    data = _mixed_dataset(tmp / "data")
    return dc.scan(data, out=tmp / "out", executor="inprocess")


def _whole(report: dc.Report) -> pa.Table:
    return read_manifest(report.manifest_path)


@pytest.mark.parametrize("batch_rows", [1, 7, 4096, 1 << 20])
def test_batches_hold_every_finding_once_in_order(report: dc.Report, batch_rows: int) -> None:
    if batch_rows == 1:  # one row at a time over 50k rows is slow; a slice of the file
        columns = ["path", "row"]
        batches = iter_manifest(report.manifest_path, columns, batch_rows=1)
        got = pa.concat_tables(next(batches) for _ in range(300))
        assert got.equals(_whole(report).select(columns).slice(0, 300))
        return
    got = pa.concat_tables(
        iter_manifest(report.manifest_path, _whole(report).column_names, batch_rows=batch_rows)
    )
    assert got.equals(_whole(report))


def test_filters_and_row_group_pruning_agree_with_a_whole_read(report: dc.Report) -> None:
    whole = _whole(report)
    for where in (
        {"check": ["inf"]},
        {"check": ["null", "extreme"]},
        {"path": [whole["path"][0].as_py()]},
    ):
        ((col, wanted),) = where.items()
        expect = whole.filter(pc.is_in(whole[col], pa.array(wanted)))
        got = pa.concat_tables(iter_manifest(report.manifest_path, whole.column_names, where))
        assert got.equals(expect)
    assert list(iter_manifest(report.manifest_path, ["row"], {"check": ["no-such-check"]})) == []


def test_counts_agree_with_arrow_group_by(report: dc.Report) -> None:
    whole = _whole(report).filter(pc.is_valid(_whole(report)["row"]))
    keys = ["column", "check", "severity"]
    expect = {
        tuple(r[k] for k in keys): r["count_all"]
        for r in whole.group_by(keys).aggregate([([], "count_all")]).to_pylist()
    }
    assert count_by(report.manifest_path, keys, rows_only=True) == expect
    assert sum(count_by(report.manifest_path, ["path"]).values()) == whole.num_rows


@pytest.mark.parametrize(("per", "k"), [("check", 1), ("check", 5), ("path", 3), ("path", 50)])
def test_samples_equal_the_whole_manifest_pick(report: dc.Report, per: str, k: int) -> None:
    """What the streamed pick returns is what picking over the whole manifest returned:
    errors first, then manifest order (the warnings come late in their file)."""
    expect = first_per(_whole(report), per, k).to_pylist()
    expect.sort(key=lambda r: (str(r[per]), r["severity"] != "error"))
    assert sample_findings(report, per, k) == expect


def test_samples_stop_reading_once_every_check_has_its_k(
    report: dc.Report, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first 5 NaN findings are in the first batch: with the other checks left out, that
    batch is all that is read; with them, reading goes on to the file that holds them."""
    from datacheck.report import _manifest

    read = []
    real = _manifest.iter_manifest

    def counting(*args, **kwargs):
        for table in real(*args, **kwargs):
            read.append(table.num_rows)
            yield table

    monkeypatch.setattr(_manifest, "iter_manifest", counting)
    monkeypatch.setattr(_manifest, "BATCH_ROWS", 1000)
    assert len(sample_findings(report, "check", 5, exclude=("inf", "extreme", "null"))) == 5
    assert read == [1000]
    read.clear()
    assert len(sample_findings(report, "check", 5)) == 5 + 2 + 3 + 2
    assert sum(read) == _whole(report).num_rows


def test_findings_refuses_past_its_limit_and_iter_findings_streams(
    report: dc.Report, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = len(report.findings)
    assert sum(len(df) for df in report.iter_findings(batch_rows=10_000)) == n
    assert all(len(df) <= 10_000 for df in report.iter_findings(batch_rows=10_000))
    nan = pd_concat(report.iter_findings(check="nan"))
    assert set(nan["check"]) == {"nan"} and len(nan) == report.summary["sites"]["nan"]["error"]
    with pytest.raises(UsageError, match="iter_findings"):
        list(report.iter_findings(chek="nan"))
    monkeypatch.setattr(_data, "FINDINGS_LIMIT", n - 1)
    with pytest.raises(UsageError, match=f"{n:,} findings.*iter_findings"):
        _ = report.findings


def pd_concat(frames):
    import pandas as pd

    return pd.concat(list(frames), ignore_index=True)


@pytest.mark.slow
def test_views_of_a_huge_manifest_stay_within_a_small_arrow_peak(tmp_path: Path) -> None:
    """2**22 NaN findings (a 40 KB Parquet): the terminal summary, tolerance, HTML samples,
    worst columns, column-level findings and iter_findings peak under 128 MB of Arrow memory (a batch
    of iter_findings as pandas; the peak does not grow with the findings); reading the
    manifest whole takes more (checked in the same child, as the oracle)."""
    data = tmp_path / "nan.parquet"
    pq.write_table(pa.table({"x": np.full(1 << 22, np.nan, np.float32)}), data)
    out = tmp_path / "out"
    dc.scan(data, out=out, executor="inprocess")
    script = textwrap.dedent(
        f"""
        import pyarrow as pa, datacheck as dc
        from datacheck.report._samples import sample_findings
        from datacheck.report._manifest import count_by
        from datacheck.report._gate import _row_sites
        from datacheck.report._plots_column import column_level_findings
        r = dc.load_report({str(out)!r})
        pool = pa.default_memory_pool()
        assert len(sample_findings(r, "check", 5)) == 5
        assert len(sample_findings(r, "path", 3)) == 3
        assert _row_sites(r.manifest_path) == {{("x", "nan"): {{"error": 1 << 22}}}}
        assert count_by(r.manifest_path, ["column"]) == {{("x",): 1 << 22}}
        assert column_level_findings(r) == []
        assert sum(len(df) for df in r.iter_findings()) == 1 << 22
        streamed = pool.max_memory()
        import pyarrow.parquet as pq
        pq.read_table(r.manifest_path)
        print(streamed, pool.max_memory())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    streamed, whole = map(int, done.stdout.split())
    assert streamed <= 128 << 20 < whole, (streamed, whole)
