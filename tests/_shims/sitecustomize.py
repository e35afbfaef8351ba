"""Lets ``import streaming`` work where torchvision is not installed (tests/_shims/README.md).

Imported at start-up by every Python process whose path holds this folder (the tests put it
on ``PYTHONPATH`` for their child processes), and called by ``tests/conftest.py`` for the test
process itself.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

_STUBBED = "streaming.vision"


class _EmptyModule(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__doc__ = (
            "Stand-in for MosaicML streaming's vision datasets, which import torchvision "
            "(not installed here): see tests/_shims/README.md."
        )


class _StreamingVisionFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname != _STUBBED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _EmptyModule(), is_package=True)


def install() -> None:
    """Put the finder in front, once, and only where torchvision is missing."""
    if any(isinstance(f, _StreamingVisionFinder) for f in sys.meta_path):
        return
    if importlib.util.find_spec("torchvision") is not None:
        return
    sys.meta_path.insert(0, _StreamingVisionFinder())


install()
