"""Every trainer's log shape is read with the right step, loss, status, warning/NaN and restart."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import _trainers as tr
import pytest

from datacheck import _logs
from datacheck.errors import InputError
from datacheck.history import Overrides

GRAD_FROM, SPIKE_AT, NAN_AT = 300, 330, 400


def _diverging(**kw: object) -> tr.Run:
    return tr.make_run(grad_from=GRAD_FROM, spike_at=SPIKE_AT, nan_at=NAN_AT, **kw)  # type: ignore[arg-type]


# shape: (file name, writer, step of logged step s, has grad norm, checkpoints named,
#         expected step key, expected loss key)
SHAPES: dict[
    str, tuple[str, Callable[[tr.Run], str], Callable[[int], float], bool, bool, str, str]
] = {
    "megatron": ("train.log", tr.megatron, float, True, True, "iteration", "lm_loss"),
    "nanogpt": ("train.log", tr.nanogpt, float, False, True, "iter", "loss"),
    "hf_console": (
        "trainer.log",
        tr.hf_console,
        lambda s: round(s / 500, 4),
        True,
        True,
        "epoch",
        "loss",
    ),
    "trainer_state": ("trainer_state.json", tr.trainer_state, float, True, False, "step", "loss"),
    "keras": ("fit.log", tr.keras, lambda s: s // 10 + 1, False, False, "epoch", "loss"),
    "fairseq": ("train.log", tr.fairseq, float, True, True, "num_updates", "loss"),
    "mmengine": ("20231030.log", tr.mmengine, float, True, True, "iteration", "loss"),
    "lightning": (
        "lightning.log",
        tr.lightning,
        lambda s: s // 100 + (s % 100 + 1) / 100,
        False,
        False,
        "epoch",
        "loss",
    ),
    "yolo_csv": (
        "results.csv",
        tr.yolo_csv,
        lambda s: s // 10,
        False,
        False,
        "epoch",
        "train_box_loss+train_obj_loss",
    ),
    "guard": ("guard.jsonl", tr.guard_jsonl, float, True, False, "step", "loss"),
}


def _read(tmp_path: Path, shape: str, run: tr.Run) -> _logs.History:
    name, writer, *_ = SHAPES[shape]
    return _logs.read_history(tr.write(tmp_path / name, writer(run)))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_diverging_run(tmp_path, shape):
    _, _, at, grad, ckpt, step_key, loss_key = SHAPES[shape]
    hist = _read(tmp_path, shape, _diverging())
    assert (hist.keys["step"], hist.keys["loss"]) == (step_key, loss_key)
    assert hist.steps[:3] == [at(0), at(10), at(20)] and len(hist.steps) == 60
    tl = _logs.analyze(hist)
    assert (tl.status, tl.warning_step, tl.danger_step, tl.nan_step) == (
        "nan",
        at(SPIKE_AT),
        at(SPIKE_AT + 10),
        at(NAN_AT),
    )
    first_sign = GRAD_FROM if grad else SPIKE_AT
    if grad:
        assert tl.precursor_step == tl.grad_warning_step == at(GRAD_FROM)
    checkpoint = 250 if shape == "nanogpt" else 200  # nanoGPT saves at each eval
    assert (tl.restart_step, tl.restart_from) == (
        (at(checkpoint), "checkpoint") if ckpt else (at(first_sign - 10), "last healthy step")
    )


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_healthy_run(tmp_path, shape):
    tl = _logs.analyze(_read(tmp_path, shape, tr.make_run(seed=3)))
    assert tl.status == "healthy", tl
    assert tl.warning_step is tl.nan_step is tl.restart_step is tl.grad_warning_step is None


@pytest.mark.parametrize("shape", ["megatron", "nanogpt", "hf_console", "fairseq", "trainer_state"])
def test_evaluation_lines_are_their_own_series(tmp_path, shape):
    run = tr.make_run()
    hist = _read(tmp_path, shape, run)
    assert len(hist.eval_steps) >= 2 and hist.keys["eval_loss"]
    at = SHAPES[shape][2]
    for step, loss in zip(hist.steps, hist.loss, strict=True):
        assert loss == pytest.approx(run.loss[run.steps.index(_inverse(at, step))], rel=1e-3)


def _inverse(at: Callable[[int], float], step: float) -> int:
    return next(s for s in range(0, 600, 10) if at(s) == step)


def test_printed_config_before_the_first_log_line_is_not_data(tmp_path):
    hist = _read(tmp_path, "nanogpt", tr.make_run())
    assert hist.keys["lr"] is None  # learning_rate = 6e-4 / min_lr in the printed config
    assert hist.steps[0] == 0 and hist.loss[0] == pytest.approx(tr.make_run().loss[0], rel=1e-3)


def test_tensorboard_run_folder_of_a_resumed_run(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    run = _diverging()
    first = SummaryWriter(str(tmp_path / "run"), filename_suffix=".a")
    for s, loss, g in zip(run.steps, run.loss, run.grad_norm, strict=True):
        first.add_scalar("train/loss", 99.0 if s >= 250 else loss, s)  # the crashed first try
        first.add_scalar("train/grad_norm", g if s < 250 else 1.0, s)
    first.close()
    resumed = SummaryWriter(str(tmp_path / "run"), filename_suffix=".b", purge_step=250)
    for s, loss, g, lr in zip(run.steps, run.loss, run.grad_norm, run.lr, strict=True):
        if s >= 250:
            resumed.add_scalar("train/loss", loss, s)
            resumed.add_scalar("train/grad_norm", g, s)
            resumed.add_scalar("lr", lr, s)
    resumed.close()
    hist = _logs.read_history(tmp_path / "run")
    assert hist.format == "tensorboard" and len(hist.steps) == 60
    assert any("replaced by a restart" in n for n in hist.notes)
    tl = _logs.analyze(hist)
    assert (tl.grad_warning_step, tl.warning_step, tl.nan_step) == (GRAD_FROM, SPIKE_AT, NAN_AT)


def test_keras_epoch_headers_give_the_steps(tmp_path):
    run = tr.make_run(n=6, nan_at=10)
    tl = _logs.analyze(_read(tmp_path, "keras", run))
    assert (tl.status, tl.nan_step, tl.restart_step) == ("nan", 2, 1)


def test_mmengine_epoch_iteration_is_global(tmp_path):
    run = tr.make_run(n=30, every=50, nan_at=1000)
    hist = _read(tmp_path, "mmengine", run)
    assert hist.steps[-1] == 1450 and _logs.analyze(hist).nan_step == 1000


def test_key_choice_is_stable_and_never_a_constant_column(tmp_path):
    rng = random.Random(0)
    cols = ["epoch", "train/z_loss", "train/a_loss", "train/zero_loss", "val/a_loss"]
    lines = [",".join(cols)]
    for i in range(30):
        lines.append(f"{i},{rng.random()},{rng.random()},0,{rng.random()}")
    path = tr.write(tmp_path / "results.csv", "\n".join(lines) + "\n")
    hist = _logs.read_history(path)
    assert hist.keys["loss"] == "train_a_loss+train_z_loss"
    assert hist.keys["eval_loss"] == "val_a_loss"  # no val twin of train_z_loss: not summed


def test_a_total_loss_wins_over_its_components(tmp_path):
    lines = ["step,loss_cls,loss_bbox,total_loss"] + [f"{i},1,2,{3 + i % 2}" for i in range(10)]
    assert (
        _logs.read_history(tr.write(tmp_path / "m.csv", "\n".join(lines))).keys["loss"]
        == "total_loss"
    )


def test_overrides(tmp_path):
    path = tr.write(tmp_path / "train.log", tr.megatron(tr.make_run()))
    hist = _logs.read_history(path, Overrides(loss="lm loss", step="consumed samples"))
    assert hist.keys["loss"] == "lm_loss" and hist.steps[1] == 10 * 512
    with pytest.raises(InputError, match="no key 'val' for --loss"):
        _logs.read_history(path, Overrides(loss="val"))


def test_no_counter_means_row_numbers_and_says_so(tmp_path):
    path = tr.write(tmp_path / "train.log", "".join(f"loss {2 + i / 100}\n" for i in range(20)))
    hist = _logs.read_history(path)
    assert hist.steps == [float(i) for i in range(20)] and hist.step_source == "row number"
    assert any("row numbers" in n for n in hist.notes)


@pytest.mark.parametrize(
    "text, step, signal",
    [
        (
            "[Epoch 64 736512/1281167][Iteration 45457] Train 1792 in 4.3seconds. Loss is 1.26."
            " Current learning rate is 0.0462.\n"
            "[Epoch 64 738304/1281167][Iteration 45458] Train 1792 in 4.4seconds. Loss is"
            " Infinity. Current learning rate is 0.0462.\n",
            45458,
            "loss",
        ),
        (
            " iteration     5426/  250000 | learning rate: 2.999E-04 | loss scale: 1.0 | "
            "grad norm: nan | number of skipped iterations:   0 | number of nan iterations:   0 |\n",
            5426,
            "grad norm",
        ),
        (
            "step 10 loss 2.31\nstep 20 loss 2.30\nWARNING: NaN loss detected, skipping batch\n",
            20,
            "WARNING: NaN loss detected, skipping batch",
        ),
    ],
)
def test_nonfinite_signals_without_a_loss_value(tmp_path, text, step, signal):
    tl = _logs.analyze(_logs.read_history(tr.write(tmp_path / "train.log", text)))
    assert (tl.status, tl.nan_step, tl.nan_signal) == ("nan", step, signal)


def test_megatron_nan_iteration_counter(tmp_path):
    run = tr.make_run()
    text = tr.megatron(run).replace(
        "number of nan iterations:   0", "number of nan iterations:   2", 1
    )
    tl = _logs.analyze(_logs.read_history(tr.write(tmp_path / "t.log", text)))
    assert (tl.status, tl.nan_step, tl.nan_signal) == ("nan", 0, "2 NaN iteration(s)")


def test_fp16_overflow_lines(tmp_path):
    run = tr.make_run()
    lines = tr.megatron(run).splitlines()
    skip = (
        "[2022-01-19 13:09:13,305] [INFO] [stage_1_and_2.py:1644:step] [deepscale] OVERFLOW! "
        "Rank 0 Skipping step. Attempted loss scale: {a}, reducing to {b}"
    )
    one = lines[:20] + [skip.format(a=65536.0, b=32768.0)] + lines[20:]
    tl = _logs.analyze(_logs.read_history(tr.write(tmp_path / "one.log", "\n".join(one))))
    assert tl.status == "healthy"  # one overflow the scaler handled is not divergence
    scale, many = 2.0**20, lines[:30]
    for line in lines[30:40]:
        many += [skip.format(a=scale, b=scale / 2), line]
        scale /= 2
    tl = _logs.analyze(_logs.read_history(tr.write(tmp_path / "many.log", "\n".join(many))))
    assert tl.status == "warning" and tl.scale_warning_step is not None
    assert "fp16 overflows" in (tl.scale_warning or "")
    fairseq = tr.fairseq(run).splitlines()
    fairseq.insert(
        30,
        "2020-03-23 11:41:18 | INFO | fairseq.trainer | NOTE: overflow detected, "
        "setting loss scale to: 0.00048828125",
    )
    tl = _logs.analyze(_logs.read_history(tr.write(tmp_path / "f.log", "\n".join(fairseq))))
    assert tl.status == "warning" and tl.scale_warning == "loss scale collapsed to 0.000488281"


def test_long_tokens_parse_in_linear_time(tmp_path):
    import time

    token = "x" * 200_000
    path = tr.write(
        tmp_path / "t.log", f"step 1 loss 2.0 {token}\nstep 2 loss 2.1 {token}:{token}\n"
    )
    start = time.perf_counter()
    hist = _logs.read_history(path)
    assert time.perf_counter() - start < 2.0 and hist.steps == [1, 2]
    assert not math.isnan(hist.loss[1] or math.nan)


def test_yolo_evaluation_is_the_sum_of_the_same_components(tmp_path):
    run = tr.make_run()
    hist = _read(tmp_path, "yolo_csv", run)
    assert hist.keys["eval_loss"] == "val_box_loss+val_obj_loss"
    assert hist.eval_loss[0] == pytest.approx(run.loss[0] * 0.03 * 1.1, rel=1e-4)


def test_a_restarted_text_log_keeps_every_reading_in_log_order(tmp_path):
    lines = [f"step {s} loss {2 + s / 1000}" for s in range(0, 50)]
    lines += [f"step {s} loss {3 + s / 1000}" for s in range(30, 60)]  # resumed from step 30
    hist = _logs.read_history(tr.write(tmp_path / "t.log", "\n".join(lines)))
    assert hist.steps == [float(s) for s in range(50)] + [float(s) for s in range(30, 60)]
    assert hist.loss[40] == pytest.approx(2.04) and hist.loss[50] == pytest.approx(3.03)
    assert hist.keys["step"] == "step"
    assert any("goes back 1 time(s) (first from 49 to 30)" in n for n in hist.notes)


def test_lightning_csv_logger_step_and_epoch_variants(tmp_path):
    lines = ["epoch,step,train_loss_epoch,train_loss_step,val_loss"]
    for step in range(0, 200, 10):
        lines.append(f"{step // 50},{step},,{2 + step / 1000},")
        if step % 50 == 40:
            lines.append(f"{step // 50},{step},{2.1 + step / 1000},,")
            lines.append(f"{step // 50},{step},,,{2.2 + step / 1000}")
    hist = _logs.read_history(tr.write(tmp_path / "metrics.csv", "\n".join(lines)))
    assert (hist.keys["step"], hist.keys["loss"], hist.keys["eval_loss"]) == (
        "step",
        "train_loss_step",
        "val_loss",
    )
    assert len(hist.steps) == 20 and len(hist.eval_steps) == 4


def test_hf_dict_after_a_progress_bar_redraw(tmp_path):
    run = tr.make_run()
    text = tr.hf_console(run).replace(
        "\n{'loss'", "\n 5%|5    | 50/1000 [00:10<03:10, 4.99it/s]{'loss'"
    )
    hist = _logs.read_history(tr.write(tmp_path / "trainer.log", text))
    assert len(hist.steps) == 60 and hist.keys["loss"] == "loss"


def test_deepspeed_cumulative_skip_counter(tmp_path):
    lines = []
    skipped = 3  # the scaler's calibration at the start: long done
    for step in range(100, 400, 10):
        if step == 300:
            skipped += 6  # six overflow skips within one interval: the scale is collapsing
        lines.append(f"[Rank 0] step={step}, skipped={skipped}, lr=[0.0001], mom=[(0.9, 0.999)]")
        lines.append(f"step {step} loss {2 + (step % 7) / 100}")
    tl = _logs.analyze(_logs.read_history(tr.write(tmp_path / "ds.log", "\n".join(lines))))
    assert (tl.status, tl.scale_warning_step) == ("warning", 300)


@pytest.mark.parametrize(
    "template, key",
    [
        ("epoch: {s} loss: {v}", "epoch"),  # a plain print per epoch
        ("steps {s}, seconds for 100 batch: 45.91 , loss: {v}", "steps"),
        ("Step {s}/1000 | Loss: {v} | LR: 1.0e-04", "step"),
        ("[2024-01-01 10:00:00] global_step={s} train/loss={v} lr=0.0001", "global_step"),
    ],
)
def test_plain_prints(tmp_path, template, key):
    run = tr.make_run(spike_at=330, nan_at=400)
    lines = [template.format(s=s, v=tr._f(v)) for s, v in zip(run.steps, run.loss, strict=True)]
    hist = _logs.read_history(tr.write(tmp_path / "out.log", "\n".join(lines)))
    tl = _logs.analyze(hist)
    assert hist.keys["step"] == key
    assert (tl.status, tl.warning_step, tl.nan_step, tl.restart_step) == ("nan", 330, 400, 320)


def test_minus_infinity_is_a_nonfinite_reading_not_a_missing_one(tmp_path):
    lines = [f"step {s} loss {2 + s / 1000}" for s in range(20)] + ["step 20 loss -inf"]
    tl = _logs.analyze(_logs.read_history(tr.write(tmp_path / "t.log", "\n".join(lines))))
    assert (tl.status, tl.nan_step) == ("nan", 20)
