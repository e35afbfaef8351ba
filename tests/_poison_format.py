"""Test-only formats whose readers kill the process that opens them (poison files).

``*.poison`` exits at once (``os._exit``), ``*.segv`` segfaults for real (a read of address 0),
``*.abort`` aborts (``SIGABRT``, as a failed C++ assertion does), ``*.hang`` never returns,
``*.hog`` allocates memory until it is stopped, ``*.flaky`` dies the first time only (it leaves ``<file>.seen`` behind), then reads as empty.
Workers import this module themselves (the scan preloads the modules of plugin formats; dask
workers may also ``--preload _poison_format`` with ``tests/`` on PYTHONPATH); the test process
imports it so that discovery recognises these files.  Never open such a file in the test
process itself.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Mapping
from typing import Any

from datacheck.formats import Format, Opened, WorkUnit, register


class PoisonFormat(Format):
    name = "poison"
    extensions = (".poison",)

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        os._exit(13)  # what a dying native reader looks like from the outside


class SegfaultFormat(Format):
    name = "segv"
    extensions = (".segv",)

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        ctypes.string_at(0)  # SIGSEGV
        raise AssertionError("unreachable")


class AbortFormat(Format):
    name = "abort"
    extensions = (".abort",)

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        os.abort()


class HangFormat(Format):
    name = "hang"
    extensions = (".hang",)

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        while True:
            time.sleep(1)


class HogFormat(Format):
    name = "hog"
    extensions = (".hog",)

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        held = []
        while True:
            held.append(bytearray(64 << 20))  # touched: resident, as a decompression bomb's
            time.sleep(0.01)


class FlakyFormat(Format):
    name = "flaky"
    extensions = (".flaky",)

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        seen = unit.path + ".seen"
        if not os.path.exists(seen):
            open(seen, "w").close()
            os._exit(9)
        return Opened({}, iter(()))


for _fmt in (
    PoisonFormat(),
    SegfaultFormat(),
    AbortFormat(),
    HangFormat(),
    HogFormat(),
    FlakyFormat(),
):
    register(_fmt)
