"""The new user's path, end to end: infer -> scan -> export -> a real training run.

A real-looking regression dataset, written by pandas as pipelines write it, with the damage
pipelines make: a shard whose ``x2`` went through a unit bug (x1e6), a shard whose feature
``x5`` came from a left join that matched nothing (pandas writes the NaN column as null), a
tab-separated export named ``.csv``, and a shard cut short by a crashed writer.  ``datacheck
infer`` learns a schema from two trusted shards, ``datacheck scan`` fails the gate, and both
exports (``clean_copy``; ``exclusion_list`` into ``GuardedLoader``) keep the damage out: a short
torch training run on what they let through reaches the held-out error of a run on the clean
shards alone, where the same run on the raw files does not.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import datacheck as dc

torch = pytest.importorskip("torch")

FEATURES = [f"x{i}" for i in range(6)]
WEIGHTS = np.array([1.5, -2.0, 0.7, 0.0, 1.0, -0.5])
ROWS = 1500


def _frame(seed: int, rows: int = ROWS) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, len(FEATURES)))
    y = x @ WEIGHTS + 0.1 * rng.standard_normal(rows)
    frame = pd.DataFrame(x, columns=FEATURES).astype("float32")
    frame.insert(0, "id", np.arange(rows) + seed * rows)
    frame["y"] = y.astype("float32")
    return frame


def _dataset(root: Path) -> dict[str, Path]:
    """The shards (a dict name -> path) and a clean held-out file."""
    train = root / "train"
    train.mkdir(parents=True)
    paths = {}
    for i in range(4):
        paths[f"clean{i}"] = train / f"part-{i:03d}.parquet"
        _frame(i).to_parquet(paths[f"clean{i}"], index=False)
    drift = _frame(4)
    drift["x2"] *= 1e6  # a unit bug upstream: the whole shard, every value
    paths["drift"] = train / "part-004.parquet"
    drift.to_parquet(paths["drift"], index=False)
    joined = _frame(5).drop(columns=["x5"])
    other = pd.DataFrame({"id": [-1], "x5": [0.0]})  # the join key matches nothing
    joined = joined.merge(other, on="id", how="left")[["id", *FEATURES, "y"]]
    paths["join"] = train / "part-005.parquet"
    joined.to_parquet(paths["join"], index=False)
    tsv = _frame(6)
    tsv.loc[[10, 700], "x1"] = np.inf  # two overflowed values: rows, not the file
    paths["tsv"] = train / "part-006.csv"  # tab-separated, named .csv
    tsv.to_csv(paths["tsv"], sep="\t", index=False)
    cut = train / "part-007.parquet"
    _frame(7).to_parquet(cut, index=False)
    cut.write_bytes(cut.read_bytes()[:-200])  # the writer crashed before the footer
    paths["corrupt"] = cut
    paths["holdout"] = root / "holdout.parquet"
    _frame(99, rows=3000).to_parquet(paths["holdout"], index=False)
    return paths


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "datacheck", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _read(path: Path) -> pd.DataFrame:
    """What a training script reads: Parquet, or a CSV with its delimiter sniffed."""
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    return pd.read_csv(path, sep=None, engine="python")


def _fit(frames: list[pd.DataFrame], holdout: pd.DataFrame, seed: int = 0) -> float:
    """A linear model trained with Adam for a few epochs; its held-out mean squared error."""
    data = pd.concat(frames, ignore_index=True)
    x = torch.tensor(data[FEATURES].to_numpy(np.float32))
    y = torch.tensor(data["y"].to_numpy(np.float32))
    return _train(torch.utils.data.TensorDataset(x, y), holdout, seed)


def _train(dataset: object, holdout: pd.DataFrame, seed: int = 0, loader: object = None) -> float:
    torch.manual_seed(seed)
    model = torch.nn.Linear(len(FEATURES), 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    batches = loader or torch.utils.data.DataLoader(dataset, batch_size=128, shuffle=True)
    for _ in range(8):
        for xb, yb in batches:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb).squeeze(1), yb)
            loss.backward()
            opt.step()
    with torch.no_grad():
        xh = torch.tensor(holdout[FEATURES].to_numpy(np.float32))
        yh = torch.tensor(holdout["y"].to_numpy(np.float32))
        return float(torch.nn.functional.mse_loss(model(xh).squeeze(1), yh))


def test_the_gate_keeps_the_damage_out_of_training(tmp_path: Path) -> None:
    paths = _dataset(tmp_path)
    holdout = pd.read_parquet(paths["holdout"])
    schema = tmp_path / "train.yaml"
    r = _cli("infer", paths["clean0"], paths["clean1"], "--out", schema)
    assert r.returncode == 0, r.stderr
    r = _cli("scan", tmp_path / "train", "--schema", schema, "--out", tmp_path / "report")
    assert r.returncode == 1, r.stdout + r.stderr
    report = dc.load_report(tmp_path / "report")
    by = {Path(e["path"]).name: e for e in report.data["files"]}
    assert by["part-006.csv"]["dialect"] == {"delimiter": "tab"}
    assert by["part-007.parquet"]["status"] == "corrupt"
    whole = {Path(p).name: r for p, r in _gated(report).items()}
    assert set(whole) == {"part-004.parquet", "part-005.parquet", "part-007.parquet"}
    assert (
        "x2: drift" in whole["part-004.parquet"] and "x5: null_column" in whole["part-005.parquet"]
    )

    clean_mse = _fit([_read(paths[f"clean{i}"]) for i in range(4)], holdout)
    # Without the gate: every readable file as it is (the join's nulls read as NaN, dropped
    # by the loader script as pipelines do, the unit bug and the Inf rows trained on).
    raw = [_read(p) for k, p in paths.items() if k not in ("corrupt", "holdout")]
    raw = [f.replace([np.inf, -np.inf], np.nan).fillna(0.0) for f in raw]
    raw_mse = _fit(raw, holdout)

    # Export 1: the clean copy; a rescan with the same schema passes the gate.
    result = report.clean_copy(tmp_path / "clean")
    assert sorted(result.loc[result.status == "skipped", "path"].map(lambda p: Path(p).name)) == [
        "part-004.parquet",
        "part-005.parquet",
        "part-007.parquet",
    ]
    rescan = _cli("scan", tmp_path / "clean", "--schema", schema, "--out", tmp_path / "again")
    assert rescan.returncode == 0, rescan.stdout
    copied = sorted((tmp_path / "clean").rglob("part-*"))
    copy_mse = _fit([_read(p) for p in copied], holdout)

    # Export 2: the original files through GuardedLoader, excluding what the scan found.
    order = [p for k, p in sorted(paths.items()) if k not in ("corrupt", "holdout")]
    order.sort()
    frames = [_read(p) for p in order]
    sizes = [len(f) for f in frames]
    data = pd.concat(frames, ignore_index=True).fillna(0.0)
    x = torch.tensor(data[FEATURES].to_numpy(np.float32))
    y = torch.tensor(data["y"].to_numpy(np.float32))
    owner = np.repeat(np.arange(len(order)), sizes)
    from datacheck.torch import GuardedLoader

    excl = report.exclusion_list(order=[str(p) for p in order])
    loader = GuardedLoader(
        torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=128),
        exclude=excl,
        path_of=lambda i: str(order[owner[i]]),
    )
    assert loader.excluded_indices >= set(np.flatnonzero(owner == order.index(paths["drift"])))
    guarded_mse = _train(None, holdout, loader=loader)

    print(f"held-out MSE: clean {clean_mse:.4f}, clean_copy {copy_mse:.4f}, ", end="")
    print(f"GuardedLoader {guarded_mse:.4f}, no gate {raw_mse:.4f}")
    assert clean_mse < 0.02, clean_mse  # the noise floor is 0.01
    assert copy_mse == pytest.approx(clean_mse, rel=0.25, abs=0.005)
    assert guarded_mse == pytest.approx(clean_mse, rel=0.25, abs=0.005)
    assert raw_mse > 10 * clean_mse, (raw_mse, clean_mse)


def _gated(report: dc.Report) -> dict[str, str]:
    from datacheck.report._explore import gate_reason, gated_files

    return {p: gate_reason(found) for p, found in gated_files(report).items()}
