"""``datacheck logs`` on the command line: exit codes, JSON, text, overrides, hash-seed stability."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import _trainers as tr
import pytest

from datacheck.cli import _logs as logs_cli
from datacheck.errors import InputError, UsageError


def _args(path: Path, *extra: str) -> argparse.Namespace:
    """Parse through the real ``logs`` subparser, so defaults are the CLI's."""
    parser = argparse.ArgumentParser()
    logs_cli.add_parser(parser.add_subparsers())
    return parser.parse_args(["logs", str(path), "--format", "json", *extra])


def _diverging() -> tr.Run:
    return tr.make_run(grad_from=300, spike_at=330, nan_at=400)


def test_run_in_process(tmp_path, capsys):
    path = tr.write(tmp_path / "train.log", tr.megatron(_diverging()))
    assert logs_cli.run(_args(path)) == 1
    out = json.loads(capsys.readouterr().out)
    assert (out["status"], out["warning_step"], out["precursor_step"], out["restart_step"]) == (
        "nan",
        330,
        300,
        200,
    )
    assert out["keys"]["loss"] == "lm_loss" and out["restart_from"] == "checkpoint"
    assert logs_cli.run(_args(path, "--format", "text")) == 1
    text = capsys.readouterr().out
    for part in (
        "precursor  step 300",
        "warning    step 330",
        "NaN        step 400 (loss",
        "restart from step 200 (checkpoint",
    ):
        assert part in text, text
    with pytest.raises(UsageError, match="ratio=1.0 must be > 1"):
        logs_cli.run(_args(path, "--spike-ratio", "1"))
    with pytest.raises(InputError, match="no key 'nope' for --loss"):
        logs_cli.run(_args(path, "--loss", "nope"))
    assert logs_cli.run(_args(path, "--loss", "lm loss", "--step", "consumed samples")) == 1
    assert json.loads(capsys.readouterr().out)["warning_step"] == 330 * 512


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "datacheck", "logs", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_cli_exit_codes_and_json(tmp_path):
    spiking = tr.write(tmp_path / "results.csv", tr.yolo_csv(_diverging()))
    healthy = tr.write(tmp_path / "ok.jsonl", tr.guard_jsonl(tr.make_run()))
    proc = _cli(str(spiking), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["status"], out["warning_step"], out["nan_step"], out["restart_step"]) == (
        "nan",
        33,
        40,
        32,
    )
    proc = _cli(str(healthy))
    assert proc.returncode == 0 and "status: healthy" in proc.stdout
    proc = _cli(str(tmp_path / "nope.log"))
    assert (
        proc.returncode == 2
        and proc.stderr.startswith("datacheck: error:")
        and "no such file" in proc.stderr
    )


def test_key_choice_does_not_depend_on_the_hash_seed(tmp_path):
    path = tr.write(tmp_path / "results.csv", tr.yolo_csv(tr.make_run()))
    keys = {
        json.dumps(
            json.loads(_cli(str(path), "--format", "json", env={"PYTHONHASHSEED": seed}).stdout)[
                "keys"
            ]
        )
        for seed in ("0", "1", "2")
    }
    assert len(keys) == 1 and '"train_box_loss+train_obj_loss"' in keys.pop()


def test_logs_does_not_import_torch():
    code = "import sys, datacheck._logs, datacheck.cli; datacheck.cli.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
