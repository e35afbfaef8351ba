"""The documentation runs as written: every code block of the README and of the site.

Each page runs on its own, in a fresh temporary copy of the clone (as a reader who follows it
in their clone; nothing is written into the real one), its blocks in page order; no state passes
between pages, so a page that works on the demo dataset starts with the block that writes it.
Afterwards the copy has no untracked path: what the docs write, git ignores. What a block is:

- ``bash``: each command runs (``datacheck ...`` and ``python ...`` as this interpreter) and must
  exit 0 or 1 without a traceback; the install (``pip install``), test (``python -m pytest``) and
  site (``mkdocs``) commands are not rerun here (CI runs them).
- ``python``: runs as a script and must exit 0.
- ``yaml``: a schema: it must load with ``datacheck.load_schema``.
- ``text``: shown, not run; a ``text`` block preceded by ``<!-- output checked ... -->`` is
  compared: one that starts with ``$ command`` with that command's output, any other with the
  output of the ``python`` block before it (up to the time and trailing spaces).

A block preceded by ``<!-- not run: reason -->`` is skipped (it needs the reader's data, model or
cluster). Every block names one of these languages.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
_FENCE = re.compile(r"^```(\w*)\s*$")
_NOT_RUN = re.compile(r"^<!-- not run: .+ -->$")
_CHECKED = re.compile(r"^<!-- output checked")
_SKIPPED_COMMANDS = ("pip install", "python -m pytest", "mkdocs ")
LANGUAGES = ("bash", "python", "yaml", "text")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language and code, and the comment line before it."""

    where: str
    lang: str
    code: str
    marker: str

    @property
    def skipped(self) -> bool:
        return bool(_NOT_RUN.match(self.marker))

    @property
    def checked(self) -> bool:
        return self.lang == "text" and bool(_CHECKED.match(self.marker))


def pages() -> list[Path]:
    """The README, then every page of the site in file order."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """Every fenced block of a page; the marker is the HTML comment on the line before it."""
    lines = page.read_text().splitlines()
    name = page.relative_to(ROOT)
    out, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = lines[i - 1].strip() if i and lines[i - 1].startswith("<!--") else ""
        out.append(Block(f"{name}:{i + 1}", m.group(1), "\n".join(lines[i + 1 : end]), marker))
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


def _same_output(where: str, shown: str, real: str) -> None:
    def norm(text: str) -> list[str]:
        return [re.sub(r" in \d+\.\d+ s$", " in X s", ln.rstrip()) for ln in text.splitlines()]

    assert norm(real) == norm(shown), f"{where}: the output differs from the one shown"


def run_page(page: Path, folder: Path) -> None:
    """Run every block of one page in ``folder``, in order."""
    last_stdout: str | None = None
    for block in blocks(page):
        if block.skipped:
            continue
        if block.lang == "bash":
            for cmd in _commands(block.code):
                r = _run(_shell(cmd), folder)
                assert r.returncode in (0, 1), f"{block.where}: {cmd}\n{r.stdout}\n{r.stderr}"
                assert "Traceback" not in r.stderr, f"{block.where}: {cmd}\n{r.stderr}"
        elif block.lang == "python":
            r = _run([sys.executable, "-c", block.code], folder)
            assert r.returncode == 0, f"{block.where}\n{r.stdout}\n{r.stderr}"
            last_stdout = r.stdout
        elif block.lang == "yaml":
            _load_yaml_schema(block, folder)
        elif block.checked:
            _check_output(block, folder, last_stdout)


def _check_output(block: Block, folder: Path, last_stdout: str | None) -> None:
    first, _, shown = block.code.partition("\n")
    if first.startswith("$ "):
        r = _run(_shell(first.removeprefix("$ ")), folder)
        assert "Traceback" not in r.stderr, f"{block.where}\n{r.stderr}"
        _same_output(block.where, shown, r.stdout)
    else:
        assert last_stdout is not None, f"{block.where}: no python block before this output"
        _same_output(block.where, block.code, last_stdout)


def _load_yaml_schema(block: Block, folder: Path) -> None:
    path = folder / "_docs_block.yaml"
    path.write_text(block.code + "\n")
    code = "import sys, datacheck; datacheck.load_schema(sys.argv[1])"
    r = _run([sys.executable, "-c", code, str(path)], folder)
    path.unlink()
    assert r.returncode == 0, f"{block.where}: the schema does not load\n{r.stderr}"


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _runnable(page: Path) -> bool:
    return any(b.lang in ("bash", "python", "yaml") and not b.skipped for b in blocks(page))


def test_every_block_is_marked_or_run() -> None:
    runnable = 0
    for page in pages():
        for block in blocks(page):
            assert block.lang in LANGUAGES, f"{block.where}: name the block's language"
            if block.marker.startswith("<!-- not run"):
                assert block.skipped, f"{block.where}: write <!-- not run: reason -->"
            if block.marker.startswith("<!-- output checked"):
                assert block.lang == "text", f"{block.where}: a checked output is a text block"
            runnable += block.lang in ("bash", "python", "yaml") and not block.skipped
    assert runnable >= 17  # quick start, scan, schemas, profiles, loader, exploration, ...


def test_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_every_page_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in DOCS.rglob("*.md"):
        assert f" {page.relative_to(DOCS).as_posix()}\n" in nav, (
            f"{page} is not in mkdocs.yml's nav"
        )


def test_cli_reference_covers_every_command() -> None:
    from datacheck.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices  # type: ignore[attr-defined]
    text = (DOCS / "reference" / "cli.md").read_text()
    options = (DOCS / "reference" / "options.md").read_text()
    for name in commands:
        assert f"<!-- cli-help: {name} -->" in text, name
        assert f"<!-- cli-options: {name} -->" in options, name


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", [p for p in pages() if _runnable(p)], ids=_page_id)
def test_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    clone = copy_of_the_clone(tmp_path / "clone")
    run_page(page, clone)
    left = _git(clone, "status", "--porcelain", "--untracked-files=all").stdout.splitlines()
    assert not left, f"{_page_id(page)} leaves untracked paths in the clone: {left}"


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = ["git", "-c", "user.name=docs", "-c", "user.email=docs@test", *args]
    return subprocess.run(cmd, cwd=folder, capture_output=True, text=True, check=True)


def copy_of_the_clone(dest: Path) -> Path:
    """The clone's files (tracked, and new ones git does not ignore) in a fresh git repository."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git clone")
    listed = _git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").stdout
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "the clone")
    return dest


def test_the_outputs_page_states_the_contract_the_code_writes(tmp_path: Path) -> None:
    """Every column of both quarantines and every top-level key of report.json is on the
    reference page, with the version the code writes."""
    import datacheck
    from datacheck.findings import MANIFEST_SCHEMA
    from datacheck.report import FORMAT_VERSION, QUARANTINE
    from datacheck.torch._quarantine import COLUMNS

    text = (DOCS / "reference" / "outputs.md").read_text()
    for field in MANIFEST_SCHEMA:
        kind = "int32" if field.type == "int32" else str(field.type)
        assert f"| `{field.name}` | {kind} |" in text, field
    for name in COLUMNS:
        assert f"| `{name}` |" in text, name
    report = datacheck.scan(
        datacheck.write_demo(tmp_path / "d"), out=tmp_path / "o", progress=False
    )
    for key in report.data:
        assert f"`{key}`" in text, key
    assert report.data["format_version"] == FORMAT_VERSION and f"now `{FORMAT_VERSION}`" in text
    assert report.quarantine_path.name == QUARANTINE and f"`{QUARANTINE}`" in text


def test_the_scan_synopsis_names_every_option() -> None:
    from datacheck.cli import build_parser

    parser = build_parser()
    scan = next(a for a in parser._actions if a.dest == "command").choices["scan"]  # type: ignore[attr-defined]
    text = (DOCS / "tutorials" / "scan.md").read_text()
    synopsis = next(b.code for b in blocks(DOCS / "tutorials" / "scan.md") if "PATHS..." in b.code)
    for action in scan._actions:
        for option in action.option_strings:
            if option not in ("-h", "--help"):
                assert option in synopsis, f"the scan synopsis lacks {option}"
    assert "(../reference/cli.md)" in text  # and points at the generated reference
