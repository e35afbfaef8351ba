"""Training logs in the exact shapes trainers print them, written by the tests themselves.

Each writer takes one run (:class:`Run`: per logged step the loss, grad norm and LR) and
writes it the way that trainer would, with its counters, evaluation lines, checkpoint lines and
the noise around them (printed configs, timestamps, progress bars).  The shapes were studied on
public logs; no third-party log is copied here.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

NAN = math.nan


@dataclass
class Run:
    """One run: ``steps`` logged every ``every`` steps; ``checkpoints`` at these steps."""

    steps: list[int]
    loss: list[float]
    grad_norm: list[float]
    lr: list[float]
    checkpoints: list[int] = field(default_factory=list)
    evals: list[int] = field(default_factory=list)


def make_run(
    n: int = 60,
    every: int = 10,
    *,
    spike_at: int | None = None,
    nan_at: int | None = None,
    grad_from: int | None = None,
    lr: float = 3e-4,
    level: float = 2.4,
    seed: int = 0,
) -> Run:
    """A stable run; from ``grad_from`` the grad norm climbs, at ``spike_at`` the loss jumps
    2x and stays up, from ``nan_at`` everything is NaN.  Checkpoints every 20 readings."""
    rng = random.Random(seed)
    run = Run([], [], [], [])
    for i in range(n):
        step = i * every
        loss = level * (1 + 0.3 * math.exp(-i / 10)) * math.exp(rng.gauss(0, 0.01))
        gnorm = 0.3 * math.exp(rng.gauss(0, 0.05))
        if grad_from is not None and step >= grad_from:
            gnorm *= 10 ** (1 + (step - grad_from) / every)
        if spike_at is not None and step >= spike_at:
            loss *= 2.0 + 0.5 * (step - spike_at) / every
        if nan_at is not None and step >= nan_at:
            loss = gnorm = NAN
        run.steps.append(step)
        run.loss.append(loss)
        run.grad_norm.append(gnorm)
        run.lr.append(lr)
        if i and i % 20 == 0:
            run.checkpoints.append(step)
        if i and i % 25 == 0:
            run.evals.append(step)
    return run


def _f(v: float, fmt: str = ".4f") -> str:
    return "nan" if math.isnan(v) else format(v, fmt)


def megatron(run: Run) -> str:
    """Megatron-LM / Megatron-DeepSpeed ``training_log`` lines (rank prefix, ``|`` fields)."""
    out = [
        "using world size: 8, data-parallel-size: 8, tensor-model-parallel size: 1",
        "  lr .............................................. 0.1",
        "  train_iters ..................................... 1000",
    ]
    for s, loss, g, lr in zip(run.steps, run.loss, run.grad_norm, run.lr, strict=True):
        nan_iters = 1 if math.isnan(loss) else 0
        fields = [
            f" iteration {s:8d}/    1000",
            f"consumed samples: {s * 512:12d}",
            "elapsed time per iteration (ms): 1234.5",
            f"learning rate: {lr:.3E}",
            "global batch size:   512",
            f"lm loss: {_f(loss, '.6E')}",
            "loss scale: 4096.0",
            f"grad norm: {_f(g, '.3f')}",
            "num zeros: 0.0",
            "number of skipped iterations:   0",
            f"number of nan iterations: {nan_iters:3d}",
        ]
        out.append("[default0]:" + " | ".join(fields) + " |")
        if s in run.evals:
            out += [
                "-" * 80,
                f" validation loss at iteration {s} | lm loss value: {_f(loss * 1.05, '.6E')} | "
                "lm loss PPL: 1.2E+01 |",
                "-" * 80,
            ]
        if s in run.checkpoints:
            out.append(f"saving checkpoint at iteration {s:8d} to /ckpt/run1")
            out.append(f"  successfully saved checkpoint at iteration {s:8d} to /ckpt/run1")
    return "\n".join(out) + "\n"


def nanogpt(run: Run) -> str:
    """nanoGPT: the printed config, ``iter N: loss`` lines, ``step N: train loss, val loss``."""
    out = [
        "Overriding config with config/train_gpt2.py:",
        "learning_rate = 6e-4 # max learning rate",
        "max_iters = 600000 # total number of training iterations",
        "weight_decay = 1e-1",
        "min_lr = 6e-5",
        "best_val_loss = 1e9",
        "tokens per iteration will be: 491,520",
        "step 0: train loss 10.9800, val loss 10.9900",
    ]
    for s, loss, _g, _lr in zip(run.steps, run.loss, run.grad_norm, run.lr, strict=True):
        if s in run.evals:
            out.append(f"step {s}: train loss {_f(loss)}, val loss {_f(loss * 1.02)}")
            out.append("saving checkpoint to out")
        out.append(f"iter {s}: loss {_f(loss)}, time 1097.30ms, mfu 15.34%")
    return "\n".join(out) + "\n"


def hf_console(run: Run, per_epoch: int = 50) -> str:
    """Hugging Face Trainer stdout: printed dicts (bare ``nan``), eval dicts, checkpoint lines."""
    out = ["***** Running training *****", "  Num examples = 1000", "  Num Epochs = 3"]
    for s, loss, g, lr in zip(run.steps, run.loss, run.grad_norm, run.lr, strict=True):
        rec = {"loss": round(loss, 4), "grad_norm": g, "learning_rate": lr}
        out.append(str({**rec, "epoch": round(s / (per_epoch * 10), 4)}))
        if s in run.evals:
            epoch = round(s / (per_epoch * 10), 4)
            out.append(
                str({"eval_loss": round(loss * 1.1, 4), "eval_runtime": 1.5, "epoch": epoch})
            )
        if s in run.checkpoints:
            out.append(f"Saving model checkpoint to out/checkpoint-{s}")
    out.append("{'train_runtime': 12.5, 'train_samples_per_second': 80.0, 'train_loss': 2.3}")
    return "\n".join(out) + "\n"


def trainer_state(run: Run) -> str:
    """Hugging Face ``trainer_state.json`` with train and eval records in ``log_history``."""
    history: list[dict[str, object]] = []
    for s, loss, g, lr in zip(run.steps, run.loss, run.grad_norm, run.lr, strict=True):
        history.append(
            {"epoch": s / 100, "grad_norm": g, "learning_rate": lr, "loss": loss, "step": s}
        )
        if s in run.evals:
            history.append({"epoch": s / 100, "eval_loss": loss * 1.1, "step": s})
    state = {"global_step": run.steps[-1], "epoch": 3.0, "log_history": history}
    return json.dumps(state, indent=2)


def keras(run: Run, batches: int = 300) -> str:
    """Keras ``fit`` (verbose=1) captured in a file: ``Epoch i/n`` then the batch line."""
    out = []
    for i, (loss, _g) in enumerate(zip(run.loss, run.grad_norm, strict=True), 1):
        out.append(f"Epoch {i}/{len(run.loss)}")
        out.append(
            f"{batches}/{batches} [==============================] - 2s 5ms/step - "
            f"loss: {_f(loss)} - accuracy: 0.8000 - val_loss: {_f(loss * 1.1)} - val_accuracy: 0.7"
        )
    return "\n".join(out) + "\n"


def fairseq(run: Run) -> str:
    """fairseq-train: ``train_inner`` lines, ``valid`` lines, checkpoint and overflow notes."""
    out = ["2020-03-23 11:00:00 | INFO | fairseq_cli.train | Namespace(lr=[0.0005], fp16=True)"]
    for s, loss, g, lr in zip(run.steps, run.loss, run.grad_norm, run.lr, strict=True):
        out.append(
            f"2020-03-23 11:39:44 | INFO | train_inner | epoch 003:      5 / 356 "
            f"loss={_f(loss, '.3f')}, nll_loss={_f(loss * 0.9, '.3f')}, ppl=347.28, wps=30690.8, "
            f"ups=0.07, wpb=427295, bsz=14390.4, num_updates={s}, lr={lr:g}, "
            f"gnorm={_f(g, '.3f')}, loss_scale=128, train_wall=1281, wall=9877"
        )
        if s in run.evals:
            out.append(
                f"2020-03-23 11:38:31 | INFO | valid | epoch 002 | valid on 'valid' subset | "
                f"loss {_f(loss * 0.95, '.3f')} | nll_loss 8.328 | ppl 321.26 | wps 84912.1 | "
                f"num_updates {s} | best_loss 9.393"
            )
        if s in run.checkpoints:
            out.append(
                "2020-03-23 11:38:37 | INFO | fairseq.checkpoint_utils | saved checkpoint "
                f"checkpoints/checkpoint2.pt (epoch 2 @ {s} updates, score 9.393) "
                "(writing took 5.76 seconds)"
            )
    return "\n".join(out) + "\n"


def mmengine(run: Run, per_epoch: int = 735) -> str:
    """mmengine / xtuner: ``Epoch(train) [e][i/n]`` lines with two-space separated fields."""
    out = ["10/30 22:10:00 - mmengine - INFO - Config:", "optim_wrapper = dict(lr=0.0002)"]
    for s, loss, g, lr in zip(run.steps, run.loss, run.grad_norm, run.lr, strict=True):
        epoch, i = divmod(s, per_epoch)
        out.append(
            f"10/30 22:18:02 - mmengine - INFO - Epoch(train) [{epoch + 1}][{i:>3}/{per_epoch}]  "
            f"lr: {lr:.4e}  eta: 2:46:39  time: 2.8906  data_time: 0.0042  memory: 10762  "
            f"loss: {_f(loss)}  grad_norm: {_f(g)}"
        )
        if s in run.checkpoints:
            out.append(f"10/30 22:18:05 - mmengine - INFO - Saving checkpoint at {s} iterations")
    return "\n".join(out) + "\n"


def lightning(run: Run, per_epoch: int = 100) -> str:
    """PyTorch Lightning's progress bar in a file: carriage-return redraws, ``loss=`` in it."""
    out = [
        "GPU available: True (cuda), used: True",
        "  | Name  | Type   | Params",
        "0 | model | GPT | 1.2 M",
    ]
    line = ""
    for s, loss, _g, _lr in zip(run.steps, run.loss, run.grad_norm, run.lr, strict=True):
        epoch, k = divmod(s, per_epoch)
        pct = int(100 * (k + 1) / per_epoch)
        line += (
            f"\rEpoch {epoch}:  {pct}%|####      | {k + 1}/{per_epoch} "
            f"[00:01<00:00, 30.12it/s, loss={_f(loss, '.3f')}, v_num=0]"
        )
    out.append(line)
    return "\n".join(out) + "\n"


def yolo_csv(run: Run) -> str:
    """YOLOv5 ``results.csv``: padded headers, box/obj/cls components, a constant column."""
    head = ["epoch", "train/box_loss", "train/obj_loss", "train/cls_loss", "metrics/mAP_0.5"]
    head += ["val/box_loss", "val/obj_loss", "val/cls_loss", "x/lr0", "x/lr1", "x/lr2"]
    out = [",".join(f"{h:>20}" for h in head)]
    for i, (loss, lr) in enumerate(zip(run.loss, run.lr, strict=True)):
        box, obj = loss * 0.02, loss * 0.01
        vals = [i, box, obj, 0, 0.5, box * 1.1, obj * 1.1, 0, lr, lr, lr]
        out.append(",".join(f"{v:>20.6g}" for v in vals))
    return "\n".join(out) + "\n"


def guard_jsonl(run: Run, **extra_events: list[dict[str, object]]) -> str:
    """The training guard's own log: step rows plus event rows."""
    lines = []
    for s, loss, g, lr in zip(run.steps, run.loss, run.grad_norm, run.lr, strict=True):
        row = {"step": s, "rank": 0, "loss": _j(loss), "grad_norm": _j(g), "lr": lr}
        for ev in extra_events.get("events", []):
            if ev["step"] == s:
                lines.append(json.dumps({**row, "action": "skip", **ev}))
        lines.append(json.dumps({**row, "kind": "step", "action": "step"}))
    return "\n".join(lines) + "\n"


def _j(v: float) -> float | str:
    return "nan" if math.isnan(v) else v


def write(path: Path, text: str) -> Path:
    """Write ``text`` and return the path."""
    path.write_text(text)
    return path
