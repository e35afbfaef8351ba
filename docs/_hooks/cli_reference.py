"""MkDocs hook: the CLI reference, generated from the parsers ``datacheck`` itself builds.

A page line ``<!-- cli-help: scan -->`` becomes the ``datacheck scan --help`` text (``datacheck``
for the top-level parser); ``<!-- cli-options: scan -->`` becomes a table of that command's
options with their defaults.  Nothing is written by hand, so the reference cannot drift from the
code.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

_HELP = re.compile(r"^<!-- cli-help: ([\w-]+) -->$", re.M)
_OPTIONS = re.compile(r"^<!-- cli-options: ([\w-]+) -->$", re.M)
_DEFAULT = re.compile(r"\(default: ([^)]*(?:\([^)]*\)[^)]*)*)\)")
_WIDTH = "100"


def parsers() -> dict[str, argparse.ArgumentParser]:
    """``{"datacheck": top-level parser, "scan": ..., ...}``, as ``datacheck`` builds them."""
    from datacheck.cli import build_parser

    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return {"datacheck": top, **dict(sub.choices)}


def help_text(parser: argparse.ArgumentParser) -> str:
    """The parser's ``--help`` at a fixed width (the page must not depend on the terminal)."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = _WIDTH
    try:
        return parser.format_help()
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def option_rows(parser: argparse.ArgumentParser) -> list[tuple[str, str, str]]:
    """(option, default, help) for every option of the parser but ``--help``."""
    rows = []
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if isinstance(action, argparse._VersionAction):
            continue
        name = formatter._format_action_invocation(action)
        text = " ".join(formatter._expand_help(action).split()) if action.help else ""
        rows.append((name, _default(action, text), text))
    return rows


def _default(action: argparse.Action, text: str) -> str:
    found = _DEFAULT.search(text)
    if found:
        return found.group(1)
    if not action.option_strings:
        return "(required)" if action.nargs not in ("?", "*") else "none"
    if action.nargs == 0:
        return "off"
    if action.default in (None, argparse.SUPPRESS, []):
        return "none"
    return str(action.default)


def _table(rows: list[tuple[str, str, str]]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| option | default | what it does |", "|---|---|---|"]
    lines += [f"| `{cell(o)}` | {cell(d)} | {cell(h)} |" for o, d, h in rows]
    return "\n".join(lines)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if "<!-- cli-" not in markdown:
        return markdown
    found = parsers()

    def help_block(m: re.Match[str]) -> str:
        name = m.group(1)
        command = "datacheck" if name == "datacheck" else f"datacheck {name}"
        return f"```text\n$ {command} --help\n{help_text(found[name]).rstrip()}\n```"

    markdown = _HELP.sub(help_block, markdown)
    return _OPTIONS.sub(lambda m: _table(option_rows(found[m.group(1)])), markdown)
