"""The README runs as written: every ``bash`` and ``python`` block, in order, in a fresh folder.

Blocks preceded by ``<!-- not run: reason -->`` are skipped (they need the reader's data, model
or cluster); in bash blocks the install (``pip install``) and test (``python -m pytest``)
commands are not rerun.  A ``text`` block preceded by ``<!-- output checked ... -->`` starts
with ``$ command``: the command is run and its output must equal the block, up to the time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
_FENCE = re.compile(r"^```(\w*)\s*$")
_NOT_RUN = re.compile(r"^<!-- not run: .+ -->$")
_CHECKED = re.compile(r"^<!-- output checked")
_SKIPPED_COMMANDS = ("pip install", "python -m pytest")


def readme_blocks(text: str) -> list[tuple[int, str, str, str]]:
    """(line, language, code, marker) of every fenced block; marker is the HTML comment on the
    line before the fence ('' if none)."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = lines[i - 1].strip() if i and lines[i - 1].startswith("<!--") else ""
        out.append((i + 1, m.group(1), "\n".join(lines[i + 1 : end]), marker))
        i = end + 1
    return out


def _commands(code: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", code)
    cmds = [c.strip() for c in joined.splitlines()]
    return [c for c in cmds if c and not c.startswith("#") and not c.startswith(_SKIPPED_COMMANDS)]


def _shell(cmd: str) -> str:
    """``datacheck ...`` as this interpreter runs it (the console script may not be on PATH)."""
    exe = f'"{sys.executable}"'
    cmd = re.sub(r"^datacheck\b", f"{exe} -m datacheck", cmd)
    return re.sub(r"^python\b", exe, cmd)


def _run(args: str | list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        args,
        shell=isinstance(args, str),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _same_output(shown: str, real: str) -> None:
    def norm(text: str) -> list[str]:
        return [re.sub(r" in \d+\.\d+ s$", " in X s", ln.rstrip()) for ln in text.splitlines()]

    assert norm(real) == norm(shown)


def test_readme_blocks_are_marked_or_run() -> None:
    blocks = readme_blocks(README.read_text())
    runnable = [b for b in blocks if b[1] in ("bash", "python") and not _NOT_RUN.match(b[3])]
    assert len(runnable) >= 8  # the quick start, scan, schemas, profiles, loader, exploration
    for line, _lang, _, marker in blocks:
        if marker.startswith("<!-- not run"):
            assert _NOT_RUN.match(marker), f"README.md:{line}: write <!-- not run: reason -->"


@pytest.mark.slow
@pytest.mark.timeout(1200)  # every block of the README in turn: ~3 min on a loaded 2-core machine
def test_readme_runs_as_written(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    for line, lang, code, marker in readme_blocks(README.read_text()):
        where = f"README.md:{line}"
        if _NOT_RUN.match(marker):
            continue
        if lang == "bash":
            for cmd in _commands(code):
                r = _run(_shell(cmd), tmp_path)
                assert r.returncode in (0, 1), f"{where}: {cmd}\n{r.stdout}\n{r.stderr}"
                assert "Traceback" not in r.stderr, f"{where}: {cmd}\n{r.stderr}"
        elif lang == "python":
            r = _run([sys.executable, "-c", code], tmp_path)
            assert r.returncode == 0, f"{where}\n{r.stdout}\n{r.stderr}"
        elif lang == "text" and _CHECKED.match(marker):
            command, _, shown = code.partition("\n")
            r = _run(_shell(command.removeprefix("$ ")), tmp_path)
            assert "Traceback" not in r.stderr, f"{where}\n{r.stderr}"
            _same_output(shown, r.stdout)
