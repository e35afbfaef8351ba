"""The minimal reproductions of issue 24, each read right: the objective under another name, a
NaN in a repeated step, the log's own counter wherever it sits, loss-scale lines that are no
fall, a level of one reading, the restart before the drift, glued numbers, LR spellings."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from datacheck import _logs
from datacheck.cli import main


def _timeline(tmp_path: Path, text: str, name: str = "train.log") -> tuple[dict, int]:
    path = tmp_path / name
    path.write_text(text)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["logs", str(path), "--format", "json"])
    return json.loads(out.getvalue()), code


def test_a_dead_run_whose_loss_is_called_cost_is_not_healthy(tmp_path):
    text = (
        "Ep. 1 : Up. 100 : Cost 314.0 : gNorm 20126.2\n"
        "Ep. 1 : Up. 200 : Cost 211.4 : gNorm 35733.2\n"
        "Ep. 1 : Up. 300 : Cost nan : gNorm 41172.8\n"
    )
    tl, code = _timeline(tmp_path, text)
    assert (code, tl["status"], tl["nan_step"], tl["keys"]["loss"]) == (1, "nan", 300, "cost")
    assert tl["keys"]["step"] == "up" and "rises" in tl["reasons"]["step"]


@pytest.mark.parametrize("name", ["cost", "nll", "ce", "xent", "objective", "ppl", "perplexity"])
def test_every_name_of_the_objective(tmp_path, name):
    text = (
        "".join(f"step {s} {name} {3.0 - s / 100}\n" for s in range(10)) + f"step 10 {name} nan\n"
    )
    tl, code = _timeline(tmp_path, text)
    assert (code, tl["status"], tl["nan_step"]) == (1, "nan", 10)


def test_a_nan_in_a_repeated_step_is_not_dropped(tmp_path):
    tl, code = _timeline(tmp_path, "step 1: loss 2.0\nstep 2: loss 1.9\nstep 2: loss nan\n")
    assert (code, tl["status"], tl["nan_step"], tl["restart_step"]) == (1, "nan", 2, 1)
    assert any("several readings" in n for n in tl["notes"])


def test_litgpt_micro_batches_keep_every_reading(tmp_path):
    lines = []
    for it in range(64):
        loss = "nan" if it >= 57 else f"{2.0 - it / 200:.3f}"
        lines.append(f"Epoch 1 | iter {it} step {it // 8} | loss train: {loss}, val: n/a |")
    tl, _ = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (tl["status"], tl["nan_step"], tl["keys"]["step"]) == ("nan", 57, "iter")


@pytest.mark.parametrize(
    "line, step",
    [
        ("Epoch:[0/2]({s}/293491) loss:{v}", lambda s: s),
        ("Epoch [1/5] Step [{s:04d}/1915]: bow_loss={v}", lambda s: s),
        ("train iter: {s} loss_net: {v}", lambda s: s),
        ("000 epoch, {s:05d} iter, lr 1e-4, loss {v}", lambda s: s),
        ("|    {s}/  300000 steps| loss {v}", lambda s: s),
        ("| epoch 001  {s} / 331737 loss={v}, ppl=12.1", lambda s: s),
        ('{{"global_step/max_steps": "{s}/11043", "loss": {v}}}', lambda s: s),
        ("{s} {v}", lambda s: s),
    ],
)
def test_the_logs_own_counter_wherever_it_sits(tmp_path, line, step):
    steps = list(range(100, 1500, 100))
    lines = [line.format(s=s, v=2.0 + (s % 300) / 1000) for s in steps]
    lines.append(line.format(s=1500, v="NaN" if line.startswith("{") else "nan"))  # json.dumps
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (code, tl["status"], tl["nan_step"], tl["restart_step"]) == (
        1,
        "nan",
        step(1500),
        step(1400),
    ), tl["reasons"]


def test_a_record_printed_over_several_lines(tmp_path):
    lines = []
    for s in range(1, 30):
        lines.append(f"[step={s}/100,epoch=0]")
        lines.append(f"    train/CrossEntropyLoss={'nan' if s == 25 else 2.5 - s / 100}")
        lines.append("    throughput/device/tokens_per_second=12,345")
    tl, _ = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (tl["status"], tl["nan_step"], tl["steps"]) == ("nan", 25, 29)


def test_deepspeed_hysteresis_and_a_constant_scale_are_no_fall(tmp_path):
    lines = []
    for s in range(1, 60):
        if s == 5:
            lines.append(
                "[2025-06-01 10:00:00,123] [INFO] [loss_scaler.py:190:update_scale] [deepspeed] "
                "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but hysteresis "
                "is 2. Reducing hysteresis to 1"
            )
        lines.append(
            f" iteration {s:8d}/    1000 | lm loss: {2.4 - s / 1000:.6E} | loss scale: 1.0 | "
            "grad norm: 0.300 | number of skipped iterations:   0 |"
        )
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (code, tl["status"], tl["scale_warning"]) == (0, "healthy", None)


def test_one_low_first_reading_is_no_level(tmp_path):
    losses = [0.5254, 1.5451, 1.1392, 1.3027, 1.1289, 1.1201, 1.1, 1.12, 1.09]
    text = "".join(f"iter {i}: loss {v}\n" for i, v in enumerate(losses))
    tl, code = _timeline(tmp_path, text)
    assert (code, tl["status"]) == (0, "healthy"), tl


def test_the_restart_is_before_the_first_reading_off_the_plateau(tmp_path):
    losses = {60: 0.047, 61: 0.047, 62: 0.047, 63: 0.047, 64: 0.047, 65: 0.061, 66: 0.096}
    losses |= {67: 0.12, 68: 0.2}
    text = "".join(f"epoch {e} loss {v}\n" for e, v in losses.items())
    tl, _ = _timeline(tmp_path, text)
    assert (tl["warning_step"], tl["restart_step"]) == (66, 64)


def test_a_number_glued_to_the_next_word(tmp_path):
    text = "".join(f"Batch {b}: loss: {2.1 - b / 100}\n" for b in range(1, 10))
    text += "Batch 10: loss: 44.4110Batch 11: Invalid loss\n"
    tl, _ = _timeline(tmp_path, text)
    assert tl["status"] == "nan" and tl["warning_step"] == 10


@pytest.mark.parametrize(
    "field, key",
    [
        ("lr-Adam {lr}", "lr_adam"),
        ("lr/pg0 {lr}", "lr_pg0"),
        ("Learning Rate {lr}", "learning_rate"),
        ("lr=[{lr}, {lr}]", "lr"),
        ("L.r. {lr}", "l_r"),
    ],
)
def test_every_lr_spelling(tmp_path, field, key):
    lines = [f"step {s} loss {2.0} {field.format(lr=1e-4)}" for s in range(0, 150, 10)]
    lines += [f"step {s} loss 9.0 {field.format(lr=1e-3)}" for s in range(150, 200, 10)]
    path = tmp_path / "t.log"
    path.write_text("\n".join(lines) + "\n")
    hist = _logs.read_history(path)
    tl = _logs.analyze(hist)
    assert hist.keys["lr"] == key and tl.suggested_lr == pytest.approx(5e-5)


def test_a_headerless_csv_has_numbered_columns(tmp_path):
    rows = [f"{76930 + 10 * i},{2.65 - i / 1000}" for i in range(20)] + ["77130,nan"]
    tl, code = _timeline(tmp_path, "\n".join(rows) + "\n", name="losses.csv")
    assert (code, tl["status"], tl["nan_step"]) == (1, "nan", 77130)
    assert (tl["keys"]["step"], tl["keys"]["loss"]) == ("column_1", "column_2")


def test_a_gan_prints_both_losses_and_either_may_go_nan(tmp_path):
    lines = [
        f"[Epoch 0/5] [Batch {b}/100] [D loss: {0.5 + b / 1000:.4f}] [G loss: "
        f"{'nan' if b == 80 else f'{1.2 - b / 1000:.4f}'}]"
        for b in range(0, 100, 5)
    ]
    tl, _ = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (tl["status"], tl["nan_step"]) == ("nan", 80), tl["reasons"]
