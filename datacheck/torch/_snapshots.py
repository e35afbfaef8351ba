"""Good-state snapshots for the training guard: in memory or on disk, newest few kept.

A snapshot holds everything a rollback needs: model, optimizer, GradScaler and LR scheduler
state dicts, the RNG states, the data position (the guard's step count) and the guard's own
recent history.  On disk each snapshot is one ``torch.save`` file per rank, written to a
temporary name and renamed so a crash never leaves half a file, and read back with
``weights_only=True``.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

__all__ = ["Snapshot", "SnapshotStore", "capture_rng", "restore_rng"]


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
    """Keeps the newest ``keep`` snapshots, in memory or as files in ``directory``."""

    def __init__(self, keep: int, directory: str | Path | None, rank: int, size: int) -> None:
        self._keep = keep
        self._dir = Path(directory) if directory is not None else None
        self._suffix = f".rank{rank}" if size > 1 else ""
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
            path = self._dir / f"guard-step{step}{self._suffix}.pt"
            tmp = path.with_suffix(".pt.tmp")
            torch.save(payload, tmp)
            os.replace(tmp, path)
            snap = Snapshot(step, path=path)
        self._snaps.append(snap)
        while len(self._snaps) > self._keep:
            old = self._snaps.popleft()
            if old.path is not None:
                old.path.unlink(missing_ok=True)
        return snap

    def pick(self, before: int | None) -> Snapshot | None:
        """Newest snapshot from before step ``before`` ran (the oldest kept if none is).

        A snapshot "at step N" holds the state before step N's update, so N == before counts.
        """
        if not self._snaps:
            return None
        if before is not None:
            for snap in reversed(self._snaps):
                if snap.step <= before:
                    return snap
        return self._snaps[0]


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
