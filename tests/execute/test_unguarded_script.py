"""``datacheck.scan()`` from a script without ``if __name__ == "__main__":``, a thread running.

With a thread running, workers cannot be forked; ``multiprocessing``'s spawn would re-run the
script in every worker, which starts its own scan there and dies: every file would be reported
as "the reader crashed". The fresh workers run only datacheck's entry point.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

SCRIPT = """
import json, sys, threading, time

import numpy as np
import pandera.pandas as pa_
import pyarrow as pa

import datacheck
from datacheck.formats import Chunk, Format, Opened, register

# a logger or progress-bar thread, as HF datasets, tqdm or wandb start
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()


class Numbers(Format):
    # the script's own format: one float per line
    name = "numbers"
    extensions = (".nums",)

    def open(self, unit, options):
        values = np.loadtxt(unit.path, dtype="float64", ndmin=1)
        return Opened({"x": "double"}, iter([Chunk(0, pa.record_batch({"x": values}))]))


register(Numbers())


def below_100(s):  # a check of the script's own, sent to the workers by value
    return s < 100


schema = pa_.DataFrameSchema({"x": pa_.Column(float, pa_.Check(below_100), nullable=True)})
data, executor = sys.argv[1], sys.argv[2]
report = datacheck.scan(data, schema, out=sys.argv[3], executor=executor, workers=2)
files = report.files
print(json.dumps(dict(zip(files["path"], zip(files["status"], files["error"].fillna(""))))))
"""


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    for i in range(4):
        x = np.arange(20, dtype="float64") + (90 if i == 3 else i)  # file 3 breaks the check
        if i == 1:
            x[5] = np.nan
        pq.write_table(pa.table({"x": x}), root / f"part{i}.parquet")
    (root / "ok.nums").write_text("1.5\n2.5\n")
    (root / "bad.nums").write_text("1.5\ninf\n")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["processes", "inprocess"])
def test_a_script_without_a_main_guard_gets_a_true_report(tmp_path, data, executor):
    script = tmp_path / "train.py"  # no main guard, run as a real script
    script.write_text(textwrap.dedent(SCRIPT))
    proc = subprocess.run(
        [sys.executable, str(script), str(data), executor, str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {Path(p).name: s for p, s in got.items()} == {
        "part0.parquet": ["ok", ""],
        "part1.parquet": ["flagged", ""],  # the NaN
        "part2.parquet": ["ok", ""],
        "part3.parquet": ["flagged", ""],  # 90..109: the script's own check
        "ok.nums": ["ok", ""],
        "bad.nums": ["flagged", ""],  # read by the script's own format, in a worker
    }
    assert "bootstrapping phase" not in proc.stderr


@pytest.mark.slow
def test_dask_local_workers_from_such_a_script_fail_with_one_clear_line(tmp_path, data):
    """dask starts its workers with spawn, which re-runs the script: a clear error, no report."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    proc = subprocess.run(
        [sys.executable, str(script), str(data), "distributed", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("datacheck.errors.UsageError: executor='distributed': dask could not")
    assert str(script) in last and "executor='processes'" in last


LOADER_SCRIPT = """
import json, threading, time

import torch
from torch.utils.data import DataLoader, Dataset

from datacheck.torch import GuardedLoader

threading.Thread(target=time.sleep, args=(60,), daemon=True).start()


class Samples(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return torch.full((4,), float("nan") if i == 5 else float(i))


loader = GuardedLoader(DataLoader(Samples(), batch_size=4, num_workers=2), quarantine="q")
print(json.dumps({"seen": sum(len(b) for b in loader), "bad": loader.stats.bad}))
"""


@pytest.mark.slow
def test_guarded_loader_workers_from_such_a_script(tmp_path):
    """The DataLoader's own workers (forked, torch's default on Linux) with a thread running."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(LOADER_SCRIPT))
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"seen": 31, "bad": 1}
