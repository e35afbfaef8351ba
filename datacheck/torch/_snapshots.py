"""Good-state snapshots for the training guard: in memory or on disk, newest few kept.

A snapshot holds everything a rollback needs: model, optimizer, GradScaler and LR scheduler
state dicts, the RNG states, the data position (the guard's step count) and the guard's own
recent history.  On disk each snapshot is one ``torch.save`` file per rank, written to a
temporary name and renamed so a crash never leaves half a file (optionally on a background
thread), and read back with ``weights_only=True``.

Memory: a snapshot holds a CPU copy of the weights and of the optimizer state; for fp32 AdamW
that is 4 + 8 = 12 bytes per parameter, so the default two snapshots cost about 24 bytes per
parameter of host memory.  With ``checkpoint_dir`` the copies live on disk instead (the
copy to the CPU is transient).
"""

from __future__ import annotations

import os
import re
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "Snapshot",
    "SnapshotStore",
    "capture_rng",
    "capture_state",
    "restore_rng",
    "restore_state",
]


@dataclass(frozen=True)
class Snapshot:
    """Where one good state lives: its step and either the payload or its file."""

    step: int
    payload: dict[str, Any] | None = None
    path: Path | None = None

    def load(self) -> dict[str, Any]:
        """The snapshot's contents (read from disk when stored there)."""
        if self.payload is not None:
            return self.payload
        assert self.path is not None
        return torch.load(self.path, map_location="cpu", weights_only=True)


def _to_cpu(obj: Any) -> Any:
    """Deep copy with every tensor cloned to the CPU (state dicts alias live tensors)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


class SnapshotStore:
    """Keeps the newest ``keep`` snapshots, in memory or as files in ``directory``.

    Args:
        keep: snapshots kept (the oldest is evicted, its file deleted).
        directory: folder for snapshot files; ``None`` keeps them in memory.
        tag: names this guard's files (``guard-step{N}{tag}.pt``: rank and guard name).
        async_write: write files on a background thread (one at a time).
    """

    def __init__(
        self, keep: int, directory: str | Path | None, tag: str = "", async_write: bool = False
    ) -> None:
        self._keep = keep
        self._dir = Path(directory) if directory is not None else None
        self._tag = tag
        self._async = async_write
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None
        self._snaps: deque[Snapshot] = deque()
        if self._dir is not None:
            self._dir.mkdir(parents=True, exist_ok=True)

    def __len__(self) -> int:
        return len(self._snaps)

    @property
    def location(self) -> str:
        """Human-readable place of the newest snapshot, for messages."""
        if not self._snaps:
            return "none kept"
        newest = self._snaps[-1]
        return str(newest.path) if newest.path else f"in memory (step {newest.step})"

    def save(self, step: int, payload: dict[str, Any]) -> Snapshot:
        """Store a snapshot of ``payload`` taken at ``step``; evict the oldest beyond ``keep``."""
        payload = _to_cpu(payload)
        if self._dir is None:
            snap = Snapshot(step, payload=payload)
        else:
            path = self._dir / f"guard-step{step}{self._tag}.pt"
            self.wait()
            if self._async:
                self._writer = threading.Thread(
                    target=self._write, args=(payload, path), name="datacheck-snapshot"
                )
                self._writer.start()
            else:
                _write_atomic(payload, path)
            snap = Snapshot(step, path=path)
        self._snaps.append(snap)
        while len(self._snaps) > self._keep:
            old = self._snaps.popleft()
            if old.path is not None:
                self.wait()
                old.path.unlink(missing_ok=True)
        return snap

    def _write(self, payload: dict[str, Any], path: Path) -> None:
        try:
            _write_atomic(payload, path)
        except BaseException as exc:  # re-raised on the training thread by wait()
            self._error = exc

    def wait(self) -> None:
        """Wait for a background write to finish (re-raises its error)."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def pick(self, before: int | None) -> Snapshot | None:
        """Newest snapshot taken before step ``before`` (the oldest kept if none is).

        A snapshot "at step N" holds the weights after step N-1's update; that update may be
        the one that did the damage seen at step N, so N == before does not count.
        """
        if not self._snaps:
            return None
        self.wait()
        if before is not None:
            for snap in reversed(self._snaps):
                if snap.step < before:
                    return snap
        return self._snaps[0]

    def files(self) -> list[tuple[int, str]]:
        """(step, path) of the snapshots kept on disk, oldest first (for a resume)."""
        self.wait()
        return [(s.step, str(s.path)) for s in self._snaps if s.path is not None]

    def adopt(self, files: list[tuple[int, str]]) -> None:
        """After a resume: keep the listed snapshot files that exist, delete this guard's others.

        Files of steps the crashed run reached after its last checkpoint are stale: the resumed
        run replays those steps and would otherwise roll back into its own future.
        """
        keep = {Path(p) for _, p in files}
        self._snaps = deque(Snapshot(step, path=Path(p)) for step, p in files if Path(p).is_file())
        if self._dir is None:
            return
        pattern = re.compile(rf"guard-step\d+{re.escape(self._tag)}\.pt(\.tmp)?")
        for path in self._dir.iterdir():
            if pattern.fullmatch(path.name) and path not in keep:
                path.unlink(missing_ok=True)


def _write_atomic(payload: dict[str, Any], path: Path) -> None:
    tmp = path.with_suffix(".pt.tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def capture_rng() -> dict[str, Any]:
    """CPU and (when present) CUDA RNG states."""
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put back the RNG states saved by :func:`capture_rng`."""
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def capture_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: Any, guard: dict[str, Any]
) -> dict[str, Any]:
    """What a rollback needs (tensors still alias the live ones; :meth:`SnapshotStore.save`
    copies them): weights, optimizer, scaler, RNG, and the guard's own windows."""
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "rng": capture_rng(),
        "guard": guard,
    }


def restore_state(
    state: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: Any
) -> dict[str, Any]:
    """Put a snapshot back; returns the guard's part.

    Not the schedule: the LR schedule and the data go on from where the loop is, so every
    parameter group keeps its current hyperparameters (LR, momentum) over the restored moments.
    """
    hyper = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    for group, now in zip(optimizer.param_groups, hyper, strict=True):
        group.update(now)
    if scaler is not None and state["scaler"] is not None:
        scaler.load_state_dict(state["scaler"])
    restore_rng(state["rng"])
    return dict(state["guard"])
