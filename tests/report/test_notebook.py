"""notebooks/explore_flagged_shards.ipynb runs top to bottom and shows what it says it shows."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import datacheck

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "explore_flagged_shards.ipynb"


def test_notebook_is_committed_without_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.fixture()
def kernel_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernelspec running this very interpreter (so the kernel sees this datacheck)."""
    spec = tmp_path / "jupyter" / "kernels" / "datacheck-test"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "datacheck test", "language": "python"})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    monkeypatch.delenv("MPLBACKEND", raising=False)
    return "datacheck-test"


def _by_tag(nb) -> dict[str, dict]:
    return {tag: c for c in nb.cells if c.cell_type == "code" for tag in c.metadata.get("tags", [])}


def _text(cell) -> str:
    parts = []
    for out in cell.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out:
            parts.append(out.data.get("text/html") or out.data.get("text/plain", ""))
    return "\n".join(parts)


def _has_png(cell) -> bool:
    return any("image/png" in out.get("data", {}) for out in cell.outputs)


def _run(tmp_path: Path, kernel: str, **settings: str) -> dict[str, Any]:
    """Run the notebook with its first cell's settings replaced (as a user edits them)."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    if settings:
        first = nb.cells[[c.cell_type for c in nb.cells].index("code")]
        assert "settings" in first.metadata["tags"]
        names = ("REPORT", "COLUMN", "OUT")
        assert all(f"{n} = None" in first.source for n in names), first.source
        first.source = "\n".join(f"{n} = {settings.get(n)!r}" for n in names)
    run_dir = tmp_path / "elsewhere"  # any working directory: the notebook makes what it needs
    run_dir.mkdir()
    client = nbclient.NotebookClient(
        nb, kernel_name=kernel, timeout=300, resources={"metadata": {"path": str(run_dir)}}
    )
    client.execute(cwd=str(run_dir), env={**os.environ})
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert not errors, errors
    return _by_tag(nb)


@pytest.mark.slow
def test_notebook_runs_top_to_bottom(kernel_env: str, tmp_path: Path) -> None:
    cells = _run(tmp_path, kernel_env)
    assert "report: " in _text(cells["setup"])

    summary = _text(cells["summary"])  # the report's _repr_html_
    assert (
        'data-field="flagged" data-value="3"' in summary
        and 'data-field="corrupt" data-value="1"' in summary
    )
    assert "FAIL" in summary

    files = _text(cells["files"])
    assert "shard-004.parquet" in files and "corrupt" in files
    assert "out_of_range" in _text(cells["findings"])

    assert _has_png(cells["by_shard"]), "by_shard() did not display as an image"
    assert len(cells["by_shard"].outputs) == 1  # shown once, not again by pyplot
    worst = _text(cells["worst"])
    assert "re-generate: shard-004.parquet" in worst
    assert "worst flagged shard: shard-002.parquet (4 findings)" in worst

    rows = _text(cells["rows"])  # shard-002, context 1: rows 6-8, 41-43, 98-100, 599-601
    for row in (6, 7, 8, 41, 42, 43, 98, 99, 100, 599, 600, 601):
        assert f"<th>{row}</th>" in rows
    assert "x0: extreme" in rows and "embedding: extreme" in rows
    rows_next = _text(cells["rows_next"])  # the next flagged shard in another format: the CSV
    assert "shard-003.csv" in rows_next and "label: out_of_range" in rows_next

    assert "columns drawn: ['x1', 'embedding']" in _text(cells["columns"])  # most findings first
    assert _has_png(cells["column"]) and _has_png(cells["column_next"])
    assert "nothing to compare per shard" in _text(cells["stats"])  # the demo has no profile

    exclusion = _text(cells["exclusion"])
    assert (
        "11 rows to skip; dataset indices: [1017, 1250, 1503, 2007, 2042, 2099, 2600, 3005, 3008, 3011, 3020]"
        in exclusion
    )

    clean = _text(cells["clean_copy"])
    assert "clean copy: 3989 of 4000 rows kept" in clean
    assert (
        "rescan of the clean copy: ok=True, status={'ok': 4, 'flagged': 0, 'corrupt': 0}" in clean
    )
    assert "report.html" in _text(cells["html"])
    assert "exists=False" in _text(cells["cleanup"])  # the temporary folder is gone


def _other_dataset(root: Path) -> Path:
    """Not the demo: other columns (age, income, city, score), other checks (isin, a range, a
    missing column, drift against reference statistics), JSON Lines beside Parquet; written
    with pandas, scanned with datacheck."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(7)
    data = root / "people"
    data.mkdir(parents=True)
    for i in range(4):
        n = 200
        frame = pd.DataFrame(
            {
                "age": rng.integers(18, 90, n),
                "income": rng.normal(50_000, 8_000, n) * (1000 if i == 2 else 1),
                "city": rng.choice(["Oslo", "Lima", "Pune"], n),
            }
        )
        if i != 2:  # part-2 lacks it: a schema finding, beside its drift
            frame["score"] = rng.random(n)
        if i == 1:
            frame.loc[5, "age"] = 150
            frame.loc[9, "city"] = "Mars"
            frame.loc[12, "income"] = float("nan")  # pandas writes it to Parquet as a null
        if i == 0:
            frame.loc[3, "income"] = float("inf")
        if i == 3:
            frame.to_json(data / f"part-{i}.jsonl", orient="records", lines=True)
        else:
            frame.to_parquet(data / f"part-{i}.parquet")
    schema = root / "people.yaml"
    schema.write_text(
        """schema_type: dataframe
columns:
  age:
    dtype: int64
    checks:
    - {min_value: 0, max_value: 120, options: {check_name: in_range}}
  income:
    dtype: float64
    checks:
    - {options: {check_name: finite}}
    - {mean: 50000, std: 8000, zscore_max: 8, max_mean_shift: 3, max_std_ratio: 3,
       options: {check_name: reference_stats}}
  city:
    dtype: str
    checks:
    - {allowed_values: [Oslo, Lima, Pune], options: {check_name: isin}}
  score:
    dtype: float64
"""
    )
    report = root / "people-report"
    datacheck.scan(data, schema, out=report, progress=False)
    return report


@pytest.mark.slow
def test_notebook_runs_on_another_report(kernel_env: str, tmp_path: Path) -> None:
    report = _other_dataset(tmp_path / "mine")
    out = tmp_path / "exports"
    cells = _run(tmp_path, kernel_env, REPORT=str(report), COLUMN="income", OUT=str(out))
    assert f"report: {report}" in _text(cells["setup"])
    files = _text(cells["files"])
    assert "part-3.jsonl" in files and "n_isin" in files and "n_drift" in files
    findings = _text(cells["findings"])
    for check in ("isin", "out_of_range", "null", "inf", "drift", "schema", "extreme"):
        assert check in findings, check
    worst = _text(cells["worst"])
    assert "re-generate: nothing (no corrupt file)" in worst
    assert "worst flagged shard: part-" in worst
    assert "<th>" in _text(cells["rows"])
    assert _text(cells["columns"]).startswith("columns drawn: ['income', ")
    assert _has_png(cells["column"]) and _has_png(cells["column_next"])
    assert _has_png(cells["stats"]), _text(cells["stats"])  # income drifted in part-2
    assert "rows to skip" in _text(cells["exclusion"])
    assert "rescan of the clean copy: ok=True" in _text(cells["clean_copy"])
    assert (out / "report.html").exists() and (out / "clean").is_dir()
    assert f"exports in {out}: True" in _text(cells["cleanup"])  # the user's OUT is kept
