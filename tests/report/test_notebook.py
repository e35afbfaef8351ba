"""notebooks/explore_flagged_shards.ipynb runs top to bottom and shows what it says it shows."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

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


@pytest.mark.slow
def test_notebook_runs_top_to_bottom(kernel_env: str, tmp_path: Path) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    run_dir = tmp_path / "elsewhere"  # any working directory: the notebook makes what it needs
    run_dir.mkdir()
    client = nbclient.NotebookClient(
        nb, kernel_name=kernel_env, timeout=300, resources={"metadata": {"path": str(run_dir)}}
    )
    client.execute(cwd=str(run_dir), env={**os.environ})
    cells = _by_tag(nb)
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert not errors, errors
    assert "scanned into" in _text(cells["setup"])

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
    assert "label: out_of_range" in _text(cells["rows_csv"])

    assert _has_png(cells["column_x0"]) and _has_png(cells["column_label"])

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
    assert "wrote report.html" in _text(cells["html"])
    assert "exists=False" in _text(cells["cleanup"])  # the temporary folder is gone
