"""Text from strangers (file names, reader messages) made safe to print on one line.

A file name may hold a newline, a carriage return or an escape sequence: printed as is it
would forge a line of the summary (``verdict: PASS``) or a line of YAML that ``infer`` writes.
Every text output passes such strings through :func:`printable` (HTML escapes on its own).
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    ch = m.group(0)
    return _NAMED.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def printable(text: object) -> str:
    """``text`` with control characters as ``\\n``, ``\\r``, ``\\t`` or ``\\xNN`` escapes."""
    s = str(text)
    return _CONTROL.sub(_escape, s) if _CONTROL.search(s) else s
