"""report.plot: figures built from real scans and a real TrainingGuard log (labels, data; no pixels)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _reportkit import gate_report
from conftest import planted_table, write_table

import datacheck as dc
from datacheck.errors import InputError, UsageError
from datacheck.report._plots import WHOLE_COLOR

pytest.importorskip("matplotlib")
from matplotlib.colors import to_hex  # noqa: E402


@pytest.fixture(scope="module")
def demo_report(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dc.Report:
    out = tmp_path_factory.mktemp("demo-report")
    return dc.scan(demo_dir, demo_dir / "schema.yaml", out=out, executor="inprocess")


def _labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []


def test_import_datacheck_does_not_import_matplotlib() -> None:
    code = "import sys, datacheck; assert 'matplotlib' not in sys.modules, 'matplotlib imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_by_shard_ranks_the_demo_by_what_gates(demo_report: dc.Report) -> None:
    fig = demo_report.plot.by_shard()
    heat, bars = fig.axes[0], fig.axes[1]
    assert heat.get_title().startswith("Findings per shard and check (4 flagged of 5 files)")
    assert "1 corrupt · 0 fail whole · 3 with row errors · 0 warnings only" in heat.get_title()
    assert heat.get_xlabel() == "check" and "shard" in heat.get_ylabel()
    names = [t.get_text() for t in heat.get_yticklabels()]
    checks = [t.get_text() for t in heat.get_xticklabels()]
    # The corrupt file first (it has to be re-generated), then row errors, most first.
    assert names == ["shard-004.parquet", "shard-002.parquet", "shard-003.csv", "shard-001.parquet"]
    assert checks[0] == "corrupt" and set(checks) == {
        "corrupt",
        "extreme",
        "inf",
        "nan",
        "null",
        "out_of_range",
    }
    assert heat.get_yticklabels()[0].get_color() == WHOLE_COLOR
    band = [p for p in heat.patches if p.get_width() == len(checks)]  # across the whole row
    assert len(band) == 1 and to_hex(band[0].get_facecolor()) == WHOLE_COLOR
    assert any(t.startswith("corrupt: ArrowInvalid") for t in _texts(heat))
    assert "fp16" not in " ".join(_texts(heat)) and _texts(heat).count("2") == 2
    assert "corrupt" in _texts(bars) and bars.get_xscale() == "symlog"
    assert [t.get_text() for t in fig.legends[0].get_texts()][0].startswith("fails the whole")


def test_by_shard_errors_before_warnings_and_whole_files_first(tmp_path: Path) -> None:
    report = gate_report(tmp_path)
    fig = report.plot.by_shard()
    heat, bars = fig.axes[0], fig.axes[1]
    names = [t.get_text() for t in heat.get_yticklabels()]
    checks = [t.get_text() for t in heat.get_xticklabels()]
    # corrupt, then the file drift fails whole (1 finding), then the NaN (1 error), and only
    # then the 1,396 warnings: ranked by what gates, not by counts.
    assert names == ["bad.parquet", "drift.parquet", "nan.parquet", "warn.parquet"]
    assert checks == ["corrupt", "drift", "nan", "extreme"]
    cells = heat.get_images()[0].get_array()
    assert to_hex(cells[1, 1]) == WHOLE_COLOR  # drift: the whole-file mark, not a pale "1"
    red, amber = cells[2, 2], cells[3, 3]
    assert red[0] > 0.8 and red[1] < 0.5 and red[2] < 0.45, red  # one error: strongly red
    assert amber[0] > 0.9 and amber[1] > 0.6 and amber[2] < 0.6, amber  # warnings: amber
    assert "whole file" in _texts(heat) and "1,396w" in _texts(heat) and "1" in _texts(heat)
    assert "1 corrupt · 1 fail whole · 1 with row errors · 1 warnings only" in heat.get_title()
    assert _texts(bars) == ["corrupt", "fails whole"]
    widths = [p.get_width() for p in bars.patches if p.get_height() == pytest.approx(0.8)]
    assert 1 in widths and 1397 in widths  # the NaN's bar and the warnings' bar, both drawn
    # w's drift against the other shards is a warning: its own mark (hatched), not a count
    hatched = [p for p in heat.patches if p.get_hatch()]
    assert [(p.get_x(), p.get_y()) for p in hatched] == [(0.5, 2.5)] and "1w" in _texts(heat)


def _tick_labels_overlap(fig, ax) -> tuple[list[str], bool]:
    """The x tick labels in view, and whether any two of them touch (drawn on Agg)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # the figure is not pyplot's: draw it on Agg, as savefig does
    canvas.draw()
    renderer = canvas.get_renderer()
    lo, hi = sorted(ax.get_xlim())
    labels = [t for t in ax.get_xticklabels() if t.get_text() and lo <= t.get_position()[0] <= hi]
    boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
    touch = any(a.x1 + 2 > b.x0 for a, b in zip(boxes, boxes[1:], strict=False))
    return [t.get_text() for t in labels], touch


def test_symlog_tick_labels_do_not_overlap(demo_report: dc.Report, tmp_path: Path) -> None:
    fig = demo_report.plot.column("x0")
    texts, touch = _tick_labels_overlap(fig, fig.axes[0])
    assert fig.axes[0].get_xscale() == "symlog" and not touch, texts
    assert "0" in texts and "$10^{6}$" in texts and len(texts) >= 4
    # A shard mean 10^4 std away on a half-width panel: matplotlib's own symlog ticks put
    # -10^4 ... -1, 0, 1 ... 10^5 there, every decade, and the labels ran into each other.
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    rng = np.random.default_rng(1)
    for i in range(4):
        x = rng.normal(0, 1, 200) * (1e6 if i == 2 else 1) - (1e4 if i == 3 else 0)
        pq.write_table(pa.table({"x": x}), tmp_path / "data" / f"s{i}.parquet")
    (tmp_path / "s.yaml").write_text(
        "columns:\n  x:\n    dtype: float64\n    checks:\n"
        "    - {mean: 0.0, std: 1.0, zscore_max: .inf, max_mean_shift: 3.0, max_std_ratio: 3.0,\n"
        "       options: {check_name: reference_stats}}\n"
    )
    report = dc.scan(tmp_path / "data", tmp_path / "s.yaml", out=tmp_path / "out", progress=False)
    fig = report.plot.stats("x")
    texts, touch = _tick_labels_overlap(fig, fig.axes[0])
    assert fig.axes[0].get_xscale() == "symlog" and not touch, texts
    assert texts[0].endswith("$10^{4}$") and "0" in texts and len(texts) >= 5


def test_stats_draws_an_all_null_shard(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(5)
    for i in range(3):
        x = pa.array(rng.normal(0, 1, 100)) if i != 1 else pa.nulls(100, pa.float64())
        pq.write_table(pa.table({"x": x}), data / f"s{i}.parquet")
    schema = tmp_path / "schema.yaml"
    schema.write_text(
        "columns:\n  x:\n    dtype: float64\n    nullable: true\n    checks:\n"
        "    - {mean: 0.0, std: 1.0, zscore_max: 6.0, max_mean_shift: 3.0, max_std_ratio: 3.0,\n"
        "       options: {check_name: reference_stats}}\n"
    )
    report = dc.scan(data, schema, out=tmp_path / "out", executor="inprocess", progress=False)
    assert {
        f["path"].rsplit("/", 1)[-1] for f in report.data["files"] if f["sites"].get("drift")
    } == {"s1.parquet"}
    fig = report.plot.stats("x")
    mean_ax, std_ax = fig.axes
    names = [t.get_text() for t in mean_ax.get_yticklabels()]
    assert names == ["s0.parquet", "s1.parquet (drift)", "s2.parquet"]
    assert "1 of 3 shards flagged" in fig.get_suptitle()
    for ax in (mean_ax, std_ax):  # the all-null shard is drawn, at its row
        assert _texts(ax) == ["all null: no value"]
        (mark,) = [ln for ln in ax.get_lines() if ln.get_marker() == "X"]
        assert list(mark.get_ydata()) == [1.0]


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
    # the x1000 loss scales the gradient too: a grad-norm spike beside the loss spike (the end
    # of the loss excursion three steps later is routine, not drawn)
    assert event_x == {
        "guard: loss_spike (1)": 45,
        "guard: grad_spike (1)": 45,
        "guard: nonfinite (1)": 30,
    }
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
