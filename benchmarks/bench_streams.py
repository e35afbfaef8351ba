"""GuardedLoader on stream pipelines: per-batch time guarded vs bare, per stack and payload.

    python benchmarks/bench_streams.py                        # every stack, both payloads
    python benchmarks/bench_streams.py --stacks webdataset hf --payloads tokens --batches 20

Stacks: ``generic`` (a generator IterableDataset), ``webdataset`` (tar shards, ``.npy``
decoded), ``hf`` (``datasets`` streaming over Parquet, torch format), ``mosaic`` (MDS,
``StreamingDataLoader``), ``litdata`` (chunks, ``StreamingDataLoader``), ``nodes``
(``torchdata.nodes``: mapper, Batcher, collate). Payloads: ``images`` (batches of 256 x 3 x 64 x
64 float32, 12.6 MB) and ``tokens`` (8 x 2048 int64). Each stack's data is written once by its
own writer; then ``bare`` and ``guarded`` run in fresh child processes, interleaved rounds (the
shared harness), each timing its epochs after a warm-up one: the per-batch time after each
epoch's first batch (steady state), the main process's CPU time per batch (what the guard adds
there; the least disturbed by a busy machine), and the first batch's latency (worker start-up)
apart; the fastest round's median counts. Target: guarded / bare <= 1.05 on CPU.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _harness import Table, child_main, interleaved, write_results

STACKS = ("generic", "webdataset", "hf", "mosaic", "litdata", "nodes")
PAYLOADS = {"images": (256, (3, 64, 64), "float32"), "tokens": (8, (2048,), "int64")}


def sample(i: int, payload: str) -> np.ndarray:
    _, shape, dtype = PAYLOADS[payload]
    rng = np.random.default_rng(i)
    if dtype == "int64":
        return rng.integers(0, 50_000, shape, dtype=np.int64)
    return rng.standard_normal(shape, dtype=np.float32)


# --------------------------------------------------------------------------- writers


def write(stack: str, payload: str, n: int, folder: Path) -> None:
    """The stack's data, written by its own writer."""
    folder.mkdir(parents=True, exist_ok=True)
    if stack in ("generic", "nodes"):
        np.save(folder / "data.npy", np.stack([sample(i, payload) for i in range(n)]))
    elif stack == "webdataset":
        import webdataset as wds

        with wds.ShardWriter(
            str(folder / "shard-%06d.tar"), maxcount=max(n // 4, 1), verbose=0
        ) as out:
            for i in range(n):
                buf = io.BytesIO()
                np.save(buf, sample(i, payload))
                out.write({"__key__": f"s{i:07d}", "npy": buf.getvalue(), "cls": i})
    elif stack == "hf":
        import datasets

        _, shape, dtype = PAYLOADS[payload]
        feature = (
            datasets.Array3D(shape, dtype)
            if len(shape) == 3
            else datasets.Sequence(datasets.Value(dtype))
        )
        ds = datasets.Dataset.from_dict(
            {"x": [sample(i, payload) for i in range(n)], "cls": list(range(n))},
            features=datasets.Features({"x": feature, "cls": datasets.Value("int64")}),
        )
        for k in range(4):
            ds.shard(4, k, contiguous=True).to_parquet(str(folder / f"part-{k}.parquet"))
    elif stack == "mosaic":
        from streaming import MDSWriter

        _, shape, dtype = PAYLOADS[payload]
        column = f"ndarray:{dtype}:{','.join(map(str, shape))}"
        with MDSWriter(out=str(folder), columns={"x": column, "cls": "int"}) as out:
            for i in range(n):
                out.write({"x": sample(i, payload), "cls": i})
    elif stack == "litdata":
        from litdata.streaming.writer import BinaryWriter

        writer = BinaryWriter(str(folder), chunk_bytes="64MB")
        for i in range(n):
            writer[i] = {"x": sample(i, payload), "cls": i}
        writer.done()
        writer.merge()


# --------------------------------------------------------------------------- loaders


def make_loader(stack: str, payload: str, folder: Path, workers: int) -> Any:
    batch = PAYLOADS[payload][0]
    from torch.utils.data import DataLoader

    if stack == "generic":
        return DataLoader(_Rows(str(folder / "data.npy")), batch_size=batch, num_workers=workers)
    if stack == "webdataset":
        import webdataset as wds

        urls = sorted(str(p) for p in folder.glob("*.tar"))
        ds = wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode()
        return DataLoader(ds, batch_size=batch, num_workers=workers)
    if stack == "hf":
        import datasets

        files = sorted(str(p) for p in folder.glob("*.parquet"))
        ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
        return DataLoader(ds.with_format("torch"), batch_size=batch, num_workers=workers)
    if stack == "mosaic":
        from streaming import StreamingDataLoader, StreamingDataset

        ds = StreamingDataset(local=str(folder), shuffle=False, batch_size=batch)
        return StreamingDataLoader(ds, batch_size=batch, num_workers=workers)
    if stack == "litdata":
        import litdata

        ds = litdata.StreamingDataset(str(folder), shuffle=False)
        return litdata.StreamingDataLoader(ds, batch_size=batch, num_workers=workers)
    return _nodes(str(folder / "data.npy"), batch, workers)


class _Rows:
    """A generator IterableDataset over a .npy file, sharded by get_worker_info()."""

    def __new__(cls, path: str) -> Any:
        from torch.utils.data import IterableDataset, get_worker_info

        class Rows(IterableDataset):  # type: ignore[type-arg]
            def __iter__(self) -> Any:
                data = np.load(path, mmap_mode="r")
                info = get_worker_info()
                w, k = (info.id, info.num_workers) if info else (0, 1)
                for i in range(w, len(data), k):
                    yield {"x": np.array(data[i]), "cls": i}

        return Rows()


def _nodes(path: str, batch: int, workers: int) -> Any:
    import torchdata.nodes as tn
    from torch.utils.data import default_collate

    data = np.load(path, mmap_mode="r")
    node = tn.IterableWrapper(range(len(data)))
    load = _Load(path)
    node = tn.ParallelMapper(node, load, num_workers=max(workers, 1), method="thread")
    return tn.Loader(tn.Mapper(tn.Batcher(node, batch, drop_last=False), default_collate))


class _Load:
    def __init__(self, path: str) -> None:
        self.data = np.load(path, mmap_mode="r")

    def __call__(self, i: int) -> dict:
        return {"x": np.array(self.data[i]), "cls": i}


# --------------------------------------------------------------------------- children


def _run(guarded: bool, args: list[str]) -> dict[str, Any]:
    stack, payload, folder, workers, epochs = (
        args[0],
        args[1],
        Path(args[2]),
        int(args[3]),
        int(args[4]),
    )
    loader = make_loader(stack, payload, folder, workers)
    if guarded:
        from datacheck.torch import GuardedLoader

        loader = GuardedLoader(loader)
    per_batch, first, cpu = [], [], []
    for epoch in range(epochs + 1):  # the first epoch warms up (workers, caches, imports)
        start, n, at_first, cpu_first = time.perf_counter(), 0, 0.0, 0.0
        for batch in loader:
            _ = batch["npy" if "npy" in batch else "x"]
            n += 1
            if n == 1:
                at_first, cpu_first = time.perf_counter(), time.process_time()
        if epoch and n > 1:  # steady state: after the first batch (worker start-up, prefetch)
            per_batch.append((time.perf_counter() - at_first) / (n - 1))
            cpu.append((time.process_time() - cpu_first) / (n - 1))
            first.append(at_first - start)
        elif epoch:  # one batch an epoch: it is the whole epoch
            per_batch.append(time.perf_counter() - start)
            cpu.append(time.process_time() - cpu_first)
            first.append(at_first - start)
    return {
        "ms_per_batch": statistics.median(per_batch) * 1e3,
        "main_cpu_ms_per_batch": statistics.median(cpu) * 1e3,
        "first_batch_ms": statistics.median(first) * 1e3,
        "batches": n,
    }


VARIANTS = {"bare": lambda a: _run(False, a), "guarded": lambda a: _run(True, a)}


def _shim_torchvision() -> None:
    """MosaicML streaming imports torchvision; the CPU test machines have none, so the tests'
    stand-in goes on the children's path (as tests/conftest.py does), only where it is missing."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("torchvision") is None:
        shims = str(Path(__file__).resolve().parents[1] / "tests" / "_shims")
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.environ.get("PYTHONPATH"), shims) if p
        )
        sys.path.append(shims)
        importlib.import_module("sitecustomize").install()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stacks", nargs="+", default=list(STACKS), choices=STACKS)
    p.add_argument("--payloads", nargs="+", default=list(PAYLOADS), choices=list(PAYLOADS))
    p.add_argument("--batches", type=int, default=16, help="batches per epoch")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs per child (median)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (fastest counts)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--tmp", default=None, help="where the data is written (default: a temp dir)")
    a = p.parse_args()
    if "mosaic" in a.stacks:
        _shim_torchvision()
    load_before = list(os.getloadavg())
    rows, results = [], {}
    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        for payload in a.payloads:
            n = PAYLOADS[payload][0] * a.batches
            for stack in a.stacks:
                folder = Path(tmp) / f"{stack}-{payload}"
                write(stack, payload, n, folder)
                child = [stack, payload, str(folder), str(a.workers), str(a.epochs)]
                best = interleaved(__file__, ["bare", "guarded"], child, rounds=a.rounds)
                bare, guarded = best["bare"]["ms_per_batch"], best["guarded"]["ms_per_batch"]
                starts = [
                    round(best[v][k], 2)
                    for k in ("main_cpu_ms_per_batch", "first_batch_ms")
                    for v in ("bare", "guarded")
                ]
                results[f"{stack}/{payload}"] = best
                rows.append(
                    [stack, payload, round(bare, 2), round(guarded, 2), round(guarded / bare, 3)]
                    + starts
                )
                print(rows[-1], file=sys.stderr)
    table = Table(
        [
            "stack",
            "payload",
            "bare ms/batch",
            "guarded ms/batch",
            "ratio",
            "bare main cpu ms/batch",
            "guarded main cpu ms/batch",
            "bare first ms",
            "guarded first ms",
        ],
        rows,
        title=f"GuardedLoader on streams, {a.workers} workers",
    )
    params = {k: v for k, v in vars(a).items() if k != "tmp"}
    write_results("streams", results, table=table, params=params, load_before=load_before)


if __name__ == "__main__":
    if not child_main(VARIANTS):
        main()
