"""``datacheck logs``: readers for every history shape, the spike timeline, and the CLI."""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from datacheck import _logs
from datacheck.checks._spike import SpikeConfig
from datacheck.cli import _logs as logs_cli
from datacheck.errors import InputError, UsageError

PRECURSOR, WARNING, DANGER, NAN, STEPS = 400, 450, 451, 480, 500
LR = 1e-4


def _history(spiking: bool = True) -> list[dict[str, float]]:
    """A run that is stable, then grad norm x50 at 400, loss x15 at 450 (staying up), NaN at 480."""
    rng = random.Random(0)
    rows = []
    for step in range(STEPS):
        loss = 2.0 + 0.5 * math.exp(-step / 100) + rng.uniform(-0.05, 0.05)
        gnorm = 1.0 + rng.uniform(-0.1, 0.1)
        if spiking and step >= PRECURSOR:
            gnorm *= 50
        if spiking and step >= WARNING:
            loss *= 15 + (step - WARNING)
        if spiking and step >= NAN:
            loss = gnorm = math.nan
        rows.append({"step": step, "loss": loss, "grad_norm": gnorm, "lr": LR})
    return rows


def _num(v: float) -> str:
    return "nan" if math.isnan(v) else f"{v:.6g}"


def _write(path: Path, shape: str, rows: list[dict[str, float]]) -> Path:
    if shape == "plain":
        lines = [
            f"[rank0] step {r['step']} loss {_num(r['loss'])} grad_norm {_num(r['grad_norm'])} lr {r['lr']:g}"
            for r in rows
        ]
    elif shape == "keyvalue":
        lines = [
            f"INFO it={r['step']}, train/loss={_num(r['loss'])}, gnorm={_num(r['grad_norm'])}, learning_rate={r['lr']:g}"
            for r in rows
        ]
    elif shape == "megatron":
        lines = [
            f" iteration {r['step']:8d}/  500000 | consumed samples: {r['step'] * 512:10d} | "
            f"elapsed time per iteration (ms): 1234.5 | learning rate: {r['lr']:.3E} | global batch size:   512 | "
            f"lm loss: {_num(r['loss'])} | loss scale: 65536.0 | grad norm: {_num(r['grad_norm'])} | "
            f"number of skipped iterations:   0 | number of nan iterations:   0 |"
            for r in rows
        ]
        lines.insert(
            3, "validation loss at iteration 3 | lm loss value: 9.99E+01 | lm loss PPL: 1.0E+43 |"
        )
    elif shape == "jsonl":
        lines = [
            json.dumps(
                {
                    "trainer": {"global_step": r["step"]},
                    "train": {"loss": r["loss"]},
                    "grad_norm": r["grad_norm"],
                    "lr": r["lr"],
                    "val_loss": 0.1,
                }
            )
            for r in rows
        ]
    elif shape == "csv":
        lines = ["epoch,iteration,val_loss,train_loss,grad-norm,lr"]
        lines += [
            f"0,{r['step']},0.1,{_num(r['loss'])},{_num(r['grad_norm'])},{r['lr']}" for r in rows
        ]
    elif shape == "tsv":
        lines = ["epoch\titeration\tval_loss\ttrain_loss\tgrad-norm\tlr"]
        lines += [
            f"0\t{r['step']}\t0.1\t{_num(r['loss'])}\t{_num(r['grad_norm'])}\t{r['lr']}"
            for r in rows
        ]
    elif shape == "hf":  # Hugging Face Trainer stdout: printed dicts (bare nan), no step key
        lines = [
            str(
                {
                    "loss": r["loss"],
                    "grad_norm": r["grad_norm"],
                    "learning_rate": r["lr"],
                    "epoch": round(r["step"] / STEPS, 2),
                }
            )
            for r in rows
        ]
        lines.append("{'train_runtime': 12.5, 'train_loss': 2.3, 'epoch': 1.0}")
    path.write_text("\n".join(lines) + "\n")
    return path


SHAPES = {
    "plain": "train.log",
    "keyvalue": "train.log",
    "megatron": "megatron.log",
    "jsonl": "metrics.jsonl",
    "csv": "metrics.csv",
    "tsv": "metrics.tsv",
    "hf": "trainer.log",
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_spiking_history_timeline(tmp_path, shape):
    hist = _logs.read_history(_write(tmp_path / SHAPES[shape], shape, _history()))
    assert len(hist.steps) == STEPS
    tl = _logs.analyze(hist)
    assert tl.status == "nan"
    assert (tl.precursor_step, tl.warning_step, tl.danger_step, tl.nan_step) == (
        PRECURSOR,
        WARNING,
        DANGER,
        NAN,
    )
    assert tl.precursor_lead == WARNING - PRECURSOR
    assert tl.restart_step == PRECURSOR - 1
    assert tl.suggested_lr == pytest.approx(LR / 2)
    assert 1.9 <= tl.level <= 2.2


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_healthy_history_is_healthy(tmp_path, shape):
    tl = _logs.analyze(
        _logs.read_history(_write(tmp_path / SHAPES[shape], shape, _history(spiking=False)))
    )
    assert tl.status == "healthy"
    assert tl.warning_step is tl.nan_step is tl.precursor_step is tl.restart_step is None


@pytest.mark.parametrize(
    "shape, keys",
    [
        (
            "megatron",
            {
                "step": "iteration",
                "loss": "lm_loss",
                "grad_norm": "grad_norm",
                "lr": "learning_rate",
            },
        ),
        (
            "jsonl",
            {
                "step": "trainer_global_step",
                "loss": "train_loss",
                "grad_norm": "grad_norm",
                "lr": "lr",
            },
        ),
        ("csv", {"step": "iteration", "loss": "train_loss", "grad_norm": "grad_norm", "lr": "lr"}),
        ("tsv", {"step": "iteration", "loss": "train_loss", "grad_norm": "grad_norm", "lr": "lr"}),
        ("hf", {"step": None, "loss": "loss", "grad_norm": "grad_norm", "lr": "learning_rate"}),
        (
            "keyvalue",
            {"step": "it", "loss": "train_loss", "grad_norm": "gnorm", "lr": "learning_rate"},
        ),
    ],
)
def test_keys_are_discovered(tmp_path, shape, keys):
    assert _logs.read_history(_write(tmp_path / SHAPES[shape], shape, _history())).keys == keys


def test_a_lone_spike_that_recovers_at_once_is_a_blip(tmp_path):
    rows = _history(spiking=False)
    rows[300]["loss"] *= 20
    tl = _logs.analyze(_logs.read_history(_write(tmp_path / "m.jsonl", "jsonl", rows)))
    assert (tl.status, tl.warning_step, tl.blips, tl.restart_step) == (
        "healthy",
        None,
        (300,),
        None,
    )
    rows[301]["loss"] *= 20  # two readings up, then back: a spike, not a blip, not divergence
    tl = _logs.analyze(_logs.read_history(_write(tmp_path / "m.jsonl", "jsonl", rows)))
    assert (tl.status, tl.warning_step, tl.danger_step, tl.restart_step) == (
        "diverging",
        300,
        301,
        299,
    )


def test_founding_example(tmp_path):
    """The diverging run this project was started for: a short log, warning 6100, NaN 6400."""
    values = ["2.451", "2.432", "2.445", "2.410", "25.842", "842.15", "15402.9", "nan"]
    lines = [f"step {5700 + 100 * i} | loss {v} | lr 3e-4" for i, v in enumerate(values)]
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    tl = _logs.analyze(_logs.read_history(tmp_path / "train.log"))
    assert (tl.status, tl.warning_step, tl.nan_step) == ("nan", 6100, 6400)
    assert tl.restart_step is not None and tl.restart_step <= 6000
    assert tl.restart_from == "last healthy step" and tl.suggested_lr == pytest.approx(1.5e-4)


def test_precursor_is_the_onset_of_the_run_of_grad_spikes(tmp_path):
    rows = _history()
    rows[100]["grad_norm"] *= 50  # an isolated early spike, 300 steps before the run
    hist = _logs.read_history(_write(tmp_path / "m.jsonl", "jsonl", rows))
    assert _logs.analyze(hist).precursor_step == PRECURSOR
    assert _logs.analyze(hist, lookback=400).precursor_step == 100
    rows = _history()
    for r in rows[PRECURSOR:WARNING]:
        r["grad_norm"] /= 50  # no precursor at all: the loss jumps unannounced
    tl = _logs.analyze(_logs.read_history(_write(tmp_path / "n.jsonl", "jsonl", rows)))
    assert tl.precursor_step is None and tl.restart_step == WARNING - 1


def test_spike_ratio_is_configurable(tmp_path):
    rows = _history(spiking=False)
    for r in rows[300:320]:
        r["loss"] *= 1.4
    hist = _logs.read_history(_write(tmp_path / "m.jsonl", "jsonl", rows))
    assert _logs.analyze(hist).status == "healthy"
    tl = _logs.analyze(hist, loss=SpikeConfig(ratio=1.3))
    assert (tl.status, tl.warning_step) == ("diverging", 300)


def test_tensorboard_event_file(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    for r in _history():
        writer.add_scalar("train/loss", r["loss"], r["step"])
        writer.add_scalar("train/grad_norm", r["grad_norm"], r["step"])
        writer.add_scalar("lr", r["lr"], r["step"])
    writer.close()
    event_file = next(tmp_path.glob("events.out.tfevents.*"))
    tl = _logs.analyze(_logs.read_history(event_file))
    assert (tl.precursor_step, tl.warning_step, tl.nan_step, tl.restart_step) == (
        PRECURSOR,
        WARNING,
        NAN,
        PRECURSOR - 1,
    )


def test_unreadable_inputs(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        _logs.read_history(tmp_path / "missing.log")
    (tmp_path / "noise.log").write_text("hello world\nnothing to see here 42\n")
    with pytest.raises(InputError, match="no training loss found"):
        _logs.read_history(tmp_path / "noise.log")
    (tmp_path / "broken.jsonl").write_text('{"loss": 1}\n{"loss": \n{"loss": 2}\n')
    with pytest.raises(InputError, match="line 2: not JSON"):
        _logs.read_history(tmp_path / "broken.jsonl")


def _guard_log(
    path: Path,
    steps: int,
    overflow: tuple[int, ...] = (),
    nan_at: int | None = None,
    tail: str = "",
) -> Path:
    """A log in the training guard's shape: step rows, fp16 overflow rows, a real NaN event."""
    lines = []
    for step in range(steps):
        row = {"step": step, "rank": 0, "loss": 2.0 + 0.01 * (step % 3), "grad_norm": 1.0, "lr": LR}
        if step in overflow:
            row |= {"action": "scaler_skip", "grad_norm": "inf" if step % 2 else "nan"}
            lines.append(json.dumps({**row, "kind": "scaler_overflow", "severity": "info"}))
        elif step == nan_at:
            row |= {"action": "skip", "loss": "nan", "grad_norm": "nan"}
            lines.append(json.dumps({**row, "kind": "nonfinite", "severity": "error"}))
        lines.append(json.dumps({**row, "kind": "step", "action": row.get("action", "step")}))
    path.write_text("\n".join(lines) + "\n" + tail)
    return path


def test_fp16_scaler_overflow_rows_are_not_nan(tmp_path, capsys):
    path = _guard_log(tmp_path / "guard.jsonl", 60, overflow=(0, 1, 2, 3, 30))
    tl = _logs.analyze(_logs.read_history(path))
    assert tl.status == "healthy" and tl.nan_step is None
    assert tl.guard_events == {"scaler_overflow": 5}
    assert logs_cli.run(_args(path)) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "healthy"
    real = _guard_log(tmp_path / "nan.jsonl", 60, overflow=(0, 1, 2), nan_at=40)
    assert _logs.analyze(_logs.read_history(real)).nan_step == 40


def test_torn_last_line_of_a_guard_log_is_ignored(tmp_path):
    torn = '{"time": 1.5, "step": 60, "rank": 0, "kind": "st'  # a crash mid-write
    path = _guard_log(tmp_path / "guard.jsonl", 60, tail=torn)
    hist = _logs.read_history(path)
    assert len(hist.steps) == 60 and _logs.analyze(hist).status == "healthy"
    assert _cli(str(path)).returncode == 0
    path.write_text(path.read_text() + "\n" + '{"step": 61, "loss": 2.0}\n')
    with pytest.raises(InputError, match="line 61: not JSON"):  # torn in the middle: corrupt
        _logs.read_history(path)


def test_text_log_that_starts_with_a_printed_dict(tmp_path):
    rows = _history()
    lines = ["{'lr': 0.0001, 'batch_size': 512, 'model': 'gpt2', 'fp16': True}"]
    lines += [
        f"step {r['step']} loss {_num(r['loss'])} grad_norm {_num(r['grad_norm'])}" for r in rows
    ]
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    hist = _logs.read_history(tmp_path / "train.log")
    assert hist.format == "text" and len(hist.steps) == STEPS
    assert _logs.analyze(hist).nan_step == NAN
    (tmp_path / "json_config.log").write_text('{"lr": 0.0001}\n' + "\n".join(lines[1:]) + "\n")
    hist = _logs.read_history(tmp_path / "json_config.log")
    assert hist.format == "text" and _logs.analyze(hist).nan_step == NAN


def _args(path: Path, *extra: str) -> argparse.Namespace:
    """Parse through the real ``logs`` subparser, so defaults are the CLI's."""
    parser = argparse.ArgumentParser()
    logs_cli.add_parser(parser.add_subparsers())
    return parser.parse_args(["logs", str(path), "--format", "json", *extra])


def test_run_in_process(tmp_path, capsys):
    path = _write(tmp_path / "train.log", "plain", _history())
    assert logs_cli.run(_args(path)) == 1
    out = json.loads(capsys.readouterr().out)
    assert (out["status"], out["warning_step"], out["precursor_step"], out["restart_step"]) == (
        "nan",
        450,
        400,
        399,
    )
    assert logs_cli.run(_args(path, "--format", "text")) == 1
    text = capsys.readouterr().out
    assert (
        "precursor  step 400" in text
        and "warning    step 450" in text
        and "restart from step 399" in text
    )
    with pytest.raises(UsageError, match="ratio=1.0 must be > 1"):
        logs_cli.run(_args(path, "--spike-factor", "1"))
    assert (
        logs_cli.run(_args(path, "--lookback", "10")) == 1
    )  # the spikes are a run: onset still 400
    assert json.loads(capsys.readouterr().out)["precursor_step"] == PRECURSOR


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "datacheck", "logs", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_exit_codes_and_json(tmp_path):
    spiking = _write(tmp_path / "metrics.csv", "csv", _history())
    healthy = _write(tmp_path / "ok.jsonl", "jsonl", _history(spiking=False))
    proc = _cli(str(spiking), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["status"], out["warning_step"], out["precursor_step"], out["nan_step"]) == (
        "nan",
        450,
        400,
        480,
    )
    assert out["restart_step"] == 399 and out["suggested_lr"] == pytest.approx(5e-5)
    proc = _cli(str(healthy))
    assert proc.returncode == 0 and "status: healthy" in proc.stdout
    proc = _cli(str(tmp_path / "nope.log"))
    assert (
        proc.returncode == 2
        and proc.stderr.startswith("datacheck: error:")
        and "no such file" in proc.stderr
    )


def test_logs_does_not_import_torch():
    code = "import sys, datacheck._logs, datacheck.cli; datacheck.cli.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
