"""The CLI as a user runs it: a subprocess, its exit code, stdout, stderr and files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from datacheck.cli import ExitCode, main


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "datacheck", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def test_demo_then_scan_gates_with_exit_1(tmp_path: Path) -> None:
    r = run("demo", str(tmp_path / "demo"))
    assert r.returncode == 0, r.stderr
    r = run(
        "scan",
        str(tmp_path / "demo"),
        "--schema",
        str(tmp_path / "demo" / "schema.yaml"),
        "--out",
        str(tmp_path / "rep"),
    )
    assert r.returncode == ExitCode.FINDINGS, r.stderr
    assert "scanned 5 files (1 ok, 3 flagged, 1 corrupt), 4,000 rows" in r.stdout
    for check in ("nan", "inf", "extreme", "null", "out_of_range", "corrupt"):
        assert f"  {check} " in r.stdout
    assert "verdict:    FAIL" in r.stdout
    assert (tmp_path / "rep" / "report.json").exists()
    assert (tmp_path / "rep" / "quarantine.parquet").exists()
    assert r.stderr == ""  # no progress bar when stderr is not a terminal


def test_clean_data_exits_0(tmp_path: Path) -> None:
    run("demo", str(tmp_path / "demo"))
    r = run(
        "scan", str(tmp_path / "demo" / "train" / "shard-000.parquet"), "--out", str(tmp_path / "o")
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout


def test_fail_on_levels(demo_dir: Path, tmp_path: Path) -> None:
    # shard-003.csv without a schema: inf/nan errors
    shard = str(demo_dir / "train" / "shard-003.csv")
    assert main(["scan", shard, "--out", str(tmp_path / "a"), "--fail-on", "never"]) == 0
    assert main(["scan", shard, "--out", str(tmp_path / "b")]) == 1
    warn_only = str(tmp_path / "warn.csv")
    Path(warn_only).write_text("x\n1.0\n100000.0\n")  # beyond fp16: a warning only
    assert main(["scan", warn_only, "--out", str(tmp_path / "c"), "--fail-on", "warning"]) == 1
    assert main(["scan", warn_only, "--out", str(tmp_path / "d"), "--fail-on", "error"]) == 0


def test_json_summary_on_stdout(demo_dir: Path, tmp_path: Path) -> None:
    r = run("scan", str(demo_dir), "--out", str(tmp_path / "o"), "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["files"] == 5 and doc["corrupt_files"] == 1
    assert doc["report"] == str(tmp_path / "o")
    assert r.returncode == doc["exit_code"] == 1


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["scan", "/no/such/path"], "no such file or directory"),
        (["scan", "."], None),  # replaced below with a schema error
        (["scan", ".", "--fail-on", "sometimes"], "invalid choice"),
        (["scan", ".", "--workers", "0"], "argument --workers: must be >= 1, got 0"),
        (["scan", ".", "--unit-mb", "0"], "argument --unit-mb: must be >= 1, got 0"),
        (["scan", ".", "--unit-timeout", "-1"], "argument --unit-timeout: must be a number >= 0"),
        (["scan", "nothing/*.parquet"], "glob 'nothing/*.parquet' matches no file"),
        (["scan"], "required"),
        (
            ["scan", "data.csv", "--out", "/proc/datacheck-cannot-write-here"],
            "pass a writable folder",
        ),
        (["scan", "empty"], "no data files found"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_user_errors_are_one_line_exit_2(
    args: list[str], needle: str | None, tmp_path: Path
) -> None:
    if needle is None:
        bad = tmp_path / "bad.yaml"
        bad.write_text("columns: [\n")
        args = ["scan", str(tmp_path), "--schema", str(bad)]
        needle = "invalid YAML"
    (tmp_path / "empty").mkdir()
    (tmp_path / "data.csv").write_text("x\n1.0\n")
    r = run(*args, cwd=tmp_path)
    assert r.returncode == ExitCode.USAGE
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("datacheck: error: ")
    assert needle in lines[0]


def test_progress_bar_when_asked(demo_dir: Path, tmp_path: Path) -> None:
    r = run("scan", str(demo_dir), "--out", str(tmp_path / "o"), "--progress")
    assert "scanning" in r.stderr
    assert "files 5/5" in r.stderr  # files and bytes, to the last file
    assert "314k/314k" in r.stderr.replace("B", "")


def test_help_and_version_exit_0() -> None:
    assert run("--help").returncode == 0
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith("datacheck ")


def test_a_bug_inside_datacheck_is_exit_3_with_one_line_naming_the_traceback_log(
    tmp_path: Path,
) -> None:
    """A crash is not 'findings' (1) nor 'bad usage' (2): a CI gate can tell them apart."""
    code = (
        "import sys\n"
        "import datacheck.cli._demo as demo\n"
        "def broken(args):\n"
        "    raise RuntimeError('planted bug\\nsecond line')\n"
        "demo._run_demo = broken\n"
        "from datacheck.cli import main\n"
        f"sys.exit(main(['demo', {str(tmp_path / 'd')!r}]))\n"
    )
    env = {**__import__("os").environ, "TMPDIR": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert r.returncode == ExitCode.INTERNAL == 3
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert lines[0].startswith("datacheck: internal error: RuntimeError: planted bug\\nsecond line")
    log = Path(lines[0].rsplit(" ", 1)[-1])
    assert log.parent == tmp_path and "planted bug" in log.read_text()
    assert "Traceback" in log.read_text()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["scan", "--shema", "s.yaml", "d"],
            "unrecognized argument '--shema' (did you mean '--schema'?) "
            "(see 'datacheck scan --help')",
        ),
        (
            ["scna", "d"],
            "command: invalid choice 'scna' (did you mean 'scan'?); "
            "choose from scan, demo, infer, logs, report (see 'datacheck --help')",
        ),
        (
            ["scan", "d", "--fail-on", "eror"],
            "argument --fail-on: invalid choice 'eror' (did you mean 'error'?); "
            "choose from error, warning, never (see 'datacheck scan --help')",
        ),
        (["report", "d", "--hmtl"], "unrecognized argument '--hmtl' (did you mean '--html'?)"),
    ],
)
def test_argparse_errors_have_one_prefix_and_suggest_the_closest(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"datacheck: error: {message}"), err
    assert err.count("datacheck: error") == 1 and len(err.strip().splitlines()) == 1


def test_every_help_has_a_description_and_the_exit_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from datacheck.cli import build_parser
    from datacheck.formats import formats

    commands = ["scan", "demo", "infer", "logs", "report"]
    for command in commands:
        parser = build_parser()
        (sub,) = [a for a in parser._actions if a.dest == "command"]
        assert sub.choices[command].description, command
        assert main([command, "--help"]) == 0
        out = capsys.readouterr().out
        assert "exit codes:" in out and "  3    internal error" in out, command
        assert "  2    usage or input error" in out
    assert main(["scan", "--help"]) == 0
    out = capsys.readouterr().out
    assert "  1    findings at or above --fail-on" in out
    for name in formats():
        if name != "unknown":
            assert f"\n  {name} " in out, name


def test_report_exits_like_the_scan_it_shows(demo_dir: Path, tmp_path: Path) -> None:
    failed = run("scan", str(demo_dir), "--out", str(tmp_path / "fail"))
    assert failed.returncode == 1
    passed = run("scan", str(demo_dir), "--out", str(tmp_path / "pass"), "--fail-on", "never")
    assert passed.returncode == 0
    for name, code in (("fail", 1), ("pass", 0)):
        r = run("report", str(tmp_path / name))
        assert r.returncode == code, r.stderr
        assert f"exit {code}" in r.stdout


def test_one_file_is_one_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.csv").write_text("x\n1.0\n")
    assert main(["scan", str(tmp_path / "a.csv"), "--out", str(tmp_path / "o")]) == 0
    assert "scanned 1 file (1 ok, 0 flagged, 0 corrupt), 1 row," in capsys.readouterr().out


def test_sample_findings_under_the_table(demo_dir: Path, tmp_path: Path) -> None:
    schema = str(demo_dir / "schema.yaml")
    r = run("scan", str(demo_dir), "--schema", schema, "--out", str(tmp_path / "o"), "--show", "1")
    assert "findings (first 1 per check; all in quarantine.parquet):" in r.stdout
    lines = r.stdout.splitlines()
    (nan,) = [ln for ln in lines if ln.startswith("  nan ") and "shard-" in ln]
    assert nan.split()[1].endswith("/train/shard-001.parquet:17")
    assert nan.split()[2:] == ["x1", "nan"]
    assert "  nan           ... and 3 more" in lines
    (oor,) = [ln for ln in lines if ln.startswith("  out_of_range ") and "shard-" in ln]
    assert oor.split()[1].endswith("/train/shard-003.csv:20")
    assert oor.split()[2:] == ["label", "12"]
    quiet = run("report", str(tmp_path / "o"), "--show", "0")
    assert quiet.returncode == 1 and "findings (first" not in quiet.stdout


def test_a_file_name_with_control_characters_cannot_forge_summary_or_schema_lines(
    tmp_path: Path,
) -> None:
    """A name holding a newline prints escaped: no fake 'verdict: PASS' line in the summary,
    no 'strict: true' smuggled into the YAML that infer writes."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "data"
    data.mkdir()
    name = "x.parquet\nverdict:    PASS\nstrict: true\n\x1b[2J.parquet"
    pq.write_table(pa.table({"a": np.array([1.0, np.nan])}), data / name)
    r = run("scan", str(data), "--out", str(tmp_path / "rep"), "--no-progress")
    assert r.returncode == ExitCode.FINDINGS, r.stderr
    assert not any(
        ln.startswith(("verdict:    PASS", "strict: true")) for ln in r.stdout.splitlines()
    )
    assert "\\nverdict:    PASS\\nstrict: true\\n\\x1b[2J" in r.stdout
    r = run("infer", str(data), "--out", str(tmp_path / "schema.yaml"), "--allow-dirty")
    assert r.returncode == 0, r.stderr  # (the NaN is damage: learned from as it is)
    text = (tmp_path / "schema.yaml").read_text()
    assert "\x1b" not in text and not any(ln.startswith("strict:") for ln in text.splitlines())
    import yaml

    assert "strict" not in yaml.safe_load(text)


def test_out_naming_a_file_says_so(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    (tmp_path / "d.csv").write_text("x\n1\n")
    r = run("scan", str(tmp_path / "d.csv"), "--out", str(tmp_path / "afile"))
    assert r.returncode == ExitCode.USAGE
    assert r.stderr == (
        f"datacheck: error: --out {str(tmp_path / 'afile')!r}: a file, not a folder; "
        "pass a folder for the report (created if missing)\n"
    )
