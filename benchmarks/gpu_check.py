"""Everything that needs a GPU, in one command and one table (under 5 minutes on one GPU).

    python benchmarks/gpu_check.py              # on a CUDA machine
    python benchmarks/gpu_check.py --quick      # smaller benchmarks (about a minute)

It runs, each in its own process with its own time limit:

1. the CUDA tests (``pytest -m gpu``): passed / failed / skipped;
2. ``bench_loader.py --device cuda``: GuardedLoader's check per batch (ms, GB/s, against a small
   conv net's training step) and the guarded/bare loader time per batch;
3. ``guard_overhead.py --device cuda``: TrainingGuard's overhead per step and its host syncs;
4. host syncs per batch of GuardedLoader itself (eager and ``deferred=True``), counted with
   ``torch.cuda.set_sync_debug_mode("warn")`` on a device-side batch.

Then it prints one table and writes ``benchmarks/results/gpu-check.json``. Without CUDA it says
so and exits 0 without measuring anything (``--device cpu`` runs the same steps on the CPU, as a
smoke test of this script: the numbers mean nothing there and syncs are not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NO_GPU = "gpu_check: no CUDA device here; nothing measured. Run it on a machine with a GPU."


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _run(cmd: list[str], timeout: float) -> tuple[int, str, float]:
    """(exit code, stdout + stderr, seconds); 124 when it ran past ``timeout``."""
    start = time.perf_counter()
    try:
        r = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=ROOT
        )
        return r.returncode, r.stdout + r.stderr, time.perf_counter() - start
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        text = out.decode(errors="replace") if isinstance(out, bytes) else str(out)
        return 124, text, time.perf_counter() - start


def _first_json(text: str) -> dict[str, Any] | None:
    """The first JSON object printed in ``text`` (the benchmarks print one, then a table)."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"^\{", text, re.M):
        try:
            obj, _ = decoder.raw_decode(text[m.start() :])
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def cuda_tests(timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", "tests"]
    code, out, secs = _run(cmd, timeout)
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", out)}
    failed = [line for line in out.splitlines() if line.startswith(("FAILED", "ERROR"))]
    status = "timeout" if code == 124 else ("ok" if code in (0, 5) and not failed else "FAILED")
    return {"status": status, "seconds": round(secs, 1), **counts, "failures": failed[:20]}


def loader_bench(device: str, quick: bool, timeout: float) -> dict[str, Any]:
    size = ["--batches", "8", "--repeats", "2"] if quick else ["--batches", "16", "--repeats", "5"]
    if device == "cpu":
        size = ["--batch", "32", "--batches", "4", "--repeats", "1"]
    workers = ["--workers", str(min(4, os.cpu_count() or 1))]
    cmd = [sys.executable, str(HERE / "bench_loader.py"), "--device", device, *size, *workers]
    code, out, secs = _run(cmd, timeout)
    return {"status": _status(code), "seconds": round(secs, 1), "result": _first_json(out)}


def guard_bench(device: str, quick: bool, timeout: float) -> dict[str, Any]:
    steps = "40" if device == "cpu" else ("150" if quick else "400")
    extra = ["--width", "32", "--depth", "2", "--batch", "16"] if device == "cpu" else []
    cmd = [sys.executable, str(HERE / "guard_overhead.py"), "--device", device, "--steps", steps]
    code, out, secs = _run([*cmd, *extra], timeout)
    return {"status": _status(code), "seconds": round(secs, 1), "result": _first_json(out)}


def _status(code: int) -> str:
    return {0: "ok", 124: "timeout"}.get(code, f"FAILED (exit {code})")


def loader_syncs(device: str) -> dict[str, Any]:
    """Host syncs per batch of GuardedLoader on a device batch (eager and deferred)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from datacheck.torch import GuardedLoader

    if device != "cuda":
        return {"status": "not counted on CPU"}
    x = torch.randn(64 * 20, 3, 32, 32)
    out: dict[str, Any] = {"status": "ok"}
    for deferred in (False, True):
        dl = DataLoader(TensorDataset(x), batch_size=64, pin_memory=True)
        loader = GuardedLoader(dl, device="cuda", deferred=deferred, load_errors=())
        for _ in loader:  # warm-up: allocator, pinned buffers
            pass
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                batches = sum(1 for _ in loader)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        syncs = sum("synchroniz" in str(w.message) for w in caught)
        out["deferred" if deferred else "eager"] = round(syncs / max(batches, 1), 2)
    return out


def _get(d: dict[str, Any] | None, *path: Any) -> Any:
    for key in path:
        if isinstance(d, dict):
            d = d.get(key)
        elif isinstance(d, list) and isinstance(key, int) and key < len(d):
            d = d[key]
        else:
            return "n/a"
    return "n/a" if d is None else d


def table_rows(res: dict[str, Any]) -> list[list[Any]]:
    t, lb, gb, ls = res["tests"], res["loader"], res["guard"], res["loader_syncs"]
    lr, gr = lb.get("result"), gb.get("result")
    tests = (
        f"{t.get('passed', 0)} passed, {t.get('failed', 0)} failed, {t.get('skipped', 0)} skipped"
    )
    rows = [
        ["CUDA tests (pytest -m gpu)", tests, t["status"]],
        ["loader check, ms per batch", _get(lr, "check", "check_ms_per_batch"), lb["status"]],
        ["loader check, GB/s", _get(lr, "check", "effective_GBps"), lb["status"]],
        ["loader check / train step", _get(lr, "check", "check_vs_train_step"), lb["status"]],
    ]
    for i in (0, 1):
        kind = _get(lr, "loader", i, "dataset")
        rows.append([f"loader guarded/bare ({kind})", _get(lr, "loader", i, "ratio"), lb["status"]])
    rows += [
        ["loader host syncs per batch (eager)", _get(ls, "eager"), ls["status"]],
        ["loader host syncs per batch (deferred)", _get(ls, "deferred"), ls["status"]],
        ["guard step ms (plain)", _get(gr, "plain", "step_ms"), gb["status"]],
        ["guard step ms (guarded)", _get(gr, "guard", "step_ms"), gb["status"]],
        ["guard overhead %", _get(gr, "overhead_pct"), gb["status"]],
        ["guard host syncs per step", _get(gr, "host_syncs_per_step", "guard"), gb["status"]],
    ]
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda (default); cpu: a smoke test only")
    p.add_argument("--quick", action="store_true", help="smaller benchmarks")
    p.add_argument("--budget", type=float, default=280.0, help="seconds for the whole check")
    a = p.parse_args(argv)
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        print(NO_GPU)
        return 0
    from _harness import Table, write_results

    start = time.perf_counter()

    def left(share: float) -> float:
        return max(10.0, share * (a.budget - (time.perf_counter() - start)))

    res: dict[str, Any] = {"device": a.device}
    if a.device == "cuda":
        res["gpu"] = torch.cuda.get_device_name(0)
    res["tests"] = cuda_tests(left(0.4))
    res["loader_syncs"] = loader_syncs(a.device)
    res["loader"] = loader_bench(a.device, a.quick, left(0.5))
    res["guard"] = guard_bench(a.device, a.quick, left(0.9))
    res["seconds"] = round(time.perf_counter() - start, 1)
    table = Table(["check", "value", "status"], table_rows(res), title=f"gpu_check ({a.device})")
    write_results(f"gpu-check-{a.device}", res, table=table, params=vars(a))
    print(f"total {res['seconds']} s")
    bad = [r for r in table.rows if str(r[2]).startswith(("FAILED", "timeout"))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
