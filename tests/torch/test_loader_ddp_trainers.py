"""GuardedLoader under DDP whoever runs the loop: plain torch, accelerate, Lightning, the Hugging
Face Trainer (GuardedTrainer), on 2 gloo ranks.

Each run trains 2 epochs on 48 ``.npy`` files (batches of 4, ``shuffle=True``), three of them
bad: a NaN, one cut short (loading raises), a 1e30 (``fits="fp16"``). Every clean sample must be
trained on exactly once per epoch across the ranks, in a new order each epoch, and every bad one
dropped from the batch it was drawn in (its batch-mates train) on whichever rank drew it, and
quarantined there under its index and file. The next run (a new loader, a new fit) lists the
files in another order with 8 new ones: every clean sample once across the ranks, no bad one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from datacheck.torch import read_quarantine
from tests.torch._ddp_train import BAD, BATCH, BROKEN, GROWN, HUGE, NAN, N, write_files

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(kind: str, out: Path) -> list[dict]:
    write_files(out / "data")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    script = ["-m", "tests.torch._ddp_train", kind, str(out)]
    if kind.startswith("lightning"):  # Lightning starts its second process itself
        cmd = [sys.executable, *script]
    else:
        port = _free_port()
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            f"--master_port={port}",
            *script,
        ]
    proc = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def _check_shares(ranks: list[dict], out: Path) -> None:
    clean = set(range(N)) - BAD
    for epoch in range(2):
        shares = [r["epochs"][epoch] for r in ranks]
        assert len(shares[0]) + len(shares[1]) == len(clean)  # nothing twice...
        assert set(shares[0]) | set(shares[1]) == clean  # ...nothing missed
        assert all(len(set(s)) == len(s) for s in shares)
    if len(ranks[0]["epochs"]) > 2:  # the next run, on the same quarantine: never a bad one
        again = [r["epochs"][2] for r in ranks]
        assert set(again[0]) | set(again[1]) == clean and not set(again[0]) & set(again[1])
    for r in ranks:
        assert r["epochs"][0] != r["epochs"][1]  # a new order every epoch
        assert r["lengths"] == [N // 2 // BATCH] * 2  # each rank's share of the batches
    q = read_quarantine(out / "q")
    assert dict(zip(q["index"], q["check"], strict=True)) == {
        NAN: "nan",
        BROKEN: "load_error",
        HUGE: "fp16_safe",
    }
    assert sorted(q["source"]) == sorted(str(out / "data" / f"{i:03d}.npy") for i in BAD)
    grown = [r["grown"] for r in ranks]  # the next run: files reordered, 8 new ones
    clean_grown = set(range(N + GROWN)) - BAD
    assert set(grown[0]) | set(grown[1]) == clean_grown
    assert len(grown[0]) + len(grown[1]) == len(clean_grown)
    assert set(q["epoch"]) == {0}  # found in epoch 0, never loaded again
    drew = {i: r for r, share in enumerate(ranks) for i in share["epochs"][0]}
    assert len(set(q["rank"])) >= 1 and all(i not in drew for i in BAD)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "kind", ["plain", "plain-sampler", "accelerate", "lightning", "lightning-callback", "hf"]
)
def test_every_clean_sample_once_per_epoch_across_ranks(tmp_path, kind):
    needs = {"accelerate": "accelerate", "lightning": "lightning", "hf": "transformers"}
    pytest.importorskip(needs.get(kind.split("-")[0], "torch"))
    _check_shares(_launch(kind, tmp_path), tmp_path)
