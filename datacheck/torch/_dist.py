"""Distributed helpers for the training guard: one stats all-reduce and a DDP comm hook.

The guard keeps every rank in lock-step with a single collective per step: a small
``(world, 3)`` float64 tensor where rank ``r`` fills row ``r`` with its local loss, its local
gradient norm and its hook flag, and an all-reduce (sum) hands every rank the whole table, from
which each rank derives the same per-rank bitmask (``BIT_*``).  Every rank then runs the same policy on the same numbers, so all ranks reach the same
decision and no collective is ever left unmatched.

Attribution needs each rank's gradients *before* the gradient all-reduce averages a NaN into
every rank.  With :class:`~torch.nn.parallel.DistributedDataParallel` a communication hook
(:func:`install_ddp_hook`) flags non-finite buckets locally, on the device, before sending
them; it can also drop a bad rank's share and re-normalise over the healthy ranks.  FSDP
reduce-scatters inside ``backward`` with no equivalent public hook in FSDP2, so there the
guard attributes by each rank's local loss only.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "BIT_GRAD",
    "BIT_LOCAL_GRAD",
    "BIT_LOSS",
    "HookState",
    "RankTable",
    "World",
    "install_ddp_hook",
    "rank_path",
    "device_stats",
    "share_stats",
    "table_from_rows",
]

BIT_LOSS = 1
"""The rank's local loss is NaN or Inf."""
BIT_LOCAL_GRAD = 2
"""The rank's own gradients were non-finite before the gradient all-reduce (DDP hook)."""
BIT_GRAD = 4
"""The gradients the optimizer would see on this rank are non-finite."""


@dataclass(frozen=True)
class World:
    """Where this process sits: rank, world size, process group and host names."""

    rank: int
    size: int
    group: Any
    hosts: tuple[str, ...]

    @classmethod
    def detect(cls, group: Any = None) -> World:
        """Read rank and size from ``torch.distributed`` (a world of one when not initialised).

        Gathers the host names once (a collective: every rank must construct its guard).
        """
        host = socket.gethostname()
        if not (dist.is_available() and dist.is_initialized()):
            return cls(rank=0, size=1, group=None, hosts=(host,))
        size = dist.get_world_size(group)
        hosts: list[Any] = [None] * size
        dist.all_gather_object(hosts, host, group=group)
        return cls(rank=dist.get_rank(group), size=size, group=group, hosts=tuple(hosts))


@dataclass(frozen=True)
class RankTable:
    """The all-reduced per-rank table every rank decides from (host floats)."""

    bits: tuple[int, ...]
    losses: tuple[float, ...]
    norms: tuple[float, ...]

    def ranks_with(self, mask: int) -> tuple[int, ...]:
        """Ranks whose bitmask has any bit of ``mask`` set."""
        return tuple(r for r, b in enumerate(self.bits) if b & mask)


def device_stats(
    world: World, loss: torch.Tensor, norm: torch.Tensor, hook_bad: torch.Tensor | None
) -> torch.Tensor:
    """The all-reduced ``(world, 3)`` float64 table, left on the device (no host read).

    Row ``r`` is rank ``r``'s (local loss, local grad norm, hook flag); the other ranks add
    zeros, so a NaN stays in its own row.  The hook flag is 1 when the DDP hook saw non-finite
    local gradients, 0 when it did not, -1 without a hook.
    """
    flag = hook_bad if hook_bad is not None else norm.new_full((), -1.0)
    values = (loss.detach().reshape(()), norm.detach().reshape(()), flag)
    local = torch.stack([v.to(torch.float64) for v in values])
    table = local.new_zeros(world.size, 3)
    table[world.rank] = local
    if world.size > 1:
        dist.all_reduce(table, op=dist.ReduceOp.SUM, group=world.group)
    return table


def share_stats(
    world: World, loss: torch.Tensor, norm: torch.Tensor, hook_bad: torch.Tensor | None
) -> RankTable:
    """:func:`device_stats` read to the host: the guard's only collective and host read per step."""
    if world.size == 1 and hook_bad is None and loss.dtype == norm.dtype:
        values = [loss.detach().reshape(()), norm.detach().reshape(())]
        return table_from_rows([[*torch.stack(values).tolist(), -1.0]])  # the common case
    return table_from_rows(device_stats(world, loss, norm, hook_bad).tolist())


def table_from_rows(rows: list[list[float]]) -> RankTable:
    """Derive every rank's bitmask from its (loss, grad norm, hook flag) row."""
    bits = []
    for loss_v, norm_v, flag_v in rows:
        grad_bad = not math.isfinite(norm_v)
        local_bad = flag_v > 0 if flag_v >= 0 else grad_bad
        bits.append(
            BIT_LOSS * (not math.isfinite(loss_v))
            + BIT_GRAD * grad_bad
            + BIT_LOCAL_GRAD * local_bad
        )
    return RankTable(tuple(bits), tuple(r[0] for r in rows), tuple(r[1] for r in rows))


class HookState:
    """Per-step local flag written by the DDP hook on the device (no host sync)."""

    def __init__(self, world: World, drop_bad_ranks: bool) -> None:
        self.world = world
        self.drop_bad_ranks = drop_bad_ranks
        self.bad: torch.Tensor | None = None

    def mark(self, bad: torch.Tensor) -> torch.Tensor:
        """Accumulate a bucket's flag; sticky for the rest of the backward pass."""
        self.bad = bad if self.bad is None else self.bad | bad
        return self.bad

    def take(self) -> torch.Tensor | None:
        """Return and reset the flag at the end of a step."""
        bad, self.bad = self.bad, None
        return bad


def _flag_and_allreduce(state: HookState, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    buf = bucket.buffer()
    bad = state.mark(~torch.isfinite(buf).all())
    group, size = state.world.group, state.world.size
    if not state.drop_bad_ranks:
        fut = dist.all_reduce(buf.div_(size), group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])
    ok = ~bad
    # One extra element carries "this rank contributed": the sum is the healthy count.
    packed = torch.cat([torch.where(ok, buf, torch.zeros_like(buf)), ok.to(buf.dtype).reshape(1)])
    fut = dist.all_reduce(packed, group=group, async_op=True).get_future()

    def _finish(f: torch.futures.Future[Any]) -> torch.Tensor:
        summed = f.value()[0]
        buf.copy_(summed[:-1] / summed[-1])  # count 0 (every rank bad) gives NaN: guard skips
        return buf

    return fut.then(_finish)


# DDP inspects the hook's annotations; with postponed evaluation they are strings.
_flag_and_allreduce.__annotations__.update(
    bucket=dist.GradBucket, state=HookState, **{"return": torch.futures.Future[torch.Tensor]}
)


def install_ddp_hook(model: Any, world: World, drop_bad_ranks: bool) -> HookState:
    """Register the flagging all-reduce hook on a DDP model (before its first backward)."""
    state = HookState(world, drop_bad_ranks)
    model.register_comm_hook(state, _flag_and_allreduce)
    return state


def rank_path(path: str | Path, rank: int, size: int) -> Path:
    """``guard.jsonl`` stays as is for one process, becomes ``guard.rank2.jsonl`` otherwise."""
    path = Path(path)
    if size <= 1:
        return path
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")
