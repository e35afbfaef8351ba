"""report.plot: figures built from real scans and a real TrainingGuard log (labels, data; no pixels)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import planted_table, write_table

import datacheck as dc
from datacheck.errors import InputError, UsageError

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def demo_report(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dc.Report:
    out = tmp_path_factory.mktemp("demo-report")
    return dc.scan(demo_dir, demo_dir / "schema.yaml", out=out, executor="inprocess")


def _labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []


def test_import_datacheck_does_not_import_matplotlib() -> None:
    code = "import sys, datacheck; assert 'matplotlib' not in sys.modules, 'matplotlib imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_by_shard_heatmap_and_totals(demo_report: dc.Report) -> None:
    fig = demo_report.plot.by_shard()
    heat, bars = fig.axes[0], fig.axes[1]
    assert heat.get_title().startswith("Findings per shard and check (4 flagged of 5 files)")
    assert heat.get_xlabel() == "check" and "shard" in heat.get_ylabel()
    assert bars.get_xlabel() == "findings (count)"
    names = [t.get_text() for t in heat.get_yticklabels()]
    checks = [t.get_text() for t in heat.get_xticklabels()]
    assert checks == ["corrupt", "extreme", "inf", "nan", "null", "out_of_range"]
    # Worst first: shard-002 and shard-003 have 4 findings each, shard-001 3, shard-004 1.
    assert names == ["shard-002.parquet", "shard-003.csv", "shard-001.parquet", "shard-004.parquet"]
    matrix = np.ma.filled(heat.get_images()[0].get_array(), 0)
    by_file = {f["path"].rsplit("/", 1)[-1]: f["sites"] for f in demo_report.data["files"]}
    for i, name in enumerate(names):
        for j, check in enumerate(checks):
            assert matrix[i, j] == sum(by_file[name].get(check, {}).values())
    assert [p.get_width() for p in bars.patches] == [4, 4, 3, 1]
    colorbar = fig.axes[2]
    assert colorbar.get_ylabel() == "findings (count)"
    assert "corrupt" in _labels(bars)


def test_by_shard_top_and_a_clean_report(demo_report: dc.Report, tmp_path: Path) -> None:
    fig = demo_report.plot.by_shard(top=2)
    assert "top 2 of 4 flagged" in fig.axes[0].get_title()
    assert len(fig.axes[0].get_yticklabels()) == 2
    with pytest.raises(UsageError, match="top=0"):
        demo_report.plot.by_shard(top=0)
    table, _ = planted_table()
    clean = table.slice(30, 40)  # rows 30..69 hold no planted fault
    (tmp_path / "d").mkdir()
    write_table(clean, tmp_path / "d" / "c.parquet", "parquet")
    report = dc.scan(tmp_path / "d", out=tmp_path / "out", executor="inprocess")
    fig = report.plot.by_shard()
    assert "no findings: all 1 files are clean" in [t.get_text() for t in fig.axes[0].texts]


def test_column_with_schema_bound_and_flagged_value(demo_report: dc.Report) -> None:
    fig = demo_report.plot.column("x0")
    ax = fig.axes[0]
    assert ax.get_xscale() == "symlog"  # the 1.5e6 value would otherwise squash the bulk
    assert "x0" in ax.get_xlabel() and "units" in ax.get_xlabel()
    assert "count" in ax.get_ylabel()
    title = ax.get_title()
    assert "4,000 values in 4 files" in title and "+Inf 1" in title and "NaN 0" in title
    assert sum(p.get_height() for p in ax.patches) == 3999  # every finite value, the +Inf aside
    labels = _labels(ax)
    assert "|x| = 100 (extreme)" in labels
    bounds = sorted(line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == "--")
    assert bounds == [-100.0, 100.0]
    marks = [line for line in ax.get_lines() if line.get_label().startswith("flagged values")]
    assert len(marks) == 1 and list(marks[0].get_xdata()) == [1.5e6]


def test_column_integer_range_rule(demo_report: dc.Report) -> None:
    ax = demo_report.plot.column("label").axes[0]
    assert ax.get_xscale() == "linear"
    assert {"min = 0 (out_of_range)", "max = 9 (out_of_range)"} <= set(_labels(ax))
    marks = [line for line in ax.get_lines() if line.get_label().startswith("flagged values")]
    assert list(marks[0].get_xdata()) == [12.0]
    heights = [p.get_height() for p in ax.patches]
    assert len(heights) == 13 and sum(heights) == 4000  # one bar per integer 0..12


def test_column_vector_column_counts_elements(demo_report: dc.Report) -> None:
    ax = demo_report.plot.column("embedding").axes[0]
    assert "24,000 values in 3 files" in ax.get_title()  # 3 Parquet shards x 1000 rows x 8
    assert "NaN 1" in ax.get_title()


def test_column_without_schema_shows_fp16_bound(tmp_path: Path) -> None:
    table, _ = planted_table()
    (tmp_path / "d").mkdir()
    write_table(table, tmp_path / "d" / "t.csv", "csv")
    report = dc.scan(tmp_path / "d", out=tmp_path / "out", executor="inprocess")
    ax = report.plot.column("b").axes[0]
    assert "|x| = 65504 (extreme)" in _labels(ax)
    assert "null 1" in ax.get_title() and "-Inf 1" in ax.get_title()
    with pytest.raises(UsageError, match="not numeric"):
        report.plot.column("name")


def test_column_unknown_name_says_did_you_mean(demo_report: dc.Report) -> None:
    with pytest.raises(
        InputError, match=r"no scanned file has a column 'lable' \(did you mean 'label'\?\)"
    ):
        demo_report.plot.column("lable")


def test_figures_are_not_registered_with_pyplot(demo_report: dc.Report) -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    demo_report.plot.by_shard()
    demo_report.plot.column("x1")
    assert plt.get_fignums() == before


# -- timeline --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def guard_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real TrainingGuard log: NaN loss at step 30, a loss spike at step 45."""
    torch = pytest.importorskip("torch")
    from datacheck.torch import TrainingGuard

    log = tmp_path_factory.mktemp("guard") / "guard.jsonl"
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    guard = TrainingGuard(model, opt, log=str(log), log_every=1, checkpoint_every=10)
    x = torch.randn(64, 4)
    y = x.sum(1, keepdim=True)
    for step in range(60):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss = loss * float("nan") if step == 30 else loss * 1000 if step == 45 else loss
        loss.backward()
        guard.step(loss)
        opt.zero_grad(set_to_none=True)
    guard.close()
    return log


def test_timeline_from_a_guard_log(demo_report: dc.Report, guard_log: Path) -> None:
    fig = demo_report.plot.timeline(guard_log)
    top, bottom = fig.axes
    assert top.get_title().startswith("Training timeline") and "guard.jsonl" in top.get_title()
    assert top.get_ylabel().startswith("loss") and bottom.get_ylabel().startswith("grad norm (L2")
    assert bottom.get_xlabel() == "optimizer step (count)"
    assert bottom.get_yscale() == "log"
    labels = _labels(top)
    assert "guard: nonfinite (1)" in labels and "guard: loss_spike (1)" in labels
    assert "non-finite loss (1)" in labels
    assert any(lbl.startswith("spike threshold: 1.5 x median loss") for lbl in labels)
    event_x = {
        line.get_label(): line.get_xdata()[0]
        for line in top.get_lines()
        if line.get_label().startswith("guard:")
    }
    assert event_x == {"guard: loss_spike (1)": 45, "guard: nonfinite (1)": 30}
    loss_line = next(line for line in top.get_lines() if line.get_label() == "loss")
    assert 30 not in list(loss_line.get_xdata()) and len(loss_line.get_xdata()) == 59


def test_timeline_reader_is_tolerant(demo_report: dc.Report, tmp_path: Path) -> None:
    from datacheck.report._plots_timeline import read_guard_log

    log = tmp_path / "hand.jsonl"
    lines = [json.dumps({"step": s, "loss": 2.0 - s / 100, "grad_norm": 1.0}) for s in range(20)]
    lines[5] = "not json at all"
    lines += ["", json.dumps({"step": 12, "event": "rollback", "loss": "nan", "grad_norm": "inf"})]
    lines.append('{"step": 21, "loss": 1.5')  # a torn last line (the job was killed mid-write)
    log.write_text("\n".join(lines))
    series, events = read_guard_log(log)
    assert len(series) == 19 and [e["kind"] for e in events] == ["rollback"]
    fig = demo_report.plot.timeline(log)
    assert "guard: rollback (1)" in _labels(fig.axes[0])
    (tmp_path / "empty.jsonl").write_text("garbage\n")
    with pytest.raises(InputError, match="no JSON record"):
        read_guard_log(tmp_path / "empty.jsonl")
    with pytest.raises(InputError):
        demo_report.plot.timeline(tmp_path / "missing.jsonl")
