"""A test-only format whose reader kills the process that opens it (a poison file).

Workers import it with ``dask worker --preload _poison_format`` (``tests/`` on PYTHONPATH);
the test process imports it so that discovery recognises ``*.poison`` files.  Never open such a
file in the test process itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from datacheck.formats import Format, Opened, WorkUnit, register


class PoisonFormat(Format):
    name = "poison"
    extensions = (".poison",)

    def open(self, unit: WorkUnit, options: Mapping[str, Any]) -> Opened:
        os._exit(13)  # what a segfaulting native reader looks like from the outside


register(PoisonFormat())
