"""Inputs -> work units -> unit results -> one entry per file.

:mod:`._discover` expands inputs into files and plans work units; :mod:`._unit` reads one unit
and checks it; :mod:`._merge` folds unit results into per-file entries and the manifest;
:mod:`._journal` records finished units so an interrupted scan can resume.
"""

from __future__ import annotations

from datacheck.engine._discover import discover, plan_units
from datacheck.engine._result import UnitResult, poison_result
from datacheck.engine._unit import scan_unit

__all__ = ["UnitResult", "discover", "plan_units", "poison_result", "scan_unit"]
