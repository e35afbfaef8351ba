"""The optional extras: how to install one, from a clone or from an index, in one place.

datacheck's distribution is ``datacheck-ml`` (the import name and the command stay
``datacheck``).  A message naming a missing package gives both commands, since the one that
works depends on how datacheck was installed: ``pip install -e ".[media]"`` in a clone,
``pip install "datacheck-ml[media]"`` from an index.
"""

from __future__ import annotations

import importlib.util

__all__ = ["DISTRIBUTION", "install_hint", "installed", "needs"]

DISTRIBUTION = "datacheck-ml"


def install_hint(extra: str) -> str:
    """``pip install -e ".[media]" in a clone, or pip install "datacheck-ml[media]"``."""
    return f'pip install -e ".[{extra}]" in a clone, or pip install "{DISTRIBUTION}[{extra}]"'


def needs(what: str, package: str, extra: str) -> str:
    """``"decoding images needs Pillow (the media extra): pip install ..."``."""
    return f"{what} needs {package} (the {extra} extra): {install_hint(extra)}"


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without spec
        return False
