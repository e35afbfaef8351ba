"""``python -m tests.fuzz --minutes N``: see :mod:`_fuzz`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fuzz import main  # noqa: E402

raise SystemExit(main())
