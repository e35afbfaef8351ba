"""Good-state snapshots for the training guard: in memory or on disk, newest few kept.

A snapshot holds everything a rollback needs: model, optimizer, GradScaler and LR scheduler
state dicts, the RNG states, the data position (the guard's step count) and the guard's own
recent history.  On disk each snapshot is one ``torch.save`` file per rank, written to a
temporary name and renamed so a crash never leaves half a file (optionally on a background
thread), and read back with ``weights_only=True``.

A new snapshot is a *candidate* until the steps after it were judged healthy: the guard
commits it after ``confirm_steps`` healthy readings, or discards it when a warning or a bad
step comes first (the update just before it may be the one that did the damage).  Rollbacks
only ever go to committed snapshots.

Memory: a snapshot holds a CPU copy of the weights and of the optimizer state; for fp32 AdamW
that is 4 + 8 = 12 bytes per parameter, so the default two snapshots cost about 24 bytes per
parameter of host memory, 36 while a candidate waits.  With ``checkpoint_dir`` the copies
live on disk instead (the copy to the CPU is transient).
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
    "copy_to_cpu",
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


def copy_to_cpu(obj: Any) -> Any:
    """Deep copy with every tensor cloned to the CPU (state dicts alias live tensors)."""
    return _to_cpu(obj)


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


class SnapshotStore:
    """Keeps the newest ``keep`` committed snapshots and one candidate, in memory or as files.

    Args:
        keep: committed snapshots kept (the oldest is evicted, its file deleted).
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
        self.candidate: Snapshot | None = None
        """The newest snapshot, not yet confirmed by healthy steps after it (never rolled back to)."""
        self.pinned: Snapshot | None = None
        """A committed snapshot kept beyond ``keep``: the run at its best level so far (the
        state to return to when the loss drifts up slowly, over more steps than ``keep``
        snapshots cover)."""
        if self._dir is not None:
            self._dir.mkdir(parents=True, exist_ok=True)

    def __len__(self) -> int:
        """Committed snapshots (the candidate does not count)."""
        return len(self._snaps)

    @property
    def location(self) -> str:
        """Human-readable place of the newest committed snapshot, for messages."""
        if not self._snaps:
            return "none kept"
        newest = self._snaps[-1]
        return str(newest.path) if newest.path else f"in memory (step {newest.step})"

    def propose(self, step: int, payload: dict[str, Any]) -> Snapshot:
        """Store ``payload`` taken at ``step`` as the candidate (replacing an older candidate)."""
        self.discard()
        payload = _to_cpu(payload)
        if self._dir is None:
            self.candidate = Snapshot(step, payload=payload)
            return self.candidate
        path = self._dir / f"guard-step{step}{self._tag}.pt"
        self.wait()
        if self._async:
            self._writer = threading.Thread(
                target=self._write, args=(payload, path), name="datacheck-snapshot"
            )
            self._writer.start()
        else:
            _write_atomic(payload, path)
        self.candidate = Snapshot(step, path=path)
        return self.candidate

    def commit(self, pin: bool = False) -> Snapshot:
        """The candidate becomes the newest committed snapshot; the oldest beyond ``keep`` goes,
        except the pinned one (``pin``: this one is, the run's best so far; it is kept beyond
        ``keep`` until another is pinned)."""
        snap, self.candidate = self.candidate, None
        assert snap is not None, "commit() without a candidate"
        self._snaps.append(snap)
        if pin:
            self.pinned = snap
        newest = {id(s) for s in list(self._snaps)[-self._keep :]}
        for old in [s for s in self._snaps if id(s) not in newest and s is not self.pinned]:
            self._snaps.remove(old)
            self._delete(old)
        return snap

    def discard(self) -> Snapshot | None:
        """Drop the candidate (and its file); returns it, or None when there was none."""
        snap, self.candidate = self.candidate, None
        if snap is not None:
            self._delete(snap)
        return snap

    def save(self, step: int, payload: dict[str, Any]) -> Snapshot:
        """Store and commit at once (the state the run starts from needs no confirming)."""
        self.propose(step, payload)
        return self.commit()

    def _delete(self, snap: Snapshot) -> None:
        if snap.path is not None:
            self.wait()
            snap.path.unlink(missing_ok=True)

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
        """Newest committed snapshot taken before step ``before`` (the oldest kept if none is).

        A snapshot "at step N" holds the weights after step N-1's update; that update may be
        the one that did the damage seen at step N, so N == before does not count (a committed
        snapshot was followed by healthy steps, so it is before any trouble anyway).
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
        """(step, path) of the committed snapshots kept on disk, oldest first (for a resume)."""
        self.wait()
        return [(s.step, str(s.path)) for s in self._snaps if s.path is not None]

    def adopt(self, files: list[tuple[int, str]]) -> None:
        """After a resume: keep the listed snapshot files that exist, delete this guard's others.

        Files of steps the crashed run reached after its last checkpoint are stale: the resumed
        run replays those steps and would otherwise roll back into its own future.
        """
        keep = {Path(p) for _, p in files}
        self.candidate = self.pinned = None
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
