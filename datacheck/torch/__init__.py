"""Runtime guards for PyTorch training: batches (GuardedLoader) and gradient steps (TrainingGuard).

Importing this module imports torch; ``import datacheck`` never does.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401  (the one import that tells a missing torch)
except ModuleNotFoundError as exc:  # not installed: one line naming the extra, no chain
    if exc.name != "torch":
        raise
    from datacheck._extras import needs

    raise ModuleNotFoundError(needs("datacheck.torch", "torch", "torch"), name="torch") from None

from datacheck.torch._guard import (
    Action,
    GuardConfig,
    StepResult,
    TrainingGuard,
    TrainingStopped,
    bad_steps,
)
from datacheck.torch._loader import GuardedLoader
from datacheck.torch._loader_config import LoaderConfig, LoaderStats
from datacheck.torch._quarantine import indices_from_scan, read_quarantine

__all__ = [
    "Action",
    "GuardConfig",
    "GuardedLoader",
    "LoaderConfig",
    "LoaderStats",
    "StepResult",
    "TrainingGuard",
    "TrainingStopped",
    "bad_steps",
    "indices_from_scan",
    "read_quarantine",
]
