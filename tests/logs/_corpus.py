"""Training-log shapes made from the trainers' own logging code, not from logs we found.

Each :class:`Shape` writes one run (:class:`_trainers.Run`: a reading every 10 steps) with the
format string its trainer's source uses, recorded in ``source`` as ``repo@commit path:line``
(read in that commit; where only an indexed copy was read, the function is named instead of a
line).  ``at(s)`` is the step the log itself shows for the run's step ``s`` (its own counter:
an epoch combined with its sub-counter, a fractional epoch, ...), so the tests can check that
warnings, NaN and restarts come out in the log's own counter.  Nothing here is copied from a
log: the values are the run's, the text is the format string's.
"""

# ruff: noqa: UP031, UP032 - the trainers' own format strings, kept as they write them

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from _trainers import Run

NAN = math.nan


@dataclass(frozen=True)
class Shape:
    """One trainer's log shape."""

    name: str
    source: str
    write: Callable[[Run], str]
    at: Callable[[int], float] = float
    file: str = "train.log"
    loss: str | None = None
    """The loss key the reader should take (``None``: not checked)."""
    step: str | None = None
    """The step key the reader should take (``None``: not checked)."""
    grad: bool = False
    """The shape prints a grad norm (its NaN comes with the loss's)."""
    notes: tuple[str, ...] = field(default_factory=tuple)


def _rows(run: Run) -> list[tuple[int, float, float, float]]:
    return list(zip(run.steps, run.loss, run.grad_norm, run.lr, strict=True))


def _lines(run: Run, line: Callable[[int, float, float, float], str], head: str = "") -> str:
    out = [head] if head else []
    out += [line(s, loss, g, lr) for s, loss, g, lr in _rows(run)]
    return "\n".join(out) + "\n"


PER_EPOCH = 100
"""Steps an epoch, for the shapes that count steps within an epoch."""


def _epoch(s: int, base: int = 1) -> tuple[int, int]:
    """(epoch counted from ``base``, step within it counted from 1) of run step ``s``."""
    return s // PER_EPOCH + base, s % PER_EPOCH + 1


def _global(s: int) -> float:
    """What ``(epoch - 1) x PER_EPOCH + step`` gives for a 1-based epoch and 1-based step."""
    return float(s + 1)


# -- Megatron and its descendants -------------------------------------------------------------


def megatron_lm(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        log = " [2025-06-01 10:00:00.123456]"
        log += " iteration {:8d}/{:8d} |".format(s, 1000)
        log += " consumed samples: {:12d} |".format(s * 256)
        log += " elapsed time per iteration (ms): {:.1f} |".format(812.3)
        log += f" learning rate: {lr:.6E} |"
        log += f" global batch size: {256:5d} |"
        log += " {}: {:.6E} |".format("lm loss", loss)
        log += f" loss scale: {1.0:.1f} |"  # bf16: the scale is constant at 1.0
        log += f" grad norm: {g:.3f} |"
        log += " number of skipped iterations: {:3d} |".format(0)
        log += " number of nan iterations: {:3d} |".format(int(math.isnan(loss)))
        return log

    return _lines(run, line)


def megatron_deepspeed(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        log = " iteration {:8d}/{:8d} |".format(s, 1000)
        log += " consumed samples: {:12d} |".format(s * 512)
        log += " consumed tokens: {:12d} |".format(s * 512 * 2048)
        log += " elapsed time per iteration (ms): {:.1f} |".format(1234.5)
        log += " learning rate: {:.3E} |".format(lr)
        log += " global batch size: {:5d} |".format(512)
        log += " {}: {:.6E} |".format("lm loss", loss)
        log += " loss scale: {:.1f} |".format(4096.0)
        log += " grad norm: {:.3f} |".format(g)
        log += " actual seqlen: {:5d} |".format(2048)
        log += " number of skipped iterations: {:3d} |".format(0)
        log += " number of nan iterations: {:3d} |".format(int(math.isnan(loss)))
        log += " samples per second: {:.3f} |".format(41.5)
        log += " TFLOPs: {:.2f} |".format(151.25)
        return log

    return _lines(run, line)


def gpt_neox(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        log = " samples/sec: {:.3f} |".format(95.1)
        log += " iteration {:8d}/{:8d} |".format(s, 320000)
        log += " elapsed time per iteration (ms): {:.1f} |".format(2689.4)
        log += " learning rate: {:.3E} |".format(lr)
        log += " approx flops per GPU: 142.9TFLOPS |"
        log += " {}: {:.6E} |".format("lm_loss", loss)
        log += " loss scale: {:.1f} |".format(65536.0)
        log += " number of skipped iterations: {:3d} |".format(0)
        log += " number of nan iterations: {:3d} |".format(int(math.isnan(loss)))
        return log

    return _lines(run, line)


def nemo(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        log = "Training" + f" epoch {s // PER_EPOCH}, iteration {s}/{999}"
        for metric, val in (
            ("lr", lr),
            ("global_batch_size", 32),
            ("global_step", s),
            ("reduced_train_loss", loss),
            ("train_step_timing in s", 0.51),
            ("consumed_samples", (s + 1) * 32),
        ):
            log += f" | {metric}: {val}" if isinstance(val, int) else f" | {metric}: {val:.4}"
        return log

    return _lines(run, line)


# -- DeepSpeed ------------------------------------------------------------------------------


def _ds_prefix(file: str, line: int, func: str) -> str:
    return f"[2025-06-01 10:00:00,123] [INFO] [{file}:{line}:{func}] "


def deepspeed_engine(run: Run) -> str:
    """The engine's step line (rank 0) and the user loop's loss print, with the loss scaler's
    overflow messages: the first overflow only lowers the hysteresis, later ones halve."""
    out, scale, hysteresis = [], 65536, 2
    for k, (s, loss, _g, lr) in enumerate(_rows(run)):
        if k in (3, 9):  # two overflows the scaler handles
            msg = "[deepspeed] OVERFLOW! Rank 0 Skipping step."
            if hysteresis > 1:
                msg += f" Attempted loss scale: {int(scale)}, but hysteresis is {hysteresis}."
                msg += f" Reducing hysteresis to {hysteresis - 1}"
                hysteresis -= 1
            else:
                msg += f" Attempted loss scale: {int(scale)}, reducing to {int(scale / 2)}"
                scale /= 2
            out.append(_ds_prefix("loss_scaler.py", 183, "update_scale") + msg)
        out.append(
            _ds_prefix("engine.py", 2489, "_report_progress")
            + f"[Rank 0] step={s}, skipped={2 if k >= 9 else 1 if k >= 3 else 0}, "
            f"lr=[{lr}, {lr}], mom=[(0.9, 0.999), (0.9, 0.999)]"
        )
        out.append(f"step: {s}, loss: {loss}")
    return "\n".join(out) + "\n"


def deepspeed_chat(run: Run) -> str:
    """Every rank prints every step; the step counts batches within the epoch, from 0."""
    out = []
    for s, loss, _g, _lr in _rows(run):
        for step in range(s, s + 10):  # print_loss prints each step
            e, i = divmod(step, PER_EPOCH)
            for rank in range(2):
                value = loss if step == s else loss * (1 + 0.001 * (step - s))
                out.append(f"Epoch: {e}, Step: {i}, Rank: {rank}, loss = {value}")
    return "\n".join(out) + "\n"


# -- fairseq and its descendants --------------------------------------------------------------


def _fs_prefix(tag: str) -> str:
    return f"2025-06-01 10:00:00 | INFO | {tag} | "


def fairseq_simple(run: Run) -> str:
    """SimpleProgressBar: ``epoch 001:    250 / 356 loss=..., num_updates=...``."""

    def line(s: int, loss: float, g: float, lr: float) -> str:
        e, i = s // PER_EPOCH + 1, s % PER_EPOCH
        prefix = "epoch {:03d}".format(e)
        stats = {
            "loss": "{:.3f}".format(loss),
            "nll_loss": "{:.3f}".format(loss * 0.9),
            "ppl": "{:.2f}".format(2 ** (loss * 0.9)),
            "wps": "{:g}".format(round(30690.8)),
            "ups": "0.07",
            "wpb": "427295",
            "bsz": "14390.4",
            "num_updates": "{:g}".format(s),
            "lr": "{:g}".format(lr),
            "gnorm": "{:.3f}".format(g),
            "loss_scale": "{:g}".format(128),
            "train_wall": "1281",
            "wall": "{:g}".format(9000 + s),
        }
        postfix = ", ".join(key + "=" + stats[key].strip() for key in stats)
        return _fs_prefix("train_inner") + "{}:  {:5d} / {:d} {}".format(
            prefix, i + 1, PER_EPOCH, postfix
        )

    return _lines(run, line)


def fairseq_json(run: Run) -> str:
    """JsonProgressBar: the stats as JSON strings after the logger's prefix."""

    def line(s: int, loss: float, g: float, lr: float) -> str:
        e = s // PER_EPOCH + 1
        stats = {
            "epoch": e,
            "update": round(e - 1 + (s % PER_EPOCH + 1) / PER_EPOCH, 3),
            "loss": "{:.3f}".format(loss),
            "ppl": "{:.2f}".format(2**loss),
            "num_updates": "{:g}".format(s),
            "lr": "{:g}".format(lr),
            "gnorm": "{:.3f}".format(g),
            "loss_scale": "128",
        }
        return _fs_prefix("train_inner") + json.dumps(stats)

    return _lines(run, line)


def fairseq2(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        values = [
            ("Loss", loss),
            ("NLL Loss", loss * 0.95),
            ("Gradient Norm", g),
            ("Data Epoch", 1),
            ("Elapsed Time", "3s"),
            ("Learning Rate", lr),
            ("Loss Scale", 1.0),
            ("Batch Size", 32),
        ]
        body = " | ".join(f"{name}: {value}" for name, value in values)
        return f"[06/01/25 10:00:00] INFO     fairseq2 - Train Metrics (step {s}) - {body}"

    return _lines(run, line)


def metaseq(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        stats = {
            "epoch": 1,
            "update": 0.001 * (s + 1),
            "loss": "{:.3f}".format(loss),
            "ppl": "{:.2f}".format(2**loss),
            "wps": "19834.2",
            "num_updates": str(s),
            "lr": "{:g}".format(lr),
            "gnorm": "{:.3f}".format(g),
            "loss_scale": "8",
            "train_wall": "113",
        }
        return "2025-06-01 10:00:00 | INFO | train_inner | " + json.dumps(stats)

    return _lines(run, line)


# -- Hugging Face and the trainers built on its Trainer --------------------------------------


def hf_progress(logs: dict[str, object]) -> str:
    """``ProgressCallback.on_log`` itself (the installed transformers): floats as ``.4g``."""
    from types import SimpleNamespace

    from transformers.trainer_callback import ProgressCallback, TrainerControl, TrainerState

    written: list[str] = []

    class _Bar:
        def write(self, text: str) -> None:
            written.append(text)

    callback = ProgressCallback()
    callback.training_bar = _Bar()
    state = TrainerState()
    state.is_world_process_zero = True
    callback.on_log(SimpleNamespace(), state, TrainerControl(), logs)  # on_log reads no args
    return written[0]


def _hf(run: Run, extra: Callable[[int, float], dict[str, object]] | None = None) -> str:
    out = ["***** Running training *****", "  Num examples = 6,000", "  Num Epochs = 3"]
    for s, loss, g, lr in _rows(run):
        logs: dict[str, object] = {"loss": loss, "grad_norm": g, "learning_rate": lr}
        logs.update(extra(s, loss) if extra else {})
        logs["epoch"] = round(s / 500, 4)
        out.append(hf_progress(logs))
    return "\n".join(out) + "\n"


def hf_trainer(run: Run) -> str:
    return _hf(run)


def trl_dpo(run: Run) -> str:
    return _hf(
        run,
        lambda s, loss: {
            "rewards/chosen": -0.1 * s / 100,
            "rewards/rejected": -0.3 * s / 100,
            "rewards/accuracies": 0.75,
            "rewards/margins": 0.2,
            "logps/chosen": -120.5,
            "logits/chosen": -1.25,
        },
    )


def ms_swift(run: Run) -> str:
    """ms-swift adds ``global_step/max_steps`` as an ``"N/M"`` string to the Trainer's logs."""
    return _hf(
        run,
        lambda s, loss: {
            "memory(GiB)": 21.3,
            "train_speed(s/it)": 0.52,
            "global_step/max_steps": f"{s}/{600}",
            "percentage": f"{s / 6:.2f}%",
            "elapsed_time": "10m 2s",
            "remaining_time": "20m 1s",
        },
    )


def axolotl(run: Run) -> str:
    return _hf(
        run,
        lambda s, loss: {
            "ppl": math.exp(loss) if loss < 700 else math.inf,
            "tokens_per_second": 9e3,
        },
    )


def llama_factory_jsonl(run: Run) -> str:
    """LLaMA-Factory's ``trainer_log.jsonl`` (LogCallback.on_log)."""
    out = []
    for s, loss, _g, lr in _rows(run):
        rec = {
            "current_steps": s,
            "total_steps": 600,
            "loss": None if math.isnan(loss) else loss,
            "lr": lr,
            "epoch": round(s / 500, 2),
            "percentage": round(100 * s / 600, 2),
            "elapsed_time": "0:01:02",
            "remaining_time": "0:09:00",
        }
        if math.isnan(loss):
            rec["loss"] = "nan"
        out.append(json.dumps(rec))
    return "\n".join(out) + "\n"


def sentence_transformers(run: Run) -> str:
    return _hf(run)


def paddlenlp(run: Run) -> str:
    """PrinterCallback: ``", ".join(f"{k}: {v}" ...)`` after paddle's logger prefix."""

    def line(s: int, loss: float, g: float, lr: float) -> str:
        logs = {
            "loss": round(loss, 8),
            "learning_rate": lr,
            "global_step": s,
            "interval_runtime": 0.1491,
            "interval_samples_per_second": 214.59,
            "interval_steps_per_second": 6.706,
            "progress_or_epoch": round(s / 600, 4),
        }
        return "[2025-06-01 10:00:00,568] [    INFO] - " + ", ".join(
            f"{k}: {v}" for k, v in logs.items()
        )

    return _lines(run, line)


# -- PyTorch ecosystem ------------------------------------------------------------------------


def torchtune(run: Run) -> str:
    """The recipe's bar description on the console, redrawn with \\r."""
    line = ""
    for s, loss, _g, _lr in _rows(run):
        epoch = s // 200
        line += (
            f"\r{epoch + 1}|{s}|Loss: {loss:.4f}:  {100 * s // 600}%|##   | {s}/600 "
            "[00:10<01:30,  2.50it/s]"
        )
    return line + "\n"


def torchtune_disk(run: Run) -> str:
    """DiskLogger's file: ``Step N | key:value key:value``."""
    out = []
    for s, loss, _g, lr in _rows(run):
        line = f"Step {s} | "
        for name, data in (("loss", loss), ("lr", lr), ("tokens_per_second_per_gpu", 1234.5)):
            line += f"{name}:{data} "
        out.append(line)
    return "\n".join(out) + "\n"


def lightning_bar(run: Run) -> str:
    """TQDMProgressBar: ``Epoch e: pct|bar| n/total [time, rate, metrics]`` redrawn with \\r."""
    line = ""
    for s, loss, _g, _lr in _rows(run):
        e, k = divmod(s, PER_EPOCH)
        line += (
            f"\rEpoch {e}:  {k + 1}%|#    | {k + 1}/{PER_EPOCH} "
            f"[00:01<00:00, 30.12it/s, v_num=0, train_loss={loss:.3f}]"
        )
    return "GPU available: True (cuda), used: True\n" + line + "\n"


def lightning_csv(run: Run) -> str:
    """CSVLogger's ``metrics.csv``: the keys of every row as the header."""
    out = ["epoch,step,train_loss,lr-Adam"]
    for s, loss, _g, lr in _rows(run):
        out.append(f"{s // PER_EPOCH},{s},{loss},{lr}")
    return "\n".join(out) + "\n"


def timm(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        epoch, i = divmod(s, PER_EPOCH)
        return (
            f"Train: {epoch} [{i:>4d}/{PER_EPOCH} ({100.0 * (i + 1) / PER_EPOCH:>3.0f}%)]  "
            f"Loss: {loss:#.3g} ({loss:#.3g})  "
            f"Time: {0.215:.3f}s, {1190.2:>7.2f}/s  ({0.22:.3f}s, {1163.5:>7.2f}/s)  "
            f"LR: {lr:.3e}  Data: {0.01:.3f} ({0.012:.3f})"
        )

    return _lines(run, line)


def torchtitan(run: Run) -> str:
    """``MetricsProcessor.log``, in colour (torchtitan colours its logs by default)."""
    red, green, orange, reset = "\033[31m", "\033[32m", "\033[33m", "\033[39m"

    def line(s: int, loss: float, g: float, lr: float) -> str:
        return (
            f"[rank0]:[titan] 2025-06-01 10:00:00,123 - root - INFO - {red}step: {s:2}  "
            f"{green}loss: {loss:8.5f}  {orange}grad_norm: {g:7.4f}  "
            f"\033[36mmemory: {21.5:5.2f}GiB({27.1:.2f}%)  \033[34mtps: {round(7153):,}  "
            f"\033[35mtflops: {414.3:,.2f}  mfu: {41.9:.2f}%{reset}"
        )

    return _lines(run, line)


def litgpt(run: Run) -> str:
    """Four micro-batches a step: ``iter`` counts them, ``step`` the optimizer steps."""
    out = []
    for s, loss, _g, _lr in _rows(run):
        for micro in range(4):
            it = s * 4 + micro
            accumulating = micro < 3
            out.append(
                f"Epoch {s // PER_EPOCH + 1} | iter {it} step {s} |"
                f" loss train: {loss * (1 + 0.01 * micro):.3f},"
                f" val: n/a |"
                f" iter time: {151.23:.2f} ms"
                f"{' (step)' if not accumulating else ''}"
            )
    return "\n".join(out) + "\n"


def pytorch_mnist(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        epoch, i = _epoch(s)
        n = (i - 1) * 64
        return "Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
            epoch, n, PER_EPOCH * 64, 100.0 * n / (PER_EPOCH * 64), loss
        )

    return _lines(run, line)


def pytorch_imagenet(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        epoch, i = divmod(s, PER_EPOCH)
        batch = "[" + "{:3d}".format(i) + "/" + "{:3d}".format(PER_EPOCH) + "]"
        meters = [
            f"Time {0.123:6.3f} ({0.456:6.3f})",
            f"Data {0.011:6.3f} ({0.02:6.3f})",
            f"Loss {loss:.4e} ({loss:.4e})",
            f"Acc@1 {12.5:6.2f} ({11.2:6.2f})",
            f"Acc@5 {30.1:6.2f} ({29.5:6.2f})",
        ]
        return "\t".join(["Epoch: [{}]".format(epoch) + batch, *meters])

    return _lines(run, line)


def pytorch_word_lm(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        epoch, batch = _epoch(s)
        return (
            "| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | ms/batch {:5.2f} | "
            "loss {:5.2f} | ppl {:8.2f}"
        ).format(epoch, batch, PER_EPOCH, 20.0, 45.1, loss, math.exp(min(loss, 700)))

    return _lines(run, line)


def accelerate_sp(run: Run) -> str:
    """``accelerator.print(f"{iter}: {loss=}")`` with the loss a tensor."""

    def line(s: int, loss: float, g: float, lr: float) -> str:
        return f"{s}: loss=tensor({loss:.4f}, device='cuda:0', grad_fn=<NllLossBackward0>)"

    return _lines(run, line)


def colossal_chat(run: Run) -> str:
    line = ""
    for s, loss, _g, _lr in _rows(run):
        e, k = divmod(s, PER_EPOCH)
        line += (
            f"\rEpoch {e + 1}/3: {k}%|#   | {k + 1}/{PER_EPOCH} "
            f"[00:10<01:30,  1.10it/s, train/loss={loss}]"
        )
    return line + "\n"


def nanotron(run: Run) -> str:
    def human(num: float) -> str:
        if abs(num) < 1:
            return "{:.3g}".format(num)
        sizes = ["", "K", "M", "B", "T", "P", "E"]
        num = float("{:.3g}".format(num))
        magnitude = 0
        while abs(num) >= 1000 and magnitude < len(sizes) - 1:
            magnitude += 1
            num /= 1000.0
        return "{}{}".format("{:f}".format(num).rstrip("0").rstrip("."), sizes[magnitude])

    def line(s: int, loss: float, g: float, lr: float) -> str:
        parts = [f"iteration: {s} / {1000}"]
        for tag, value in (
            ("consumed_tokens", (s + 1) * 4096 * 32),
            ("time_per_iteration_ms", 1234.5),
            ("tokens_per_sec", 106000),
            ("global_batch_size", 131072),
            ("lm_loss", loss),
            ("lr", lr),
            ("model_tflops_per_gpu", 120.5),
        ):
            parts.append(f"{tag}: {human(value) if value == value else 'nan'}")
        parts.append("eta: 1:02:03")
        return "[0000:00:00.000] [INFO|DP=0|PP=0|TP=0]: " + " | ".join(parts)

    return _lines(run, line)


# -- the nanoGPT family -----------------------------------------------------------------------


def nanogpt(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        return f"iter {s}: loss {loss:.4f}, time {97.31 + s % 7:.2f}ms, mfu {41.2:.2f}%"

    return _lines(run, line, "tokens per iteration will be: 491,520")


def llm_c(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        return (
            "step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | "
            "%.1f%% bf16 MFU | %.0f tok/s"
        ) % (s, 1000, loss, 0.1, g, -0.2, lr, 305.1, 48.3, 171813)

    return _lines(run, line)


# -- multi-line records -----------------------------------------------------------------------


def olmo(run: Run) -> str:
    out = []
    for s, loss, g, _lr in _rows(run):
        out.append(f"2025-06-01 10:00:00.123 olmo.train:1245 INFO [step={s}/{1000},epoch=0]")
        for name, value in (
            ("train/CrossEntropyLoss", loss),
            ("train/Perplexity", math.exp(min(loss, 700))),
            ("optim/total_grad_norm", g),
            ("throughput/total_tokens", (s + 1) * 4e6),
        ):
            out.append(f"    {name}={_olmo_float(value)}")
    return "\n".join(out) + "\n"


def _olmo_float(value: float) -> str:
    if value < 0.0001:
        return str(value)
    if value > 1000:
        return f"{int(value):,d}"
    if value > 100:
        return f"{value:.1f}"
    if value > 10:
        return f"{value:.2f}"
    if value > 1:
        return f"{value:.3f}"
    return str(value) if value != value else f"{value:.4f}"


def olmo_core(run: Run) -> str:
    out = []
    for s, loss, g, _lr in _rows(run):
        out.append(f"[step={s}/{1000},epoch=0,eta=1h2m3s]")
        for name, value in (
            ("train/CE loss", loss),
            ("train/PPL", math.exp(min(loss, 700))),
            ("optim/total grad norm", g),
        ):
            out.append(f"    {name}={_olmo_float(value)}")
    return "\n".join(out) + "\n"


def composer(run: Run) -> str:
    out = []
    for s, loss, _g, lr in _rows(run):
        e, b = divmod(s, PER_EPOCH)
        log = f"[epoch={e + 1}][batch={b}/{PER_EPOCH}]" + ":"
        for name, value in (
            ("loss/train/total", loss),
            ("metrics/train/LanguageCrossEntropy", loss),
            ("lr-DecoupledAdamW/group0", lr),
            ("time/batch", s),
        ):
            log += f"\n\t Train {name}: {value}"
        out.append(log)
    return "\n".join(out) + "\n"


def llm_foundry(run: Run) -> str:
    """llm-foundry trains through composer with a token duration: ``[batch=N/M]``."""
    out = []
    for s, loss, _g, lr in _rows(run):
        log = f"[batch={s}/{1000}]" + ":"
        for name, value in (
            ("trainer/device_train_microbatch_size", 8),
            ("loss/train/total", loss),
            ("metrics/train/LanguageCrossEntropy", loss),
            ("metrics/train/LanguagePerplexity", math.exp(min(loss, 700))),
            ("time/token", s * 2**20),
            ("lr-DecoupledLionW/group0", lr),
        ):
            log += f"\n\t Train {name}: {value}"
        out.append(log)
    return "\n".join(out) + "\n"


# -- others -----------------------------------------------------------------------------------


def keras2(run: Run) -> str:
    out = []
    for k, (_s, loss, _g, _lr) in enumerate(_rows(run), 1):
        out.append(f"Epoch {k}/{len(run.steps)}")
        out.append(
            f"300/300 [==============================] - 2s 5ms/step - loss: {loss:.4f}"
            f" - accuracy: 0.8000 - val_loss: {loss * 1.1:.4f} - val_accuracy: 0.7000"
        )
    return "\n".join(out) + "\n"


def keras3(run: Run) -> str:
    """Keras 3's Progbar at verbose=1: ANSI bold and colours, ``━`` bars."""
    out = []
    for k, (_s, loss, _g, _lr) in enumerate(_rows(run), 1):
        out.append(f"Epoch {k}/{len(run.steps)}")
        bar = "\x1b[1m300/300\x1b[0m \x1b[32m" + "━" * 20 + "\x1b[0m\x1b[37m\x1b[0m"
        out.append(f"{bar} \x1b[1m2s\x1b[0m 5ms/step - loss: {loss:.4f} - val_loss: {loss:.4f}")
    return "\n".join(out) + "\n"


def mmengine(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        epoch, i = _epoch(s)
        log = f"Epoch(train)  [{epoch}][{i:>3}/{PER_EPOCH}]  "
        log += f"lr: {lr:.4e}  "
        log += "eta: 2:46:39  time: 2.8906  data_time: 0.0042  memory: 10762  "
        log += "  ".join(f"{k}: {v:.4f}" for k, v in (("loss", loss), ("grad_norm", g)))
        return "2025/06/01 10:00:00 - mmengine - INFO - " + log

    return _lines(run, line)


def detectron2(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        losses = "  ".join(
            "{}: {:.4g}".format(k, v)
            for k, v in (
                ("total_loss", loss),
                ("loss_cls", loss * 0.4),
                ("loss_box_reg", loss * 0.3),
                ("loss_mask", loss * 0.3),
            )
        )
        return "[06/01 10:00:00 d2.utils.events]: " + (
            " {eta}iter: {iter}  {losses}  {non_losses}  {avg_time}{last_time}"
            "{avg_data_time}{last_data_time} lr: {lr}  {memory}"
        ).format(
            eta="eta: 1:02:03  ",
            iter=s,
            losses=losses,
            non_losses="",
            avg_time="time: 0.4512  ",
            last_time="last_time: 0.4411  ",
            avg_data_time="data_time: 0.0112  ",
            last_data_time="last_data_time: 0.0102  ",
            lr="{:.5g}".format(lr),
            memory="max_mem: 5123M",
        )

    return _lines(run, line)


def yolov5(run: Run) -> str:
    """The training bar: a header line of names, then the redrawn row of each epoch."""
    out = []
    for k, (_s, loss, _g, _lr) in enumerate(_rows(run)):
        out.append(
            ("\n" + "%11s" * 7)
            % ("Epoch", "GPU_mem", "box_loss", "obj_loss", "cls_loss", "Instances", "Size")
        )
        mloss = (loss * 0.02, loss * 0.01, loss * 0.005)
        row = ""
        for i in range(1, 9):  # the bar redraws with \r as the batches go
            row += "\r" + ("%11s" * 2 + "%11.4g" * 5) % (
                f"{k}/{len(run.steps) - 1}",
                "3.2G",
                *mloss,
                60,
                640,
            )
            row += f": {100 * i // 8:3d}%|##########| {i}/8 [00:01<00:00,  5.12it/s]"
        out.append(row)
    return "\n".join(out) + "\n"


def mindspore(run: Run) -> str:
    """LossMonitor prints ``epoch: E step: S, loss is L`` (S within the epoch, from 1) and
    raises on a NaN loss with the step in its message."""
    out = []
    for s, loss, _g, _lr in _rows(run):
        cur_step_num = s + 10  # printed when cur_step_num % per_print_times (10) == 0
        epoch = (cur_step_num - 1) // PER_EPOCH + 1
        step = (cur_step_num - 1) % PER_EPOCH + 1
        if math.isnan(loss):
            out.append(
                "ValueError: epoch: {} step: {}. Invalid loss, terminating training.".format(
                    epoch, step
                )
            )
            break
        out.append("epoch: %s step: %s, loss is %s" % (epoch, step, loss))
    return "\n".join(out) + "\n"


def marian(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        return "[2025-06-01 10:00:00] " + (
            "Ep. {} : Up. {} : Sen. {} : {} : Time {:.2f}s : {:.2f} words/s : gNorm {:.4f} : L.r. {:.4e}"
        ).format(
            s // PER_EPOCH + 1,
            s,
            f"{(s + 1) * 1024:,}",
            f"Cost {loss:.8f}",
            81.23,
            28711.5,
            g,
            lr,
        )

    return _lines(run, line)


def opennmt(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        step_fmt = "%2d" % s
        step_fmt = "%s/%5d" % (step_fmt, 1000)
        return "[2025-06-01 10:00:00,123 INFO] " + (
            "Step %s; acc: %2.1f; ppl: %5.1f; xent: %2.1f; "
            "lr: %7.5f; sents: %7.0f; bsz: %4.0f/%4.0f/%2.0f; "
            "%3.0f/%3.0f tok/s; %6.0f sec;"
        ) % (
            step_fmt,
            45.2,
            math.exp(min(loss, 700)),
            loss,
            lr,
            1234,
            512,
            600,
            16,
            9000,
            9100,
            300,
        )

    return _lines(run, line)


def espnet(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        epoch, batch = s // PER_EPOCH + 1, s % PER_EPOCH + 10  # batches in tens, from 1
        message = f"{epoch}epoch:train:{batch - 9}-{batch}batch: "
        for k, v in (("iter_time", 1.2e-4), ("loss", loss), ("acc", 0.5), ("optim0_lr0", lr)):
            if abs(v) > 1.0e3:
                message += f"{k}={v:.3e}, "
            elif abs(v) > 1.0e-3 or v != v:
                message += f"{k}={v:.3f}, "
            else:
                message += f"{k}={v:.3e}, "
        return "[host] 2025-06-01 10:00:00,123 (trainer:737) INFO: " + message.rstrip(", ")

    return _lines(run, line)


def icefall(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        epoch, batch = s // PER_EPOCH + 1, s % PER_EPOCH  # batch_idx from enumerate
        info = f"loss={loss:.4g}, simple_loss={loss * 0.5:.4g}, over 1234.00 frames. "
        tot = f"loss={loss:.4g}, simple_loss={loss * 0.5:.4g}, over 98765.00 frames. "
        return "2025-06-01 10:00:00,123 INFO [train.py:1202] " + (
            f"Epoch {epoch}, batch {batch}, loss[{info}], tot_loss[{tot}], "
            f"batch size: 64, lr: {lr:.2e}, grad_scale: 64.0"
        )

    return _lines(run, line)


def clu_t5x(run: Run) -> str:
    """CLU's LoggingWriter (T5X's metric writer): ``[step] k=v, ...`` with sorted keys."""

    def line(s: int, loss: float, g: float, lr: float) -> str:
        scalars = {
            "train/loss": loss,
            "train/cross_ent_loss": loss,
            "train/z_loss": 0.0001,
            "train/learning_rate": lr,
            "timing/seconds": 12.5,
        }
        values = [
            f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in sorted(scalars.items())
        ]
        return "I0601 10:00:00.123456 140000 logging_writer.py:48] " + "[%d]%s %s" % (
            s,
            "",
            ", ".join(values),
        )

    return _lines(run, line)


def maxtext(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        return (
            f"completed step: {s}, seconds: {1.353:.3f}, TFLOP/s/device: {182.028:.3f}, "
            f"Tokens/s/device: {3949.842:.3f}, total_weights: 1572864, loss: {loss:.3f}"
        )

    return _lines(run, line)


def speechbrain(run: Run) -> str:
    """FileTrainLogger: ``epoch: N, lr: .. - train loss: .. - valid loss: ..`` per epoch."""

    def item(key: str, value: float, dataset: str | None = None) -> str:
        text = f"{value:.2f}" if 1.0 < value < 100.0 else f"{value:.2e}"
        return f"{dataset + ' ' if dataset else ''}{key}: {text}"

    def line(s: int, loss: float, g: float, lr: float) -> str:
        return (
            ", ".join([f"epoch: {s // 10 + 1}", item("lr", lr)])
            + " - "
            + item("loss", loss, "train")
            + " - "
            + ", ".join([item("loss", loss * 1.1, "valid"), item("CER", 12.5, "valid")])
        )

    return _lines(run, line)


def allennlp(run: Run) -> str:
    line = ""
    for s, loss, _g, _lr in _rows(run):
        desc = ", ".join("%s: %.4f" % (k, v) for k, v in (("accuracy", 0.8), ("loss", loss)))
        line += f"\r{desc} ||: {s % 100}%|#   | {s}/600 [00:10<01:30,  2.50it/s]"
    return line + "\n"


def flax(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        return "I0601 10:00:00.123 140 train.py:172] " + (
            "epoch:% 3d, train_loss: %.4f, train_accuracy: %.2f, test_loss: %.4f,"
            " test_accuracy: %.2f" % (s // 10 + 1, loss, 93.0, loss * 1.1, 92.5)
        )

    return _lines(run, line)


def paddle_detection(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        epoch, step = divmod(s, PER_EPOCH)
        space_fmt = ":" + str(len(str(PER_EPOCH))) + "d"
        fmt = " ".join(
            [
                "Epoch: [{}]",
                "[{" + space_fmt + "}/{}]",
                "learning_rate: {lr:.6f}",
                "{meters}",
                "eta: {eta}",
                "batch_cost: {btime}",
                "data_cost: {dtime}",
                "ips: {ips:.4f} images/s",
            ]
        )
        meters = f"loss: {loss:.6f} loss_cls: {loss * 0.6:.6f} loss_bbox: {loss * 0.4:.6f}"
        return "[06/01 10:00:00] ppdet.engine INFO: " + fmt.format(
            epoch,
            step,
            PER_EPOCH,
            lr=lr,
            meters=meters,
            eta="1:02:03",
            btime="0.5123",
            dtime="0.0123",
            ips=15.6,
        )

    return _lines(run, line)


def mlx_lm(run: Run) -> str:
    """TrainUI: a header line, then ``iter  loss arrow  tok/s  tokens`` rows (rich markup off)."""
    out = ["  iter   train_loss     tok/s     tokens"]
    previous = None
    for s, loss, _g, _lr in _rows(run):
        arrow = "▼" if previous is None or loss <= previous else "▲"
        previous = loss
        out.append(f"  {s:>4}    {loss:>5.3f} {arrow}    {1234.0:>5,.0f}    {s * 4.1:>5.1f}k")
    return "\n".join(out) + "\n"


def mlx_lm_old(run: Run) -> str:
    def line(s: int, loss: float, g: float, lr: float) -> str:
        return (
            f"Iter {s}: Train loss {loss:.3f}, "
            f"Learning Rate {lr:.3e}, "
            f"It/sec {1.5:.3f}, "
            f"Tokens/sec {1234.5:.3f}, "
            f"Trained Tokens {s * 512}, "
            f"Peak mem {12.3:.3f} GB"
        )

    return _lines(run, line)


def bare_columns(run: Run) -> str:
    """A loop that prints ``step loss`` and nothing else (no names at all)."""
    return _lines(run, lambda s, loss, g, lr: f"{s} {loss}")


SHAPES: list[Shape] = [
    Shape(
        "megatron_lm",
        "NVIDIA/Megatron-LM@d98e8a64dd megatron/training/training.py:3567-3641",
        megatron_lm,
        loss="lm_loss",
        step="iteration",
        grad=True,
    ),
    Shape(
        "megatron_deepspeed",
        "microsoft/Megatron-DeepSpeed@f4157bea69 megatron/training.py:1146-1184",
        megatron_deepspeed,
        loss="lm_loss",
        step="iteration",
        grad=True,
    ),
    Shape(
        "gpt_neox",
        "EleutherAI/gpt-neox@ea7aefd8f8 megatron/logging.py:436-559",
        gpt_neox,
        loss="lm_loss",
        step="iteration",
    ),
    Shape(
        "nemo",
        "NVIDIA/NeMo@8cfedd7203 nemo/lightning/pytorch/callbacks/progress_printer.py:55-63,140",
        nemo,
        loss="reduced_train_loss",
        step="global_step",
    ),
    Shape(
        "deepspeed_engine",
        "microsoft/DeepSpeed@38327e07f6 deepspeed/runtime/engine.py:2489, "
        "deepspeed/runtime/fp16/loss_scaler.py:180-190, deepspeed/utils/logging.py:63",
        deepspeed_engine,
        loss="loss",
        step="step",
    ),
    Shape(
        "deepspeed_chat",
        "microsoft/DeepSpeedExamples@83757d9c93 applications/DeepSpeed-Chat/"
        "training/step1_supervised_finetuning/main.py:367",
        deepspeed_chat,
        at=lambda s: float(s),
        loss="loss",
    ),
    Shape(
        "fairseq_simple",
        "facebookresearch/fairseq@3d262bb256 fairseq/logging/progress_bar.py:140,169,284",
        fairseq_simple,
        loss="loss",
        step="num_updates",
        grad=True,
    ),
    Shape(
        "fairseq_json",
        "facebookresearch/fairseq@3d262bb256 fairseq/logging/progress_bar.py:218,230-238",
        fairseq_json,
        loss="loss",
        step="num_updates",
        grad=True,
    ),
    Shape(
        "fairseq2",
        "facebookresearch/fairseq2@027bdebca4 src/fairseq2/metrics/recorders/log.py:56-80",
        fairseq2,
        loss="loss",
        step="step",
        grad=True,
    ),
    Shape(
        "metaseq",
        "facebookresearch/metaseq@f7ffa5fd61 metaseq/logging/progress_bar/json_progress_bar.py:49",
        metaseq,
        loss="loss",
        step="num_updates",
        grad=True,
    ),
    Shape(
        "hf_trainer",
        "transformers 5.24.0 trainer_callback.py:673-690 (ProgressCallback.on_log, run)",
        hf_trainer,
        at=lambda s: round(s / 500, 4),
        loss="loss",
        step="epoch",
        grad=True,
    ),
    Shape(
        "trl_dpo",
        "huggingface/trl@f2cd57710a trl/trainer/dpo_trainer.py:1313 (through the Trainer's log)",
        trl_dpo,
        at=lambda s: round(s / 500, 4),
        loss="loss",
        grad=True,
    ),
    Shape(
        "ms_swift",
        "modelscope/ms-swift@3602360a56 swift/trainers/patcher.py:18",
        ms_swift,
        loss="loss",
        step="global_step",
        grad=True,
    ),
    Shape(
        "axolotl",
        "axolotl-ai-cloud/axolotl@067b021c8b src/axolotl/core/trainers/base.py:727-731",
        axolotl,
        at=lambda s: round(s / 500, 4),
        loss="loss",
        grad=True,
    ),
    Shape(
        "llama_factory",
        "hiyouga/LLaMA-Factory@ff6d4d12ee src/llamafactory/train/callbacks.py:276-290",
        llama_factory_jsonl,
        file="trainer_log.jsonl",
        loss="loss",
        step="current_steps",
    ),
    Shape(
        "sentence_transformers",
        "UKPLab/sentence-transformers@85ec64559f (fit_mixin.py: the HF Trainer)",
        sentence_transformers,
        at=lambda s: round(s / 500, 4),
        loss="loss",
        grad=True,
    ),
    Shape(
        "paddlenlp",
        "PaddlePaddle/PaddleNLP@01f7436099 paddlenlp/trainer/trainer_callback.py "
        "(PrinterCallback.on_log)",
        paddlenlp,
        loss="loss",
        step="global_step",
    ),
    Shape(
        "torchtune",
        "pytorch/torchtune@bd2a0fc7c3 recipes/full_finetune_single_device.py:647-649, "
        "torchtune/training/metric_logging.py:184-188",
        torchtune,
        loss="loss",
    ),
    Shape(
        "lightning_bar",
        "Lightning-AI/pytorch-lightning@7f0c3436cd src/lightning/pytorch/callbacks/"
        "progress/tqdm_progress.py:272-281",
        lightning_bar,
        at=lambda s: s // PER_EPOCH + (s % PER_EPOCH + 1) / PER_EPOCH,
        loss="train_loss",
    ),
    Shape(
        "lightning_csv",
        "Lightning-AI/pytorch-lightning@7f0c3436cd src/lightning/fabric/loggers/"
        "csv_logs.py:200-262",
        lightning_csv,
        file="metrics.csv",
        loss="train_loss",
        step="step",
    ),
    Shape(
        "timm",
        "huggingface/pytorch-image-models@aa4b5850c1 train.py:1416-1424",
        timm,
        at=float,
        loss="loss",
    ),
    Shape(
        "torchtitan",
        "pytorch/torchtitan@b5bcd76c66 torchtitan/components/metrics.py:525-537",
        torchtitan,
        loss="loss",
        step="step",
        grad=True,
    ),
    Shape(
        "litgpt",
        "Lightning-AI/litgpt@26857050fe litgpt/finetune/lora.py:395-401",
        litgpt,
        at=lambda s: float(4 * s),
        loss="loss_train",
        step="iter",
    ),
    Shape(
        "pytorch_mnist",
        "pytorch/examples@77f55b9121 mnist/main.py:46",
        pytorch_mnist,
        at=lambda s: float(s * 64),
        loss="loss",
    ),
    Shape(
        "pytorch_imagenet",
        "pytorch/examples@77f55b9121 imagenet/main.py:321,472,498-510",
        pytorch_imagenet,
        loss="loss",
    ),
    Shape(
        "pytorch_word_lm",
        "pytorch/examples@77f55b9121 word_language_model/main.py:201",
        pytorch_word_lm,
        at=_global,
        loss="loss",
    ),
    Shape(
        "accelerate",
        "huggingface/accelerate@16cb6eb80d examples/alst_ulysses_sequence_parallelism/"
        "sp-alst.py:145",
        accelerate_sp,
        loss="loss",
    ),
    Shape(
        "colossalai",
        "hpcaitech/ColossalAI@4f9953be33 applications/ColossalChat/coati/trainer/sft.py:120,127",
        colossal_chat,
        at=lambda s: float(s + 1),
        loss="train_loss",
    ),
    Shape(
        "nanotron",
        "huggingface/nanotron@2411b022a7 src/nanotron/logging/base.py:268-318, "
        "src/nanotron/trainer.py:772-786",
        nanotron,
        loss="lm_loss",
        step="iteration",
    ),
    Shape("nanogpt", "karpathy/nanoGPT@3adf61e154 train.py:327", nanogpt, loss="loss", step="iter"),
    Shape(
        "llm_c",
        "karpathy/llm.c@f1e2ace651 train_gpt2.cu:1872",
        llm_c,
        loss="loss",
        step="step",
        grad=True,
    ),
    Shape(
        "olmo",
        "allenai/OLMo@59a53e3f68 olmo/train.py:964-990,1241",
        olmo,
        loss="train_crossentropyloss",
        step="step",
        grad=True,
    ),
    Shape(
        "olmo_core",
        "allenai/OLMo-core@fa6c5014c9 src/olmo_core/train/callbacks/console_logger.py:61-86",
        olmo_core,
        loss="train_ce_loss",
        step="step",
        grad=True,
    ),
    Shape(
        "composer",
        "mosaicml/composer@6405188805 composer/loggers/console_logger.py:207-241",
        composer,
        at=float,
        loss="train_loss_train_total",
    ),
    Shape(
        "llm_foundry",
        "mosaicml/llm-foundry@8c8dd48f72 (composer's console logger, token duration)",
        llm_foundry,
        loss="train_loss_train_total",
        step="batch",
    ),
    Shape(
        "keras2",
        "keras-team/keras 2.x Progbar (keras/src/utils/progbar.py:140-203 in 3422977a5e)",
        keras2,
        at=lambda s: s // 10 + 1,
        file="fit.log",
        loss="loss",
    ),
    Shape(
        "keras3",
        "keras-team/keras@3422977a5e keras/src/utils/progbar.py:140-203",
        keras3,
        at=lambda s: s // 10 + 1,
        file="fit.log",
        loss="loss",
    ),
    Shape(
        "mmengine",
        "open-mmlab/mmengine@254342938d mmengine/runner/log_processor.py:193-246",
        mmengine,
        at=_global,
        loss="loss",
        step="iteration",
        grad=True,
    ),
    Shape(
        "xtuner",
        "InternLM/xtuner@b934f46209 (mmengine's LogProcessor)",
        mmengine,
        at=_global,
        loss="loss",
        step="iteration",
        grad=True,
    ),
    Shape(
        "detectron2",
        "facebookresearch/detectron2@02b5c4e295 detectron2/utils/events.py:274-300",
        detectron2,
        loss="total_loss",
        step="iter",
    ),
    Shape(
        "yolov5",
        "ultralytics/yolov5@5081342f04 train.py:372,427-430",
        yolov5,
        at=lambda s: s // 10 * 8 + 1,
        file="train.log",
    ),
    Shape(
        "mindspore",
        "mindspore-ai/mindspore@01346f7427 mindspore/python/mindspore/train/callback/"
        "_loss_monitor.py (LossMonitor.step_end)",
        mindspore,
        at=lambda s: s + 10.0,
        loss="loss",
    ),
    Shape(
        "marian",
        "marian-nmt/marian-dev@c9f287db75 src/training/scheduler.h:104,559",
        marian,
        loss="cost",
        step="up",
        grad=True,
    ),
    Shape(
        "opennmt",
        "OpenNMT/OpenNMT-py@97111d9755 onmt/utils/statistics.py:120-135",
        opennmt,
        loss="xent",
        step="step",
    ),
    Shape(
        "espnet",
        "espnet/espnet@01d307c42f espnet2/train/reporter.py (SubReporter.log_message)",
        espnet,
        at=lambda s: s + 10.0,
        loss="loss",
    ),
    Shape(
        "icefall",
        "k2-fsa/icefall@36e0420c7e egs/librispeech/ASR/zipformer/train.py:1202-1208, "
        "icefall/utils.py:1281-1302",
        icefall,
        at=float,
        loss="loss",
    ),
    Shape(
        "t5x_clu",
        "google/CommonLoopUtils@04ad2f9edb clu/metric_writers/logging_writer.py:44-49 "
        "(T5X's writer, t5x/trainer.py:335)",
        clu_t5x,
        loss="train_loss",
    ),
    Shape(
        "maxtext",
        "AI-Hypercomputer/maxtext@e591f30cbb src/maxtext/common/metric_logger.py:181",
        maxtext,
        loss="loss",
        step="completed_step",
    ),
    Shape(
        "speechbrain",
        "speechbrain/speechbrain@9c826ef393 speechbrain/utils/train_logger.py:60-110",
        speechbrain,
        at=lambda s: s // 10 + 1,
        loss="train_loss",
        step="epoch",
    ),
    Shape(
        "allennlp",
        "allenai/allennlp@80fb6061e5 allennlp/training/util.py:416-430, "
        "gradient_descent_trainer.py:587",
        allennlp,
        loss="loss",
    ),
    Shape(
        "flax",
        "google/flax@18f8f311c2 examples/mnist/train.py:172-175",
        flax,
        at=lambda s: s // 10 + 1,
        loss="train_loss",
        step="epoch",
    ),
    Shape(
        "paddle_detection",
        "PaddlePaddle/PaddleDetection@666f597fd0 ppdet/engine/callbacks.py:125-161",
        paddle_detection,
        loss="loss",
    ),
    Shape(
        "mlx_lm",
        "ml-explore/mlx-lm@d78bf58e21 mlx_lm/cli_ui.py:191-216",
        mlx_lm,
        loss="train_loss",
        step="iter",
    ),
    Shape(
        "mlx_lm_old",
        "ml-explore/mlx-lm@bdb77dae^ mlx_lm/tuner/trainer.py:344-351",
        mlx_lm_old,
        loss="train_loss",
        step="iter",
    ),
    Shape(
        "bare_columns",
        "a hand-written loop: print(step, loss)",
        bare_columns,
        loss="column_2",
        step="column_1",
    ),
]
