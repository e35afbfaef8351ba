"""The verdict's tolerance (``mostly`` in the schema, ``--max-bad-fraction`` per run): the
findings are all recorded, only the exit code changes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import planted_table, write_table

import datacheck as dc
from datacheck.errors import SchemaError, UsageError

# planted_table: 200 rows; column a has NaN at rows 3 and 150 (1%) and +Inf at row 10 (0.5%),
# column b has -Inf at row 20, an fp16 overflow at 77 (warning) and a null at 120 (an error:
# a loader turns it into NaN).


@pytest.fixture
def data(tmp_path: Path) -> Path:
    table, _ = planted_table()
    (tmp_path / "data").mkdir()
    write_table(table, tmp_path / "data" / "t.parquet", "parquet")
    return tmp_path / "data"


def _scan(data: Path, out: Path, **kw: object) -> dc.Report:
    return dc.scan(data, out=out, executor="inprocess", **kw)


def test_max_bad_fraction_changes_the_verdict_not_the_findings(data: Path, tmp_path: Path) -> None:
    strict = _scan(data, tmp_path / "strict")
    loose = _scan(
        data, tmp_path / "loose", max_bad_fraction={"nan": 0.01, "inf": 0.005, "null": 0.005}
    )
    assert strict.exit_code() == 1 and loose.exit_code() == 0 and loose.ok
    assert loose.summary["exit_code"] == 0
    assert loose.summary["sites"] == strict.summary["sites"]
    assert len(loose.findings) == len(strict.findings) == 6
    by = {(t["column"], t["check"]): t for t in loose.summary["tolerance"]}
    assert by[("a", "nan")]["bad_rows"] == 2 and by[("a", "nan")]["rows"] == 200
    assert by[("a", "nan")]["fraction"] == pytest.approx(0.01) and by[("a", "nan")]["within"]
    # One more bad row than tolerated fails the gate, and says so.
    tight = _scan(
        data, tmp_path / "tight", max_bad_fraction={"nan": 0.005, "inf": 0.005, "null": 0.005}
    )
    assert tight.exit_code() == 1
    assert not {(t["column"], t["check"]): t for t in tight.summary["tolerance"]}[("a", "nan")][
        "within"
    ]
    # The tolerance applies to each column: warnings gate with fail_on='warning'.
    assert loose.exit_code("warning") == 1


def _schema(tmp_path: Path, mostly: object) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        "schema_type: dataframe\n"
        "columns:\n"
        "  a:\n"
        "    dtype: float64\n"
        "    checks:\n"
        f"      - options: {{check_name: finite, mostly: {mostly}}}\n"
        "  b:\n"
        "    dtype: float32\n"
        "    nullable: true\n"
        "    checks:\n"
        f"      - {{min_value: -10, max_value: 10, options: {{check_name: in_range, mostly: {mostly}}}}}\n"
    )
    return path


def test_schema_mostly_per_check(data: Path, tmp_path: Path) -> None:
    report = _scan(data, tmp_path / "out", schema=_schema(tmp_path, 0.985))
    by = {(t["column"], t["check"]): t for t in report.summary["tolerance"]}
    assert by[("a", "nan")]["source"] == "schema mostly 0.985"
    assert by[("a", "nan")]["within"] and by[("a", "inf")]["within"]
    # b: -Inf is not a range finding (inf, untolerated), 1e5 is out_of_range (tolerated)
    assert by[("b", "out_of_range")]["within"]
    assert ("b", "inf") not in by
    assert report.exit_code() == 1  # b's -Inf gates
    # The run's flag wins over the schema's mostly.
    run = _scan(
        data, tmp_path / "run", schema=_schema(tmp_path, 0.985), max_bad_fraction={"inf": 0.01}
    )
    assert run.exit_code() == 0
    assert {(t["column"], t["check"]): t for t in run.summary["tolerance"]}[("a", "inf")][
        "source"
    ] == "--max-bad-fraction inf"


@pytest.mark.parametrize("mostly", ["1.5", "0", "yes"])
def test_schema_mostly_must_be_a_fraction(tmp_path: Path, mostly: str) -> None:
    with pytest.raises(SchemaError, match=r"column 'a', check 'finite': mostly must be a fraction"):
        dc.load_schema(_schema(tmp_path, mostly))


def test_max_bad_fraction_is_validated(data: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="fractions in \\[0, 1\\]"):
        _scan(data, tmp_path / "o", max_bad_fraction={"nan": 2})


def test_cli_max_bad_fraction_and_report_agree(data: Path, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "datacheck", *args], capture_output=True, text=True, timeout=120
        )

    out = str(tmp_path / "o")
    flags = ["--max-bad-fraction", "nan=0.01", "--max-bad-fraction", "inf=0.005"]
    flags += ["--max-bad-fraction", "null=0.005"]
    scan = run("scan", str(data), "--out", out, *flags)
    assert scan.returncode == 0, scan.stdout + scan.stderr
    assert "nan in a: 2 of 200 rows (1%), max 1% (--max-bad-fraction nan): tolerated" in scan.stdout
    assert "verdict:    PASS, exit 0" in scan.stdout
    assert run("report", out).returncode == 0
    bad = run("scan", str(data), "--out", out, "--max-bad-fraction", "nan")
    assert bad.returncode == 2 and "write CHECK=FRACTION" in bad.stderr
