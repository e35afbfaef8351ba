"""report.html: self-contained, its numbers equal report.json, and it renders in headless Chromium."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import datacheck as dc

pytest.importorskip("matplotlib")
CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="headless browser check needs Debian's chromium (apt-get install -y chromium)",
)


class _Cells(HTMLParser):
    """Collects what the tests compare: tables' data-value cells, rows, images, and links."""

    def __init__(self) -> None:
        super().__init__()
        self.table: str | None = None
        self.row: dict[str, str] = {}
        self.rows: dict[str, list[dict[str, str]]] = {}
        self.imgs: list[str] = []
        self.urls: list[str] = []
        self.tags: list[str] = []
        self.verdict: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]
        if tag == "table":
            self.table = a.get("id")
            self.rows[self.table or ""] = []
        elif tag == "tr":
            self.row = {k: v or "" for k, v in attrs if k in ("data-path", "data-check", "class")}
            self.rows[self.table or ""].append(self.row)
        elif tag == "td" and "data-field" in a:
            self.row[a["data-field"] or ""] = a.get("data-value") or ""
        elif tag == "img":
            self.imgs.append(a.get("src") or "")
        elif tag == "span" and a.get("id") == "verdict":
            self.verdict = a.get("data-value")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.table = None


def _parse(text: str) -> _Cells:
    cells = _Cells()
    cells.feed(text)
    return cells


@pytest.fixture(scope="module")
def demo_report(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dc.Report:
    out = tmp_path_factory.mktemp("demo-report")
    return dc.scan(demo_dir, demo_dir / "schema.yaml", out=out, executor="inprocess")


@pytest.fixture(scope="module")
def page(demo_report: dc.Report) -> Path:
    return demo_report.write_html()


def _assert_matches_report_json(cells: _Cells, report_dir: Path) -> None:
    doc = json.loads((report_dir / "report.json").read_text())
    s = doc["summary"]
    (summary,) = [r for r in cells.rows["summary"] if "files" in r]
    assert {k: int(v) for k, v in summary.items() if k != "class"} == {
        "files": s["files"],
        "rows": s["rows"],
        "bytes": s["bytes"],
        **s["status"],
    }
    checks = {r["data-check"]: r for r in cells.rows["checks"] if "data-check" in r}
    assert set(checks) == set(s["sites"])
    for check, by_sev in s["sites"].items():
        assert int(checks[check]["errors"]) == by_sev.get("error", 0)
        assert int(checks[check]["warnings"]) == by_sev.get("warning", 0)
        assert int(checks[check]["values"]) == s["values"][check]
    files = {r["data-path"]: r for r in cells.rows["files"] if "data-path" in r}
    assert set(files) == {f["path"] for f in doc["files"]}
    for f in doc["files"]:
        row = files[f["path"]]
        assert row["class"] == f["status"]
        assert int(row["rows"]) == f["rows"] and int(row["bytes"]) == f["bytes"]
        for check, n in f["counts"].items():
            assert int(row[f"n_{check}"]) == n
    assert cells.verdict == str(s["exit_code"])


def test_page_numbers_match_report_json(page: Path, demo_report: dc.Report) -> None:
    _assert_matches_report_json(_parse(page.read_text()), demo_report.dir)


def test_page_is_self_contained(page: Path) -> None:
    text = page.read_text()
    cells = _parse(text)
    assert all(u.startswith("data:image/png;base64,") for u in cells.urls), cells.urls[:3]
    assert "script" not in cells.tags and "link" not in cells.tags
    assert "http://" not in text and "https://" not in text and "@import" not in text
    # findings per shard + the 3 columns with the most findings
    assert len(cells.imgs) == 4
    assert 'alt="findings per shard and check"' in text


def test_repr_html_is_a_fragment_with_the_summary(demo_report: dc.Report) -> None:
    fragment = demo_report._repr_html_()
    assert "<html" not in fragment and fragment.startswith('<div class="dc">')
    cells = _parse(fragment)
    (summary,) = [r for r in cells.rows["summary"] if "files" in r]
    assert summary["flagged"] == "3" and summary["corrupt"] == "1"
    assert {r["data-check"] for r in cells.rows["checks"] if "data-check" in r} == set(
        demo_report.summary["sites"]
    )
    assert cells.verdict == "1"
    assert not cells.imgs  # the notebook view stays light: plots are a call away


def test_cli_scan_html_and_report_subcommand(demo_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "datacheck",
        "scan",
        str(demo_dir),
        "--schema",
        str(demo_dir / "schema.yaml"),
        "--out",
        str(out),
        "--html",
        "--format",
        "json",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["files"] == 5  # stdout stays pure JSON
    assert json.loads(proc.stdout)["html"] == str(out / "report.html")
    _assert_matches_report_json(_parse((out / "report.html").read_text()), out)
    text = subprocess.run(cmd[:-2], capture_output=True, text=True, timeout=120)
    assert text.stdout.splitlines()[-1] == f"html:       {out / 'report.html'}", text.stdout
    (out / "report.html").unlink()
    dest = tmp_path / "page.html"
    cmd = [sys.executable, "-m", "datacheck", "report", str(out), "--html-out", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr  # exits like the scan it shows
    assert "scanned 5 files (1 ok, 3 flagged, 1 corrupt)" in proc.stdout
    assert f"html:       {dest}" in proc.stdout and dest.exists()
    proc = subprocess.run(
        [sys.executable, "-m", "datacheck", "report", str(tmp_path / "nope"), "--html"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "no such folder" in proc.stderr


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@needs_chromium
def test_chromium_renders_the_page_with_the_report_numbers(
    page: Path, demo_report: dc.Report, tmp_path: Path
) -> None:
    proc = _chromium(tmp_path, "--dump-dom", page.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = _parse(proc.stdout)
    _assert_matches_report_json(cells, demo_report.dir)
    assert len(cells.imgs) == 4


@needs_chromium
def test_chromium_screenshot_shows_the_plots(page: Path, tmp_path: Path) -> None:
    import matplotlib.image as mpimg
    import numpy as np

    shot = tmp_path / "shot.png"
    proc = _chromium(
        tmp_path,
        "--hide-scrollbars",
        "--window-size=1200,1800",
        f"--screenshot={shot}",
        page.as_uri(),
    )
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    rgb = (mpimg.imread(shot)[..., :3] * 255).round()
    assert rgb.shape[:2] == (1800, 1200)
    # The histogram bars' blue (#4c72b0) comes only from the embedded PNGs: they decoded.
    blue = np.all(np.abs(rgb - [0x4C, 0x72, 0xB0]) <= 3, axis=-1).sum()
    assert blue > 5000, blue


# -- a report that holds every check (value, row, column and file level) ---------------------

EVERY_CHECK_SCHEMA = """schema_type: dataframe
columns:
  x:
    dtype: float64
    nullable: false
    checks:
      - options: {check_name: finite}
      - {mean: 0.0, std: 1.0, zscore_max: 6.0, max_mean_shift: 3.0, max_std_ratio: 3.0,
         options: {check_name: reference_stats}}
  z:
    dtype: float64
    checks:
      - {mean: 0.0, std: 1.0, max_mean_shift: 0.5, max_std_ratio: 2.0,
         options: {check_name: normalized}}
  f:
    dtype: float64
    checks:
      - options: {check_name: fp16_safe}
  label:
    dtype: int64
    checks:
      - {min_value: 0, max_value: 9, options: {check_name: in_range}}
"""


def write_every_check(root: Path) -> tuple[Path, Path]:
    """Shards holding a finding of every check: s2 scaled x1000 (drift), z never
    standardised (unnormalized), s1's label as float (schema), s3 with NaN, Inf, a null, an
    out-of-range label and an fp16 overflow, s4 truncated (corrupt)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = root / "data"
    data.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(4):
        x, z, f = rng.normal(0, 1, 200), rng.normal(5, 1, 200), rng.normal(0, 1, 200)
        label = rng.integers(0, 10, 200)
        x *= 1000 if i == 2 else 1
        null = np.zeros(200, bool)
        if i == 3:
            x[3], x[4], null[5], label[6], f[7] = np.nan, np.inf, True, 12, 1e6
        cols = {
            "x": pa.array(x, mask=null),
            "z": z,
            "f": f,
            "label": label.astype(np.float64) if i == 1 else label,
        }
        pq.write_table(pa.table(cols), data / f"s{i}.parquet")
    (data / "s4.parquet").write_bytes((data / "s0.parquet").read_bytes()[:300])
    schema = root / "schema.yaml"
    schema.write_text(EVERY_CHECK_SCHEMA)
    return data, schema


@pytest.fixture(scope="module")
def every_check(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    root = tmp_path_factory.mktemp("every-check")
    data, schema = write_every_check(root)
    out = root / "out"
    cmd = [sys.executable, "-m", "datacheck", "scan", str(data), "--schema", str(schema)]
    proc = subprocess.run(
        [*cmd, "--out", str(out), "--html"], capture_output=True, text=True, timeout=120
    )
    return out, proc


def test_every_check_scan_html_exits_1_with_its_summary(
    every_check: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, proc = every_check
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""
    assert "scanned 5 files (0 ok, 4 flagged, 1 corrupt)" in proc.stdout
    report = dc.load_report(out)
    tabular = {"nan", "inf", "null", "extreme", "out_of_range", "corrupt", "schema", "drift"}
    assert set(report.summary["sites"]) == tabular | {"unnormalized", "fp16_safe"}


def test_every_check_page_matches_report_json(
    every_check: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = every_check
    cells = _parse((out / "report.html").read_text())
    _assert_matches_report_json(cells, out)
    # findings per shard, 3 distributions, the per-shard statistics of the 3 drifted columns
    assert len(cells.imgs) == 7
    text = (out / "report.html").read_text()
    assert 'alt="statistics of x per shard"' in text and 'alt="statistics of z per shard"' in text


def test_every_check_plots_draw_drift_as_shard_statistics(
    every_check: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = every_check
    report = dc.load_report(out)
    for col in ("x", "z", "f", "label"):
        report.plot.column(col)  # column-level findings hold messages, not values
    fig = report.plot.stats("x")
    mean_ax, std_ax = fig.axes
    names = [t.get_text() for t in mean_ax.get_yticklabels()]
    assert names == ["s0.parquet", "s1.parquet", "s2.parquet (drift)", "s3.parquet"]
    profile = json.loads((out / "profile.json").read_text())["files"]
    paths = sorted(p for p in profile if "x" in profile[p])
    means = mean_ax.collections[-1].get_offsets()[:, 0]
    assert list(means) == pytest.approx([profile[p]["x"]["mean"] for p in paths])
    stds = std_ax.collections[-1].get_offsets()[:, 0]
    assert list(stds) == pytest.approx([profile[p]["x"]["std"] for p in paths])


@needs_chromium
def test_chromium_renders_every_check_with_the_report_numbers(
    every_check: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    out, _ = every_check
    proc = _chromium(tmp_path, "--dump-dom", (out / "report.html").as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = _parse(proc.stdout)
    _assert_matches_report_json(cells, out)
    assert len(cells.imgs) == 7


def test_every_check_page_shows_sample_findings_from_the_manifest(
    every_check: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, _ = every_check
    cells = _parse((out / "report.html").read_text())
    findings = dc.load_report(out).findings
    import pandas as pd

    sites = {
        (r.check, r.path, None if pd.isna(r.row) else int(r.row)) for r in findings.itertuples()
    }
    shown = [r for r in cells.rows["samples"] if "data-check" in r]
    assert {r["data-check"] for r in shown} == set(dc.load_report(out).summary["sites"])
    for r in shown:
        row = int(r["row"]) if "row" in r else None
        assert (r["data-check"], r["data-path"], row) in sites, r
    text = (out / "report.html").read_text()
    assert "x row 3 nan: nan" in text  # the first findings of each file


# -- the page ranks by what gates, as a reader sees it ---------------------------------------


def _rows_with(rgb: np.ndarray, color: str, tol: int = 10) -> np.ndarray:
    """Per pixel row of a screenshot: how many pixels have ``color`` (within ``tol``)."""
    from matplotlib.colors import to_rgb

    target = np.array(to_rgb(color)) * 255
    return np.all(np.abs(rgb - target) <= tol, axis=-1).sum(axis=1)


def _bands(counts: np.ndarray, at_least: int) -> list[tuple[int, int]]:
    """(first, last) pixel rows of each run of rows holding ``at_least`` such pixels."""
    rows = np.flatnonzero(counts >= at_least)
    if not len(rows):
        return []
    cuts = np.flatnonzero(np.diff(rows) > 1)
    starts, ends = np.r_[rows[0], rows[cuts + 1]], np.r_[rows[cuts], rows[-1]]
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


@needs_chromium
def test_chromium_screenshot_ranks_by_what_gates(tmp_path: Path) -> None:
    """What a reader sees, stated as expectations and checked on Chromium's screenshot:

    1. the corrupt file cannot be missed: a dark-red banner across the page, above the
       summary (within the first 260 pixels);
    2. in the findings-per-shard plot, top to bottom: the corrupt file's dark-red band across
       the heatmap, the file drift fails whole (a dark-red cell and band, narrower), the file
       with one NaN (a red error cell), and only then the 1,396 warnings (amber), although
       they are by far the most findings;
    3. one error is strong red, not a pale cell beside the warnings.
    """
    import matplotlib.image as mpimg
    from _reportkit import gate_report
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    from datacheck.report._plots import WHOLE_COLOR

    page = gate_report(tmp_path / "gate").write_html()
    shot = tmp_path / "shot.png"
    proc = _chromium(
        tmp_path,
        "--hide-scrollbars",
        "--window-size=1200,2000",
        f"--screenshot={shot}",
        page.as_uri(),
    )
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    rgb = (mpimg.imread(shot)[..., :3] * 255).round()
    width = rgb.shape[1]

    whole = _rows_with(rgb, WHOLE_COLOR)
    banner = _bands(whole, width // 2)  # (1) across half the page at least
    assert banner and banner[0][0] < 260, banner
    below = banner[0][1] + 1
    corrupt_row = [b for b in _bands(whole, 400) if b[0] > below]  # (2) the heatmap's band
    assert corrupt_row, _bands(whole, 100)
    plot_top = corrupt_row[0][0]
    narrower = np.where(whole < 400, whole, 0)  # a cell and a band, not the whole row
    drift_row = [b for b in _bands(narrower, 100) if b[0] > corrupt_row[0][1]]
    error_cell = to_hex(colormaps["Reds"](0.55))  # one error, the palest an error gets
    errors = [b for b in _bands(_rows_with(rgb, error_cell), 60) if b[0] > plot_top]
    amber = to_hex(colormaps["YlOrBr"](0.42))  # the most warnings of the report
    warnings = [b for b in _bands(_rows_with(rgb, amber), 60) if b[0] > plot_top]
    assert drift_row and errors and warnings, (drift_row, errors, warnings)
    assert plot_top < drift_row[0][0] < errors[0][0] < warnings[0][0], (
        corrupt_row,
        drift_row,
        errors,
        warnings,
    )
    r, g, b = np.array([int(error_cell[i : i + 2], 16) for i in (1, 3, 5)])  # (3)
    assert r > 200 and g < 130 and b < 110, error_cell
