"""The terminal summary of a scan: a short table a person reads in five seconds."""

from __future__ import annotations

import os
from typing import Any

from datacheck._escape import printable
from datacheck.report._data import MANIFEST, ReportData


def display_path(path: str) -> str:
    """A report path (absolute) as a person reads it: relative to the working directory when
    it lies under it, else as recorded."""
    if not os.path.isabs(path):
        return path
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if rel.startswith("..") else rel


def format_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)  # pragma: no cover


def plural(n: int, word: str) -> str:
    """``1 file``, ``2 files``, ``1,000 rows``."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


SHOW = 5
"""Sample findings shown per check under the table (``--show N``)."""
_VALUE_WIDTH = 110


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _clip_left(text: str, width: int) -> str:
    """A long path keeps its end (the file name and row)."""
    return text if len(text) <= width else "..." + text[-(width - 3) :]


def _where(f: dict[str, Any]) -> str:
    path = display_path(str(f["path"]))
    return path if f["row"] is None else f"{path}:{f['row']}"


def sample_lines(report: ReportData, show: int = SHOW) -> list[str]:
    """The first ``show`` findings of each check (file:row, column, value or message)."""
    from datacheck.report._samples import sample_findings

    if show < 1 or not report.summary["sites"]:
        return []
    # A corrupt file is listed below with its error; a line or sample that did not decode
    # (row-level corrupt) is shown here, at its row.
    samples = [
        f
        for f in sample_findings(report, "check", show)
        if f["check"] != "corrupt" or f["row"] is not None
    ]
    if not samples:
        return []
    where = min(max(len(_where(f)) for f in samples), 48)
    column = min(max(len(str(f["column"] or "-")) for f in samples), 20)
    lines = ["", f"findings (first {show} per check; all in {MANIFEST}):"]
    by_check: dict[str, list[dict[str, Any]]] = {}
    for f in samples:
        by_check.setdefault(f["check"], []).append(f)
    for check, found in by_check.items():
        for f in found:
            value = "-" if f["value"] is None else str(f["value"])
            if (f["count"] or 1) > 1:
                value += f"  ({f['count']:,} bad elements)"
            lines.append(
                f"  {check:<14}{_clip_left(_where(f), 48):<{where}}  "
                f"{_clip(str(f['column'] or '-'), 20):<{column}}  {_clip(value, _VALUE_WIDTH)}"
            )
        total = sum(report.summary["sites"].get(check, {}).values())
        if check == "corrupt":  # less the corrupt files, each listed below
            total -= sum(1 for f in report.data["files"] if f["status"] == "corrupt")
        if total > len(found):
            lines.append(f"  {check:<14}... and {total - len(found):,} more")
    return lines


def _media_lines(folders: list[dict[str, Any]]) -> list[str]:
    """Per folder of images/audio (``summary.media``): counts by status, decode throughput."""
    if not folders:
        return []
    head = (
        f"  {'media folder':<40}{'files':>8}{'ok':>8}{'flagged':>9}{'corrupt':>9}{'/s/worker':>11}"
    )
    lines = ["", head]
    for d in folders[:10]:
        rate = f"{d['per_second']:.0f}" if d.get("per_second") else "-"
        lines.append(
            f"  {_clip_left(display_path(d['folder']), 38):<40}{d['files']:>8,}{d['ok']:>8,}"
            f"{d['flagged']:>9,}{d['corrupt']:>9,}{rate:>11}"
        )
    if len(folders) > 10:
        lines.append(f"  ... and {len(folders) - 10} more folders (summary.media in report.json)")
    return lines


def dialect_lines(report: ReportData) -> list[str]:
    """Text files read with a delimiter their name does not imply, or a decimal comma."""
    from datacheck.formats import is_tsv

    lines = []
    for f in report.data["files"]:
        d = f.get("dialect") or {}
        named = "tab" if is_tsv(f["path"]) else "comma"
        if d.get("delimiter", named) == named and "decimal" not in d:
            continue
        how = f"{d['delimiter']}-separated" + (" (the name says " + named + ")")
        if "decimal" in d:
            how += ", decimal comma"
        lines.append(f"  {display_path(f['path'])}: {how}")
    if not lines:
        return []
    more = [f"  ... and {len(lines) - 10} more (dialect in report.json)"] if len(lines) > 10 else []
    return ["", "read with a sniffed dialect:", *lines[:10], *more]


def tolerance_lines(report: ReportData) -> list[str]:
    """How each tolerated check fared (``mostly`` / ``--max-bad-fraction``)."""
    entries = report.summary.get("tolerance") or []
    if not entries:
        return []
    lines = ["", "tolerance (every finding is still recorded; only the verdict uses it):"]
    for t in entries:
        verdict = "tolerated" if t["within"] else "over: gates"
        lines.append(
            f"  {t['check']} in {t['column'] or '-'}: {t['bad_rows']:,} of "
            f"{plural(t['rows'], 'row')} ({100 * t['fraction']:.3g}%), "
            f"max {100 * t['max_fraction']:.3g}% "
            f"({t['source']}): {verdict}"
        )
    return lines


def render_text(report: ReportData, show: int = SHOW) -> str:
    """The terminal summary: counts, per-check table, sample findings, corrupt files, verdict."""
    s = report.summary
    st = s["status"]
    lines = [
        f"scanned {plural(s['files'], 'file')} ({st['ok']} ok, {st['flagged']} flagged, "
        f"{st['corrupt']} corrupt), {plural(s['rows'], 'row')}, {format_size(s['bytes'])} "
        f"in {s['seconds']:.2f} s",
    ]
    if s["sites"]:
        lines.append("")
        lines.append(f"  {'check':<14}{'errors':>10}{'warnings':>10}{'values':>12}")
        for check, by_sev in s["sites"].items():
            lines.append(
                f"  {check:<14}{by_sev.get('error', 0):>10,}{by_sev.get('warning', 0):>10,}"
                f"{s['values'].get(check, 0):>12,}"
            )
        if len(s["sites"]) > 1:
            errors = sum(v.get("error", 0) for v in s["sites"].values())
            warnings = sum(v.get("warning", 0) for v in s["sites"].values())
            lines.append(
                f"  {'total':<14}{errors:>10,}{warnings:>10,}{sum(s['values'].values()):>12,}"
            )
    lines += _media_lines(s.get("media") or [])
    lines += dialect_lines(report)
    lines += sample_lines(report, show)
    corrupt = [f for f in report.data["files"] if f["status"] == "corrupt"]
    if corrupt:
        lines.append("")
        lines.append(f"corrupt files ({len(corrupt)}):")
        for f in corrupt[:10]:
            lines.append(f"  {display_path(f['path'])}: {f['error']}")
        if len(corrupt) > 10:
            lines.append(f"  ... and {len(corrupt) - 10} more (see report.json)")
    lines += tolerance_lines(report)
    lines.append("")
    lines.append(f"report:     {report.dir / 'report.json'}")
    lines.append(f"quarantine: {report.dir / MANIFEST}")
    code = report.exit_code()
    fail_on = report.settings.get("fail_on", "error")
    verdict = "PASS" if code == 0 else f"FAIL (findings at or above '{fail_on}')"
    lines.append(f"verdict:    {verdict}, exit {code}")
    return "\n".join(printable(ln) for ln in lines)  # a name's newline cannot forge a line
