"""A missing extra is the install, not the data: one line naming the extra and both install
commands.  The module is really missing in the child process (a meta-path finder refuses it,
before anything imports it), not mocked in datacheck's own check."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

HIDE = textwrap.dedent(
    """
    import sys
    class _Hidden:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HIDDEN:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    HIDDEN = set(sys.argv[1].split(","))
    sys.meta_path.insert(0, _Hidden())
    sys.argv = sys.argv[1:]
    """
)


def _run(hidden: str, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDE + code, hidden, *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


SCAN = "from datacheck.cli import main; sys.exit(main(sys.argv[1:]))"


@pytest.fixture
def images(tmp_path: Path) -> Path:
    pil = pytest.importorskip("PIL.Image")
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(3):
        pil.fromarray(np.full((8, 8, 3), i * 40, np.uint8)).save(folder / f"{i}.png")
    return folder


def test_images_without_pillow_are_one_usage_line(images: Path, tmp_path: Path) -> None:
    r = _run("PIL", SCAN, "scan", str(images), "--out", str(tmp_path / "o"))
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "3 image file(s)" in line and "needs Pillow (the media extra)" in line
    assert 'pip install -e ".[media]" in a clone' in line
    assert 'pip install "datacheck-ml[media]"' in line
    assert not (tmp_path / "o" / "report.json").exists()  # no report full of "corrupt" files
    # With Pillow there: the same images are clean.
    ok = _run("nothing", SCAN, "scan", str(images), "--out", str(tmp_path / "o2"))
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_hdf5_without_h5py_names_the_torch_extra(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["x"] = np.zeros((4, 2))
    r = _run("h5py", SCAN, "scan", str(tmp_path / "a.h5"), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "needs h5py (the torch extra)" in r.stderr, r.stderr


def test_datacheck_torch_without_torch_is_one_line() -> None:
    code = textwrap.dedent(
        """
        try:
            import datacheck.torch
        except ModuleNotFoundError as exc:
            print(exc, "|", exc.name, "|", exc.__cause__, exc.__suppress_context__)
        import datacheck  # the core works without it
        print(datacheck.scan.__name__)
        """
    )
    r = _run("torch", code)
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.strip().splitlines()
    assert first.startswith("datacheck.torch needs torch (the torch extra): ")
    assert 'pip install -e ".[torch]" in a clone, or pip install "datacheck-ml[torch]"' in first
    assert first.endswith("| torch | None True") and second == "scan"
