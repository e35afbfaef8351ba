"""Roles by what the fields do, on line shapes from the trainers' own logging code (each test
names the repository and file whose format string it uses; the values are the run's own).

A counter rises line by line and a clock or an ETA is none; the loss is the per-step objective:
the per-step value over a running mean beside it, the printed total over its components (never
their sum); a value is read however it is spelled (a tensor's repr, quoted, in brackets, after
full-width punctuation, behind colour codes); a dead fp16 run, an evaluation NaN and a loss the
trainer left out are never healthy.
"""

# ruff: noqa: UP031 - the trainers' own %-format strings, kept as they write them

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import _trainers as tr
import pytest
import torch

from datacheck.cli import main

NAN = math.nan
NAN_AT, SPIKE_AT = 400, 330


def _timeline(tmp_path: Path, text: str) -> tuple[dict, int]:
    path = tmp_path / "train.log"
    path.write_text(text, encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["logs", str(path), "--format", "json"])
    return json.loads(out.getvalue()), code


def _runs() -> dict[str, tr.Run]:
    return {
        "healthy": tr.make_run(seed=5),
        "nan": tr.make_run(seed=5, nan_at=NAN_AT),
        "spike": tr.make_run(seed=5, spike_at=SPIKE_AT),
    }


def _rows(run: tr.Run) -> list[tuple[int, float, float, float]]:
    return list(zip(run.steps, run.loss, run.grad_norm, run.lr, strict=True))


def _expect(tl: dict, code: int, scenario: str, at: float) -> None:
    """Healthy exit 0; NaN and spike at the log's own step ``at`` (the run's 400 or 330)."""
    if scenario == "healthy":
        assert (code, tl["status"]) == (0, "healthy"), tl
    elif scenario == "nan":
        assert (code, tl["status"], tl["nan_step"]) == (1, "nan", at), tl
    else:
        assert code == 1 and tl["status"] in ("spike", "diverging"), tl
        assert tl["warning_step"] == at, tl


# -- a tensor's repr is its value ---------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["healthy", "nan", "spike"])
def test_print_of_a_loss_tensor_is_its_value(tmp_path, scenario):
    """``print(loss)`` in a hand-written loop: torch itself writes ``tensor(2.3117,
    grad_fn=<MulBackward0>)`` (and ``tensor(nan, ...)``); no counter, so the readings count."""
    run = _runs()[scenario]
    lines = [str(torch.tensor(v, requires_grad=True) * 1.0) for v in run.loss]
    assert lines[0].startswith("tensor(") and "grad_fn=" in lines[0]
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    _expect(tl, code, scenario, run.steps.index(NAN_AT if scenario == "nan" else SPIKE_AT))
    assert tl["step_source"] == "row number"


def test_a_tensor_after_its_key_is_read(tmp_path):
    """``print(f"step {i} loss={loss}")`` with the tensor itself (torch writes the repr)."""
    run = _runs()["nan"]
    text = "".join(
        f"step {s} loss={torch.tensor(v, requires_grad=True) * 1.0}\n" for s, v, _, _ in _rows(run)
    )
    tl, code = _timeline(tmp_path, text)
    _expect(tl, code, "nan", NAN_AT)
    assert tl["keys"]["loss"] == "loss"


# -- DL4J: the score is the loss, "at iteration N" its counter ----------------------------------


@pytest.mark.parametrize("scenario", ["healthy", "nan", "spike"])
def test_dl4j_score_at_iteration(tmp_path, scenario):
    """deeplearning4j/deeplearning4j@3204d916d7 deeplearning4j-nn/src/main/java/org/
    deeplearning4j/optimize/listeners/ScoreIterationListener.java: ``log.info("Score at
    iteration {} is {}", iteration, score)`` (slf4j prints a double as Java does: ``NaN``)."""
    run = _runs()[scenario]
    text = "".join(
        "15:01:02.123 [main] INFO  o.d.o.l.ScoreIterationListener - "
        f"Score at iteration {s} is {'NaN' if math.isnan(v) else repr(v)}\n"
        for s, v, _, _ in _rows(run)
    )
    tl, code = _timeline(tmp_path, text)
    _expect(tl, code, scenario, NAN_AT if scenario == "nan" else SPIKE_AT)
    assert (tl["keys"]["step"], tl["keys"]["loss"]) == ("iteration", "score")


# -- quoted keys, bracketed keys, full-width punctuation, qualifiers -----------------------------


@pytest.mark.parametrize("scenario", ["healthy", "nan"])
def test_paddledetection_quoted_stats(tmp_path, scenario):
    """PaddlePaddle/PaddleDetection (release/0.5) tools/train.py: ``'iter: {}, lr: {:.6f}, {},
    eta: {}, batch_cost: {:.5f} sec, ips: {:.5f} images/sec'`` with ``TrainingStats.log()``:
    ``', '.join(str(dict({x: y})).strip('{}') for x, y in d.items())`` over formatted strings."""
    run = _runs()[scenario]
    lines = []
    for s, v, _, lr in _rows(run):
        stats = {
            "loss_cls": "%.6f" % (v * 0.6),
            "loss_bbox": "%.6f" % (v * 0.4),
            "loss": "%.6f" % v,
        }
        logs = ", ".join(str(dict({x: y})).strip("{}") for x, y in stats.items())
        strs = "iter: {}, lr: {:.6f}, {}, eta: {}, batch_cost: {:.5f} sec, ips: {:.5f} images/sec"
        lines.append(
            "2020-12-22 08:01:34,034-INFO: " + strs.format(s, lr, logs, "8:56:30", 0.32, 6.1)
        )
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    _expect(tl, code, scenario, NAN_AT)
    assert (tl["keys"]["step"], tl["keys"]["loss"]) == ("iter", "loss")


@pytest.mark.parametrize("scenario", ["healthy", "nan"])
def test_bracketed_keys(tmp_path, scenario):
    """JITrench.jl's examples: ``@printf "[iters] %4i [loss] %.2f\\n" iter loss.values``; the key
    in brackets, the counter padded."""
    run = _runs()[scenario]
    text = "".join("[iters] %4i [loss] %.2f\n" % (s, v) for s, v, _, _ in _rows(run))
    tl, code = _timeline(tmp_path, text)
    _expect(tl, code, scenario, NAN_AT)
    assert (tl["keys"]["step"], tl["keys"]["loss"]) == ("iters", "loss")


@pytest.mark.parametrize("scenario", ["healthy", "nan"])
def test_full_width_colon(tmp_path, scenario):
    """The PyTorch tutorial loops in Chinese (xiaotudui's train.py and its many copies):
    ``print("训练次数：{}, Loss：{}".format(total_train_step, loss.item()))``."""
    run = _runs()[scenario]
    text = "-------第 1 轮训练开始------\n" + "".join(
        f"训练次数：{s + 100}, Loss：{v}\n" for s, v, _, _ in _rows(run)
    )
    tl, code = _timeline(tmp_path, text)
    _expect(tl, code, scenario, NAN_AT + 100)
    assert tl["keys"]["loss"] == "loss"


def test_a_key_with_a_qualifier_in_parentheses(tmp_path):
    """Lightning-AI/litgpt pull 1055 (litgpt/finetune/lora.py as proposed): ``Ep {} | iter {} |
    step {}: loss train (curr): {:.3f}, val (prev val iter): None | iter time: {:.2f} ms``."""
    run = _runs()["nan"]
    text = "".join(
        f"Ep 1 | iter {s} | step {s // 4}: loss train (curr): {v:.3f}, val (prev val iter): None"
        f" | iter time: {120.5:.2f} ms\n"
        for s, v, _, _ in _rows(run)
    )
    tl, code = _timeline(tmp_path, text)
    _expect(tl, code, "nan", NAN_AT)
    assert (tl["keys"]["step"], tl["keys"]["loss"]) == ("iter", "loss_train_curr")


def test_colour_codes_that_lost_their_escape_still_mark_an_evaluation(tmp_path):
    """facebookresearch/flashy (audiocraft's solver) logs ``Train Summary | Epoch N | ...`` and
    ``Valid Summary | ...`` in bold; pasted from a terminal the escapes go and ``[1m``/``[0m``
    stay.  The valid lines stay evaluation lines, so the training series has one reading a
    step."""
    lines = []
    for e in range(1, 30):
        ce = 0.090 + 0.001 * (e % 3)
        lines.append(f"[1mTrain Summary | Epoch {e} | lr=5.6E-02 | ce={ce:.3f} | ppl=1.095[0m")
        lines.append(f"[1mValid Summary | Epoch {e} | ce={ce - 0.001:.3f} | ppl=1.093[0m")
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (code, tl["status"], tl["keys"]["loss"]) == (0, "healthy", "ce")
    assert (tl["readings"], tl["eval_readings"]) == (29, 29)


# -- the counter: first on the line, in brackets; a clock and an ETA are none -------------------


@pytest.mark.parametrize("scenario", ["healthy", "nan", "spike"])
def test_counter_before_a_pipe(tmp_path, scenario):
    """karpathy/llama2.c@4cc0696565 train.py: ``print(f"{iter_num} | loss {lossf:.4f} | lr
    {lr:e} | {dt*1000:.2f}ms | mfu {running_mfu*100:.2f}%")``."""
    run = _runs()[scenario]
    text = "".join(
        f"{s} | loss {v:.4f} | lr {lr:e} | {123.4:.2f}ms | mfu {41.2:.2f}%\n"
        for s, v, _, lr in _rows(run)
    )
    tl, code = _timeline(tmp_path, text)
    _expect(tl, code, scenario, NAN_AT if scenario == "nan" else SPIKE_AT)
    assert tl["keys"]["step"] == "column_1"


def test_one_reading_under_a_leading_counter(tmp_path):
    """The same llama2.c line, once (a run that died at its first log): the leading whole
    number is still its step."""
    text = "100000 | loss nan | lr 0.000000e+00 | 2006.12ms | mfu 1.68%\n"
    tl, code = _timeline(tmp_path, text)
    assert (code, tl["status"], tl["nan_step"]) == (1, "nan", 100000)


@pytest.mark.parametrize("scenario", ["healthy", "nan"])
def test_an_eta_in_days_is_no_counter(tmp_path, scenario):
    """open-mmlab/mmcv@041f2446cf mmcv/runner/hooks/logger/text.py: ``Epoch [{}][{}/{}]\\t``,
    ``f'eta: {eta_str}, '`` with ``eta_str = str(datetime.timedelta(seconds=int(eta_sec)))``
    (``6 days, 15:22:46``), ``time: {:.3f}``, then ``{name}: {val:.4f}`` joined by ``, ``."""
    import datetime

    run = _runs()[scenario]
    lines = []
    for s, v, g, lr in _rows(run):
        eta = str(datetime.timedelta(seconds=int(600000 - 1000 * s + (s % 7) * 90000)))
        log = f"Epoch [1][{s + 100}/62598]\tlr: {lr:.3e}, eta: {eta}, time: {0.539:.3f}, "
        log += f"data_time: {0.012:.3f}, memory: 10762, "
        log += ", ".join(f"{k}: {x:.4f}" for k, x in (("loss", v), ("grad_norm", g)))
        lines.append("2021-05-01 10:00:00,123 - mmocr - INFO - " + log)
    assert "days, " in lines[0]
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    _expect(tl, code, scenario, NAN_AT + 100)
    assert tl["keys"]["step"] != "eta"


@pytest.mark.parametrize("scenario", ["healthy", "spike"])
def test_caffe_table_without_its_header_a_clock_is_no_loss(tmp_path, scenario):
    """BVLC/caffe tools/extra/parse_log.sh writes ``#Iters Seconds TrainingLoss LearningRate``
    rows; without the header line the seconds (rising on every row) are a clock, and the loss
    is the next column."""
    run = _runs()[scenario]
    text = "".join(f"{s}  {43763.2 + 1.08 * s:.6f}  {v!r}   0.001\n" for s, v, _, _ in _rows(run))
    tl, code = _timeline(tmp_path, text)
    _expect(tl, code, scenario, SPIKE_AT)
    assert (tl["keys"]["step"], tl["keys"]["loss"]) == ("column_1", "column_3")


# -- which loss: per-step over a running mean, the total over its parts --------------------------


@pytest.mark.parametrize("scenario", ["healthy", "spike"])
def test_nvidia_bert_step_loss_over_the_running_average(tmp_path, scenario):
    """NVIDIA/DeepLearningExamples@042e8724f0 PyTorch/LanguageModeling/BERT/run_pretraining.py:
    ``dllogger.log(step=(epoch, global_step, ), data={"average_loss": ..., "step_loss": ...,
    "learning_rate": ...})`` through DLLogger's stdout backend (``DLL {time} - Training Epoch:
    {} Training Iteration: {}  {key} : {value}``).  The mean of the interval lags a jump the
    per-step loss shows; summing them would double the level."""
    run = _runs()[scenario]
    lines, window = [], []
    for s, v, _, lr in _rows(run):
        window = [*window[-9:], v]
        avg = sum(window) / len(window)
        lines.append(
            f"DLL 2020-05-29 11:31:45.763470 - Training Epoch: 0 Training Iteration: {s}  "
            f"average_loss : {avg}  step_loss : {v}  learning_rate : {lr}"
        )
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    _expect(tl, code, scenario, SPIKE_AT)
    assert tl["keys"]["loss"] == "step_loss"


def test_the_per_batch_loss_over_the_epoch_average(tmp_path):
    """A hand-written loop printing ``logging.info(f"Epoch {e} - Batch loss: {loss.item():.4f}")``
    per batch and ``f"Epoch {e} - Average Train Loss: {avg:.4f}"`` per epoch: the batch jump is
    seen (the epoch average hides it)."""
    lines = []
    for e in range(1, 4):
        losses = [1.1 - 0.01 * i for i in range(40)]
        if e == 3:
            losses[20:] = [9.9 + 0.1 * i for i in range(20)]
        lines += [
            f"2025-03-02 05:16:20,962 - INFO - Epoch {e} - Batch loss: {x:.4f}" for x in losses
        ]
        lines.append(
            f"2025-03-02 05:24:38,655 - INFO - Epoch {e} - Average Train Loss: "
            f"{sum(losses) / len(losses):.4f}"
        )
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (code, tl["keys"]["loss"]) == (1, "batch_loss")
    assert tl["status"] in ("spike", "diverging")


def test_the_printed_total_over_its_components(tmp_path):
    """ultralytics/yolov5 (v5.0) train.py, read in its indexed copies: ``('\\n' + '%10s' * 8) %
    ('Epoch', 'gpu_mem', 'box', 'obj', 'cls', 'total', 'labels', 'img_size')`` then
    ``('%10s' * 2 + '%10.4g' * 6) % ('%g/%g' % (epoch, epochs - 1), mem, *mloss, ...)`` where
    ``mloss`` ends with the total: the total is read, never added to its parts."""
    run = _runs()["nan"]
    out = []
    n = len(run.steps)
    for k, (_s, v, _g, _lr) in enumerate(_rows(run)):
        out.append(
            ("\n" + "%10s" * 8)
            % ("Epoch", "gpu_mem", "box", "obj", "cls", "total", "labels", "img_size")
        )
        parts = [v * 0.5, v * 0.3, v * 0.2]
        row = ("%10s" * 2 + "%10.4g" * 6) % (
            "%g/%g" % (k, n - 1),
            "2.64G",
            *parts,
            sum(parts),
            4,
            416,
        )
        out.append(row + ": 100%|##########| 7/7 [00:15<00:00,  2.27s/it]")
    tl, code = _timeline(tmp_path, "\n".join(out) + "\n")
    assert (code, tl["status"], tl["keys"]["loss"]) == (1, "nan", "total_loss")
    assert tl["nan_step"] == run.steps.index(NAN_AT)


def test_yolov5_console_components_without_a_total(tmp_path):
    """ultralytics/yolov5 (v6.0) train.py: ``('\\n' + '%10s' * 7) % ('Epoch', 'gpu_mem', 'box',
    'obj', 'cls', 'labels', 'img_size')``: the bare names under that header are the loss parts."""
    run = _runs()["nan"]
    out = []
    n = len(run.steps)
    for k, (_s, v, _g, _lr) in enumerate(_rows(run)):
        out.append(
            ("\n" + "%10s" * 7) % ("Epoch", "gpu_mem", "box", "obj", "cls", "labels", "img_size")
        )
        row = ("%10s" * 2 + "%10.4g" * 5) % (
            "%g/%g" % (k, n - 1),
            "2.64G",
            v * 0.6,
            v * 0.25,
            v * 0.15,
            4,
            416,
        )
        out.append(row + ": 100%|##########| 7/7 [00:15<00:00,  2.27s/it]")
    tl, code = _timeline(tmp_path, "\n".join(out) + "\n")
    assert (code, tl["status"], tl["keys"]["loss"]) == (1, "nan", "box_loss+cls_loss+obj_loss")


def test_a_total_by_what_it_holds(tmp_path):
    """A total named by no word (``sum``, ``all``...), only by being the sum of the others on
    every line (detectron2-style ``loss_cls: .. loss_box_reg: .. loss_mask: ..`` plus their sum
    under another name): it is taken alone."""
    lines = []
    for s in range(0, 600, 10):
        parts = {"loss_cls": 0.4 + s / 1e4, "loss_box_reg": 0.3, "loss_mask": 0.2}
        parts["loss_rpn"] = round(sum(parts.values()), 4)
        if s == 400:
            parts = {k: NAN for k in parts}
        lines.append(f"iter: {s}  " + "  ".join(f"{k}: {v:.4f}" for k, v in parts.items()))
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert tl["keys"]["loss"] == "loss_rpn" and "their total" in tl["reasons"]["loss"]
    assert (code, tl["status"], tl["nan_step"]) == (1, "nan", 400)


# -- never healthy: a dead fp16 run, a NaN evaluation, a loss left out --------------------------


def test_deepspeed_loss_scale_stuck_at_its_floor(tmp_path):
    """microsoft/DeepSpeed deepspeed/runtime/fp16/loss_scaler.py (DynamicLossScaler):
    ``next_scale = max(self.cur_scale / self.scale_factor, self.min_scale)`` and
    ``f"[deepspeed] OVERFLOW! Rank {dist.get_rank()} Skipping step."`` + ``f" Attempted loss
    scale: {int(self.cur_scale)}, reducing to {int(next_scale)}"``: at ``min_scale`` 1 every
    step overflows and is skipped, redrawn after the HF Trainer's tqdm bar."""
    lines = []
    for step in range(90, 110):
        bar = f"  0%|  | {step}/24128 [00:40<2:40:10,  2.50it/s]"
        lines.append(
            bar + "[2021-11-27 00:36:54,800] [INFO] [stage2.py:1628:step] [deepspeed] OVERFLOW! "
            "Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1"
        )
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (code, tl["status"], tl["scale_warning_step"]) == (1, "warning", 90)
    assert "floor" in tl["scale_warning"]


def test_deepspeed_delayed_shift_is_no_floor(tmp_path):
    """Older DeepSpeed printed the same scale while hysteresis delayed the shift (``Attempted
    loss scale: 1048576.0, reducing to 1048576.0``), then halved it: no floor, no warning."""
    lines = []
    for i, s in enumerate(range(100, 700, 10)):
        lines.append(f"step {s} loss {2.0 - i / 1000:.4f}")
        if i % 20 == 10:
            lines.append(
                "[deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536.0, "
                "reducing to 65536.0"
            )
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (code, tl["status"], tl["scale_warning_step"]) == (0, "healthy", None)


def test_an_evaluation_nan_is_never_healthy(tmp_path):
    """The Hugging Face Trainer's ``on_log`` print: ``{'eval_loss': nan, ...}`` over a finite
    training loss (transformers trainer_callback.py ProgressCallback.on_log)."""
    lines = []
    for i in range(1, 40):
        epoch = round(i * 0.13, 2)
        lines.append(
            str({"loss": round(1.6 - i / 1000, 4), "learning_rate": 0.0029, "epoch": epoch})
        )
        if i == 20:
            lines.append(str({"eval_loss": NAN, "eval_wer": 100.0, "epoch": epoch}))
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (code, tl["status"], tl["nan_step"]) == (1, "nan", 2.6)
    assert "evaluation" in tl["nan_signal"]


def test_megatron_leaves_a_nan_loss_out(tmp_path):
    """NVIDIA/Megatron-LM megatron/training.py ``training_log``: ``if avg > 0.0: log_string +=
    ' {}: {:.6E} |'.format(key, avg)`` (a NaN is not > 0) and ``if grad_norm is not None:``
    (a skipped step has none): the NaN iteration's line has the LR and the loss scale only."""
    lines = []
    for it in range(3300, 3400):
        line = f" iteration {it:8d}/    8000 | learning rate: {6.68e-06:.3E} |"
        line += f" global batch size: {64:5d} |"
        if it != 3385:
            line += f" lm loss: {0.73 - it / 1e5:.6E} | loss scale: 1.0 | grad norm: {0.75:.3f} |"
        else:
            line += " loss scale: 1.0 |"
        lines.append(line)
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (code, tl["status"], tl["nan_step"]) == (1, "nan", 3385)
    assert "left out" in tl["nan_signal"]


def test_a_skipped_megatron_step_is_no_nan(tmp_path):
    """The same line with ``number of skipped iterations: 1`` (an fp16 overflow skipped the
    step, so no loss and no grad norm): an overflow, not a NaN."""
    lines = []
    for it in range(3300, 3400):
        skipped = int(it == 3385)
        line = f" iteration {it:8d}/    8000 | learning rate: {6.68e-06:.3E} |"
        if not skipped:
            line += f" lm loss: {0.73 - it / 1e5:.6E} | loss scale: 65536.0 | grad norm: 0.750 |"
        else:
            line += " loss scale: 32768.0 |"
        line += f" number of skipped iterations: {skipped:3d} | number of nan iterations:   0 |"
        lines.append(line)
    tl, _ = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert tl["status"] != "nan" and tl["nan_step"] is None


def test_detectron2_anomaly_in_words(tmp_path):
    """facebookresearch/detectron2@64e112b41f detectron2/engine/train_loop.py
    ``_detect_anomaly``: ``"Loss became infinite or NaN at iteration={}!\\nloss_dict = {}"``
    is the only sign in a crashed run's log."""
    text = (
        "ERROR [02/10 22:55:41 d2.engine.train_loop]: Exception during training:\n"
        "Traceback (most recent call last):\n"
        '  File "/x/detectron2/engine/train_loop.py", line 132, in train\n'
        "    self.run_step()\n"
        "FloatingPointError: Loss became infinite or NaN at iteration=2137!\n"
    )
    tl, code = _timeline(tmp_path, text)
    assert (code, tl["status"]) == (1, "nan")


@pytest.mark.parametrize("scenario", ["healthy", "nan", "spike"])
def test_caffe_glog_source_lines_are_no_counter(tmp_path, scenario):
    """BVLC/caffe src/caffe/solver.cpp (``Solver::Step``, read in its indexed copies):
    ``"Iteration " << iter_ << " (" << per_s << " iter/s, " << lapse << "s/" <<
    param_.display() << " iters), loss = " << smoothed_loss_``, then ``"    Train net output #"
    << score_index++ << ": " << output_name << " = " << result_vec[k]`` with ``" (* " <<
    loss_weight << " = " << loss_weight * result_vec[k] << " loss)"``; sgd_solver.cpp's
    ``"Iteration " << iter_ << ", lr = " << rate``; ``Test net output`` lines in the test
    phase.  glog's prefix names the source line (``solver.cpp:218]``), which alternates between
    call sites: never a counter, and the clock is none either."""
    run = _runs()[scenario]
    lines = []
    for s, v, _, lr in _rows(run):
        at = f"I0612 10:{s // 60 % 60:02d}:{s % 60:02d}.{s:06d} 12345"
        lines.append(
            f"{at} solver.cpp:218] Iteration {s} (1.23 iter/s, 16.2s/20 iters), loss = {v:g}"
        )
        lines.append(
            f"{at} solver.cpp:237]     Train net output #0: loss = {v:g} (* 1 = {v:g} loss)"
        )
        lines.append(f"{at} sgd_solver.cpp:105] Iteration {s}, lr = {lr:g}")
        if s % 100 == 0:
            lines.append(f"{at} solver.cpp:330] Iteration {s}, Testing net (#0)")
            lines.append(f"{at} solver.cpp:397]     Test net output #0: accuracy = 0.91")
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    _expect(tl, code, scenario, NAN_AT if scenario == "nan" else SPIKE_AT)
    assert (tl["keys"]["step"], tl["keys"]["loss"]) == ("iteration", "loss")


def test_a_key_after_a_unit_word_is_kept(tmp_path):
    """A duration word ends a value only as a word: ``min_lr`` after a number is a key."""
    text = "".join(f"epoch {e} min_lr 0.0001 loss {2 - e / 100:.3f}\n" for e in range(1, 60))
    text += "epoch 60 min_lr 0.0001 loss nan\n"
    tl, code = _timeline(tmp_path, text)
    assert (code, tl["keys"]["step"], tl["nan_step"]) == (1, "epoch", 60)


@pytest.mark.parametrize("unit", ["ms", "s", "GB", "MiB", "it"])
def test_a_glued_unit_is_no_key_of_the_counter_after_it(tmp_path, unit):
    """``loss 1.0 time 97.30ms 1 step``: the unit glued to a duration (or a size) belongs to
    its number; it never takes the next number as its own value, so the counter printed
    before its word is still the step (a lowercase unit is no capitalised word glued on,
    as ``44.4110Batch`` is)."""
    lines = []
    for k in range(1, 41):
        loss = "nan" if k == 30 else f"{2.3 - k / 100:.4f}"
        lines.append(f"loss {loss} time {97.3 + k:.2f}{unit} {k} step")
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (code, tl["keys"]["step"], tl["nan_step"]) == (1, "step", 30)


def test_an_lr_printed_on_its_own_line_is_no_loss_left_out(tmp_path):
    """A scheduler's own line (``Epoch N learning rate: X``) beside Megatron-style lines has
    the LR alone: not the loss line's shape, so no NaN."""
    lines = []
    for it in range(3300, 3400):
        lines.append(
            f" iteration {it:8d}/    8000 | learning rate: 6.680E-06 | lm loss: 7.0E-01 |"
            " loss scale: 1.0 | grad norm: 0.750 |"
        )
        if it % 20 == 0:
            lines.append(f"Epoch {it // 20} learning rate: 0.001")
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (code, tl["status"]) == (0, "healthy")


@pytest.mark.parametrize("scenario", ["healthy", "nan"])
def test_mxnet_speedometer_cross_entropy(tmp_path, scenario):
    """apache/mxnet python/mxnet/callback.py ``Speedometer``: ``'Epoch[%d] Batch [%d]\\tSpeed:
    %.2f samples/sec\\t%s=%f'`` over the metric's ``get_name_value()`` (``cross-entropy``), and
    module/base_module.py's ``'Epoch[%d] Train-%s=%f'`` / ``'Epoch[%d] Time cost=%.3f'``."""
    run = _runs()[scenario]
    lines = []
    for k, (_s, v, _, _) in enumerate(_rows(run)):
        epoch, batch = divmod(k, 10)
        lines.append(
            "INFO:root:Epoch[%d] Batch [%d]\tSpeed: %.2f samples/sec\t%s=%f"
            % (epoch, batch * 20, 1000.0, "cross-entropy", v)
        )
        if batch == 9:
            lines.append("INFO:root:Epoch[%d] Train-%s=%f" % (epoch, "accuracy", 0.5))
            lines.append("INFO:root:Epoch[%d] Time cost=%.3f" % (epoch, 10.5))
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    _expect(tl, code, scenario, 4 * 200)  # run step 400 is reading 40: epoch 4, batch 0
    assert tl["keys"]["loss"] == "cross_entropy"


@pytest.mark.parametrize("scenario", ["healthy", "nan"])
def test_xgboost_rmse_is_the_objective(tmp_path, scenario):
    """dmlc/xgboost python-package/xgboost/callback.py ``EvaluationMonitor``: ``f"[{epoch}]"``
    then ``"\\t" + f"{data}-{metric}:{score}"`` per data set (``train-rmse``, ``eval-rmse``)."""
    run = _runs()[scenario]
    text = "".join(
        f"[{k}]\ttrain-rmse:{v:.5f}\teval-rmse:{v * 1.1:.5f}\n"
        for k, (_s, v, _, _) in enumerate(_rows(run))
    )
    tl, code = _timeline(tmp_path, text)
    _expect(tl, code, scenario, 40)
    assert (tl["keys"]["loss"], tl["keys"]["eval_loss"]) == ("train_rmse", "eval_rmse")


def test_numpy_scalars_in_a_printed_dict(tmp_path):
    """numpy 2 writes a scalar's repr with its type (``np.float32(2.31)``), so a loop's
    ``print({"loss": loss, "step": step})`` of numpy values is no Python literal: each value is
    still read (written here by numpy itself)."""
    import numpy as np

    run = _runs()["nan"]
    text = "".join(
        str({"loss": np.float32(v), "grad_norm": np.float64(g), "step": s}) + "\n"
        for s, v, g, _ in _rows(run)
    )
    assert "np.float32(" in text
    tl, code = _timeline(tmp_path, text)
    _expect(tl, code, "nan", NAN_AT)
    assert (tl["keys"]["step"], tl["keys"]["loss"]) == ("step", "loss")


def test_a_one_element_tensor_after_its_key(tmp_path):
    """``print(f"step {i} loss={loss}")`` of a shape-[1] tensor: torch writes ``tensor([2.3100])``."""
    run = _runs()["nan"]
    text = "".join(f"step {s} loss={torch.tensor([v])}\n" for s, v, _, _ in _rows(run))
    assert "tensor([" in text
    tl, code = _timeline(tmp_path, text)
    _expect(tl, code, "nan", NAN_AT)


@pytest.mark.parametrize("clock", ["elapsed", "timestamp", "time_s"])
def test_a_clock_is_no_counter(tmp_path, clock):
    """The rule, on a loop printing its epoch and a clock in whole seconds on every line: the
    clock rises finer than the epoch, but it counts time, not steps; the epoch is the counter."""
    lines = []
    for k in range(150):
        epoch, loss = k // 50 + 1, "nan" if k == 120 else f"{2.3 - k / 1000:.4f}"
        lines.append(f"epoch {epoch} {clock} {1700000000 + 7 * k} loss {loss}")
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (code, tl["keys"]["step"], tl["nan_step"]) == (1, "epoch", 3)


def test_the_counter_on_the_readings_own_lines(tmp_path):
    """NVIDIA/DeepLearningExamples@042e8724f0 PyTorch/LanguageModeling/BERT/run_pretraining.py
    logs ``dllogger.log(step="PARAMETER", data={"checkpoint_step": global_step})`` on its own
    line after each reading's line: it rises like the iteration, but the iteration is on the
    readings' lines (the checkpoint step, carried forward, would drop the first reading)."""
    lines = []
    for k, s in enumerate(range(1787, 2800, 100)):
        loss = "nan" if k == 7 else f"{2.3 - k / 100}"
        lines.append(
            f"DLL 2020-05-29 11:31:45.763470 - Training Epoch: 0 Training Iteration: {s}  "
            f"average_loss : 2.3  step_loss : {loss}  learning_rate : 0.005"
        )
        lines.append(f"DLL 2020-05-29 11:31:45.763713 - PARAMETER checkpoint_step : {s} ")
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    assert (code, tl["keys"]["step"], tl["nan_step"]) == (1, "training_iteration", 2487)
    assert tl["readings"] == 11


# -- more trainers' own shapes: a bar's description, Unix clocks, boxes, boosting libraries -----


@pytest.mark.parametrize("scenario", ["healthy", "nan", "spike"])
def test_diffusers_steps_bar_percentage_is_no_counter(tmp_path, scenario):
    """huggingface/diffusers examples/text_to_image/train_text_to_image.py: ``tqdm(range(0,
    args.max_train_steps), desc="Steps")`` and ``progress_bar.set_postfix(**{"step_loss": ..,
    "lr": ..})``: ``Steps:  45%|####5  | 45/100 [..., lr=0.0003, step_loss=2.41]``. The
    percentage after the description belongs to the bar; the bar's count is the step."""
    run = _runs()[scenario]
    total = run.steps[-1] + 10
    text = "".join(
        f"Steps: {100 * s // total:3d}%|{'#' * (10 * s // total):<10}| {s}/{total} "
        f"[00:10<00:20,  1.50it/s, lr={lr:g}, step_loss={v:.3g}]\r"
        for s, v, _, lr in _rows(run)
    )
    tl, code = _timeline(tmp_path, text + "\n")
    _expect(tl, code, scenario, NAN_AT if scenario == "nan" else SPIKE_AT)
    assert (tl["keys"]["step"], tl["keys"]["loss"]) == ("bar", "step_loss")


@pytest.mark.parametrize("unit", [1, 1000])
def test_a_column_of_unix_times_is_no_counter(tmp_path, unit):
    """mlflow/mlflow mlflow/store/tracking/file_store.py writes each metric's file as
    ``"%s %s %s" % (metric.timestamp, metric.value, metric.step)`` (milliseconds); a loop's
    ``print(time.time(), loss, step)`` in seconds: the time rises too, but the step counts."""
    run = _runs()["nan"]
    text = "".join(
        f"{1700000000 * unit + 1537 * k * unit // 1000} {v} {s}\n"
        for k, (s, v, _, _) in enumerate(_rows(run))
    )
    tl, code = _timeline(tmp_path, text)
    assert (code, tl["keys"]["step"], tl["nan_step"]) == (1, "column_3", NAN_AT)


@pytest.mark.parametrize("scenario", ["healthy", "nan", "spike"])
@pytest.mark.parametrize("sections", [True, False], ids=["sb3", "baselines"])
def test_boxed_records_one_row_per_box(tmp_path, scenario, sections):
    """DLR-RM/stable-baselines3 stable_baselines3/common/logger.py ``HumanOutputFormat.write``:
    a dashed rule, ``| {section}/ | |`` lines with ``|    {key} | {value:<8.3g} |`` under them,
    a dashed rule; openai/baselines's (sections-free) the same without them. One record per
    box, its loss at the box's counter: ``iterations``, ``total_timesteps`` and ``n_updates``
    rise alike, and the name breaks the tie (``--step total_timesteps`` reads SB3's own x-axis,
    which names its checkpoints)."""
    run = _runs()[scenario]
    boxes = []
    for k, (s, v, _, lr) in enumerate(_rows(run)):
        cells = {
            "rollout/": None,
            "ep_rew_mean": -1160.0 + k,
            "time/": None,
            "fps": 1163,
            "iterations": k + 1,
            "total_timesteps": s,
            "train/": None,
            "approx_kl": 0.0071,
            "learning_rate": lr,
            "loss": v,
            "n_updates": 10 * (k + 1),
        }
        lines = ["-" * 41]
        for key, value in cells.items():
            if value is None:
                if sections:
                    lines.append(f"| {key:<23} | {'':<11} |")
                continue
            shown = "%-8.3g" % value if isinstance(value, float) else str(value)
            lines.append(f"| {'   ' + key if sections else key:<23} | {shown:<11} |")
        lines.append("-" * 41)
        boxes.append("\n".join(lines))
    tl, code = _timeline(tmp_path, "\n".join(boxes) + "\n")
    at = run.steps.index(NAN_AT if scenario == "nan" else SPIKE_AT) + 1  # its iteration
    _expect(tl, code, scenario, at)
    assert tl["keys"]["step"] == "iterations" and tl["keys"]["loss"] == "loss"
    assert tl["readings"] == len(run.steps)


def test_an_evaluation_box_is_an_evaluation(tmp_path):
    """A box whose only loss sits under ``eval/`` is an evaluation record: its NaN is the
    evaluation's, never a healthy run's."""
    rule = "-" * 41
    train = [
        f"{rule}\n| train/ |  |\n|    loss | {2.0 - k / 100:<8.3g} |\n|    n_updates | {k} |\n{rule}"
        for k in range(1, 30)
    ]
    ev = f"{rule}\n| eval/ |  |\n|    loss | nan      |\n| time/ |  |\n|    total_timesteps | 30 |\n{rule}"
    tl, code = _timeline(tmp_path, "\n".join([*train, ev]) + "\n")
    assert code == 1 and tl["status"] != "healthy", tl


@pytest.mark.parametrize("scenario", ["healthy", "nan"])
def test_catboost_learn_is_the_objective(tmp_path, scenario):
    """catboost's verbose output: ``{iter}:\\tlearn: {v}\\ttest: {v}\\tbest: {v} ({best_iter})
    \\ttotal: {t}ms\\tremaining: {t}ms``: ``learn`` is the objective on the training set, the
    leading number the iteration (``best (N)`` stalls where the test metric stops improving)."""
    run = _runs()[scenario]
    lines, best = [], (math.inf, 0)
    for k, (s, v, _, _) in enumerate(_rows(run)):
        test = v + 0.1 + (0.01 * (k - 20) if k > 20 else 0)
        if test == test and test < best[0]:
            best = (test, s)
        lines.append(
            f"{s}:\tlearn: {v:.7f}\ttest: {test:.7f}\tbest: {best[0]:.7f} ({best[1]})"
            f"\ttotal: {5 * k + 3}ms\tremaining: {max(1, 300 - 5 * k)}ms"
        )
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    _expect(tl, code, scenario, NAN_AT)
    assert (tl["keys"]["step"], tl["keys"]["loss"]) == ("column_1", "learn")


@pytest.mark.parametrize("metric", ["l2", "binary_logloss", "multi_logloss"])
def test_lightgbm_log_evaluation(tmp_path, metric):
    """microsoft/LightGBM python-package/lightgbm/callback.py ``log_evaluation``:
    ``[{iteration + 1}]\\t`` + ``"\\t".join(f"{data}'s {metric}: {value:g}")``: the boosting
    library's metric of its objective is the loss."""
    run = _runs()["nan"]
    text = "".join(
        f"[{s}]\ttraining's {metric}: {v:g}\tvalid_1's {metric}: {v + 0.1:g}\n"
        for s, v, _, _ in _rows(run)
    )
    tl, code = _timeline(tmp_path, text)
    assert (code, tl["status"], tl["nan_step"]) == (1, "nan", NAN_AT), tl


@pytest.mark.parametrize("keras", [2, 3])
@pytest.mark.parametrize("scenario", ["healthy", "nan"])
def test_keras_fit_verbose_2_one_line_an_epoch(tmp_path, keras, scenario):
    """keras-team/keras keras/utils/generic_utils.py ``Progbar.update`` (Keras 2) and
    keras/src/utils/progbar.py (Keras 3) with ``model.fit(verbose=2)``: the ``Epoch i/n``
    header, then one line an epoch, ``{current}/{target} - {time}s - ...`` and no bar: the
    epochs are the steps, the NaN at its epoch."""
    run = _runs()[scenario]
    lines = []
    for e, (_, v, _, _) in enumerate(_rows(run), start=1):
        lines.append(f"Epoch {e}/{len(run.steps)}")
        metrics = f"loss: {v:.4f} - accuracy: 0.9150 - val_loss: {v + 0.1:.4f}"
        if keras == 2:
            lines.append(f"938/938 - 3s - {metrics} - 3s/epoch - 3ms/step")
        else:
            lines.append(f"938/938 - 3s - 3ms/step - {metrics}")
    tl, code = _timeline(tmp_path, "\n".join(lines) + "\n")
    _expect(tl, code, scenario, run.steps.index(NAN_AT) + 1)
    assert tl["keys"]["step"] == "epoch"


def test_a_two_column_table_under_a_rule_is_no_box(tmp_path):
    """``| 10 | 2.34 |`` rows (a notebook's two-column table, under a dashed rule) are rows of a
    table, not a box's cells: each is a reading, its step the first column."""
    rule = "-" * 24
    rows = [f"| {10 * k} | {'nan' if k == 40 else f'{2.3 - k / 100:.4f}'} |" for k in range(1, 60)]
    tl, code = _timeline(
        tmp_path, "\n".join([rule, "| Step | Training Loss |", rule, *rows]) + "\n"
    )
    assert (code, tl["nan_step"], tl["readings"]) == (1, 400, 59), tl
