"""HTML views of a scan report: the Jupyter summary and a self-contained ``report.html``.

``report.html`` needs nothing but the file: CSS is inline, plots are base64 PNG images, and
there is no script and no network asset, so it opens from a CI artifact store or an e-mail.
Every number cell carries its raw value in ``data-value`` so tools (and our tests) can compare
the page with ``report.json``.
"""

from __future__ import annotations

import base64
import html
import io
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datacheck.report._text import format_size

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from datacheck.report._data import ReportData

__all__ = ["render_html", "summary_html", "write_html"]

MAX_FILE_ROWS = 5000
"""Files listed in ``report.html`` (flagged and corrupt first); the rest are in report.json."""
NOTEBOOK_FILE_ROWS = 20
"""Files listed in the Jupyter summary."""
MAX_COLUMN_PLOTS = 3

_CSS = """
.dc { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 14px; color: #222; }
.dc h1 { font-size: 20px; margin: 0 0 4px; } .dc h2 { font-size: 16px; margin: 18px 0 6px; }
.dc table { border-collapse: collapse; margin: 4px 0 8px; }
.dc th, .dc td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
.dc th { background: #f4f4f4; } .dc td.num { text-align: right; font-variant-numeric: tabular-nums; }
.dc .verdict { display: inline-block; padding: 2px 8px; border-radius: 4px; color: #fff; font-weight: 600; }
.dc .pass { background: #2e7d32; } .dc .fail { background: #c62828; }
.dc tr.flagged td.status { color: #c62828; font-weight: 600; }
.dc tr.corrupt td.status { color: #fff; background: #7f0000; font-weight: 600; }
.dc td.value, .dc td.sample { font-family: ui-monospace, monospace; font-size: 12px; max-width: 40em; }
.dc .muted { color: #777; } .dc img { max-width: 100%; border: 1px solid #eee; margin: 4px 0; }
.dc .alarm { background: #7f0000; color: #fff; padding: 8px 14px; border-radius: 4px; margin: 8px 0; }
.dc .alarm code, .dc .alarm b { color: #fff; } .dc .alarm ul { margin: 4px 0 2px; padding-left: 20px; }
.dc .whole { border-left: 6px solid #7f0000; background: #fbeaea; padding: 6px 12px; margin: 8px 0; }
.dc .whole ul { margin: 4px 0 2px; padding-left: 20px; }
.dc tr.gate-whole td.check { color: #fff; background: #7f0000; font-weight: 600; }
.dc tr.gate-error td.check { color: #c62828; font-weight: 600; }
.dc tr.gate-warning td.check { color: #a15c00; }
"""


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _num(value: int | float, field: str) -> str:
    text = f"{value:,}" if isinstance(value, int) else f"{value:,.3f}"
    return f'<td class="num" data-field="{field}" data-value="{value}">{text}</td>'


def _verdict(report: ReportData) -> str:
    code = report.exit_code()
    fail_on = report.settings.get("fail_on", "error")
    if code == 0:
        return '<span class="verdict pass" id="verdict" data-value="0">PASS</span>'
    return (
        f'<span class="verdict fail" id="verdict" data-value="{code}">FAIL</span> '
        f'<span class="muted">findings at or above {_esc(fail_on)}</span>'
    )


def _summary_table(report: ReportData) -> str:
    s = report.summary
    cells = [("files", s["files"]), ("rows", s["rows"]), ("bytes", s["bytes"])]
    cells += [(k, s["status"][k]) for k in ("ok", "flagged", "corrupt")]
    head = "".join(f"<th>{k}</th>" for k, _ in cells) + "<th>size</th>"
    body = "".join(_num(v, k) for k, v in cells) + f"<td>{format_size(s['bytes'])}</td>"
    return f'<table id="summary"><tr>{head}</tr><tr>{body}</tr></table>'


def _check_rank(report: ReportData) -> dict[str, int]:
    """check -> its place in the page: checks with errors first (``corrupt``, then the other
    whole-file checks, then by errors), warning-only checks after them."""
    from datacheck.report._rank import whole_file_check

    def key(item: tuple[str, dict[str, int]]) -> tuple[bool, bool, bool, int, int, str]:
        check, by_sev = item
        errors, warnings = by_sev.get("error", 0), by_sev.get("warning", 0)
        whole = whole_file_check(check)
        return (not errors, check != "corrupt", not whole, -errors, -warnings, check)

    ranked = sorted(report.summary["sites"].items(), key=key)
    return {check: i for i, (check, _) in enumerate(ranked)}


def _checks_table(report: ReportData) -> str:
    s = report.summary
    if not s["sites"]:
        return '<p id="checks" class="muted">No findings.</p>'
    from datacheck.report._rank import whole_file_check

    rows = []
    for check, by_sev in sorted(s["sites"].items(), key=lambda kv: _check_rank(report)[kv[0]]):
        gate = "whole" if by_sev.get("error") and whole_file_check(check) else None
        gate = gate or ("error" if by_sev.get("error") else "warning")
        rows.append(
            f'<tr class="gate-{gate}" data-check="{_esc(check)}"><td class="check">{_esc(check)}</td>'
            f"{_num(by_sev.get('error', 0), 'errors')}{_num(by_sev.get('warning', 0), 'warnings')}"
            f"{_num(s['values'].get(check, 0), 'values')}</tr>"
        )
    head = "<tr><th>check</th><th>errors</th><th>warnings</th><th>bad values</th></tr>"
    return f'<table id="checks">{head}{"".join(rows)}</table>'


SAMPLES_PER_CHECK = 5
SAMPLES_PER_FILE = 3


def _samples_table(report: ReportData) -> str:
    """The first findings of each check: file, row, column, severity, value or message."""
    from datacheck.report._samples import sample_findings

    samples = sample_findings(report, "check", SAMPLES_PER_CHECK)
    if not samples:
        return ""
    rank = _check_rank(report)
    samples.sort(key=lambda f: (f["severity"] != "error", rank.get(f["check"], len(rank))))
    rows = []
    for f in samples:
        row = _num(f["row"], "row") if f["row"] is not None else '<td class="muted">-</td>'
        rows.append(
            f'<tr data-check="{_esc(f["check"])}" data-path="{_esc(f["path"])}">'
            f"<td>{_esc(f['check'])}</td><td>{_esc(f['path'])}</td>{row}"
            f"<td>{_esc(f['column'] or '-')}</td><td>{_esc(f['severity'])}</td>"
            f'<td class="value">{_esc(f["value"] if f["value"] is not None else "-")}</td>'
            f"{_num(int(f['count'] or 1), 'count')}</tr>"
        )
    head = (
        "<tr><th>check</th><th>file</th><th>row</th><th>column</th><th>severity</th>"
        "<th>value or message</th><th>bad elements</th></tr>"
    )
    return (
        f'<p class="muted">The first {SAMPLES_PER_CHECK} findings of each check, errors '
        f"first, in the order of the table above; every one is in quarantine.parquet.</p>"
        f'<table id="samples">{head}{"".join(rows)}</table>'
    )


def _file_samples(report: ReportData) -> dict[str, str]:
    """path -> ``"x1 row 17: nan; label row 20: 12"`` (its first findings)."""
    from datacheck.report._samples import sample_findings

    out: dict[str, list[str]] = {}
    for f in sample_findings(report, "path", SAMPLES_PER_FILE, exclude=("corrupt",)):
        where = f" row {f['row']}" if f["row"] is not None else ""
        what = f["value"] if f["value"] is not None else "-"
        out.setdefault(f["path"], []).append(f"{f['column'] or ''}{where} {f['check']}: {what}")
    return {p: "; ".join(v) for p, v in out.items()}


def _ordered_files(report: ReportData) -> list[dict[str, Any]]:
    """Files by what gates: corrupt, failed whole, row errors, warnings; clean ones last."""
    from datacheck.report._rank import gate_order

    rank = {s.path: i for i, s in enumerate(gate_order(report))}
    return sorted(report.data["files"], key=lambda f: (rank.get(f["path"], len(rank)), f["path"]))


def _files_table(report: ReportData, limit: int, samples_column: bool = False) -> str:
    files = _ordered_files(report)
    checks = sorted({c for f in files for c in f["counts"]})
    samples = _file_samples(report) if samples_column else {}
    heads = ["path", "format", "status", "rows", "bytes", *checks, "error"]
    head = "".join(f"<th>{h}</th>" for h in heads + (["first findings"] if samples_column else []))
    rows = []
    for f in files[:limit]:
        counts = "".join(_num(int(f["counts"].get(c, 0)), f"n_{c}") for c in checks)
        sample = (
            f'<td class="sample">{_esc(samples.get(f["path"], ""))}</td>' if samples_column else ""
        )
        rows.append(
            f'<tr class="{_esc(f["status"])}" data-path="{_esc(f["path"])}">'
            f"<td>{_esc(f['path'])}</td><td>{_esc(f['format'])}</td>"
            f'<td class="status">{_esc(f["status"])}</td>{_num(int(f["rows"]), "rows")}'
            f"{_num(int(f['bytes']), 'bytes')}{counts}<td>{_esc(f.get('error') or '')}</td>"
            f"{sample}</tr>"
        )
    more = len(files) - limit
    note = (
        f'<p class="muted">{more:,} more files (clean ones last) are in report.json.</p>'
        if more > 0
        else ""
    )
    return f'<table id="files"><tr>{head}</tr>{"".join(rows)}</table>{note}'


GATE_ITEMS = 20
"""Files named in the alarm at the top (all of them are in the files table)."""


def _gate_html(report: ReportData) -> str:
    """What cannot be missed: corrupt files (re-generate them) and the files the gate fails
    whole (no row of them may be trained on), above everything else."""
    from datacheck.report._explore import gate_reason, gated_files

    gated = gated_files(report)
    corrupt = [e for e in report.data["files"] if e["status"] == "corrupt"]
    whole = {p: v for p, v in gated.items() if p not in {e["path"] for e in corrupt}}
    parts = []
    if corrupt:
        items = "".join(
            f'<li data-path="{_esc(e["path"])}"><code>{_esc(e["path"])}</code>: '
            f"{_esc(e.get('error') or '')}</li>"
            for e in corrupt[:GATE_ITEMS]
        )
        more = _more(len(corrupt))
        parts.append(
            f'<div class="alarm" id="corrupt" data-value="{len(corrupt)}"><b>{len(corrupt):,} '
            f"corrupt file{'s' if len(corrupt) != 1 else ''}: re-generate "
            f"{'them' if len(corrupt) != 1 else 'it'}</b> (unreadable: no row was checked)"
            f"<ul>{items}</ul>{more}</div>"
        )
    if whole:
        items = "".join(
            f'<li data-path="{_esc(p)}"><code>{_esc(p)}</code>: {_esc(gate_reason(v))}</li>'
            for p, v in list(whole.items())[:GATE_ITEMS]
        )
        parts.append(
            f'<div class="whole" id="whole" data-value="{len(whole)}"><b>{len(whole):,} '
            f"file{'s' if len(whole) != 1 else ''} the gate fails whole</b> (a file- or "
            f"column-level error: no row of {'them' if len(whole) != 1 else 'it'} may be "
            f"trained on)<ul>{items}</ul>{_more(len(whole))}</div>"
        )
    return "".join(parts)


def _more(n: int) -> str:
    return f"<p>... and {n - GATE_ITEMS:,} more in the files table.</p>" if n > GATE_ITEMS else ""


def summary_html(report: ReportData) -> str:
    """The Jupyter view (``Report._repr_html_``): verdict, counts, checks, worst files."""
    return (
        f'<div class="dc"><style>{_CSS}</style>'
        f"<p><b>datacheck report</b> <code>{_esc(report.dir)}</code> {_verdict(report)}</p>"
        f"{_gate_html(report)}{_summary_table(report)}{_checks_table(report)}"
        f"{_files_table(report, NOTEBOOK_FILE_ROWS)}</div>"
    )


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _worst_columns(report: ReportData, limit: int) -> list[str]:
    """The columns with the most row errors, then the most warnings (from the quarantine)."""
    from datacheck.report._manifest import count_by

    counts = count_by(report.manifest_path, ["column", "severity"], rows_only=True)
    errors: dict[str, int] = {}
    warnings: dict[str, int] = {}
    for (column, severity), n in counts.items():
        if column is not None:
            into = errors if severity == "error" else warnings
            into[column] = into.get(column, 0) + n
    columns = set(errors) | set(warnings)
    ranked = sorted(columns, key=lambda c: (-errors.get(c, 0), -warnings.get(c, 0), c))
    return ranked[:limit]


def _drifted_columns(report: ReportData, limit: int) -> list[str]:
    """Columns with the most column-level findings (drift, unnormalized)."""
    from collections import Counter

    from datacheck.report._plots_column import column_level_findings

    counts = Counter(f["column"] for f in column_level_findings(report) if f["column"])
    return [c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]


def _plots_section(report: ReportData) -> str:
    from datacheck.errors import DatacheckError
    from datacheck.report._plots import ReportPlots

    plot = ReportPlots(report)
    figures: list[tuple[str, Callable[[], Any]]] = [("findings per shard and check", plot.by_shard)]
    for col in _worst_columns(report, MAX_COLUMN_PLOTS):
        figures.append((f"distribution of {col}", partial(plot.column, col)))
    for col in _drifted_columns(report, MAX_COLUMN_PLOTS):
        figures.append((f"statistics of {col} per shard", partial(plot.stats, col)))
    parts = []
    for title, make in figures:
        try:
            fig = make()
        except DatacheckError as exc:  # e.g. a non-numeric column: say so, keep the page
            parts.append(f'<p class="muted">{_esc(title)}: {_esc(exc)}</p>')
            continue
        parts.append(
            f'<figure><img class="plot" alt="{_esc(title)}" '
            f'src="data:image/png;base64,{_png(fig)}"></figure>'
        )
    return "".join(parts)


def render_html(report: ReportData, *, plots: bool = True) -> str:
    """The whole ``report.html`` page as a string (no external assets)."""
    s = report.summary
    tool = report.data.get("tool", "datacheck")
    inputs = ", ".join(map(str, report.settings.get("inputs", [])))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>datacheck report: {_esc(report.dir.name)}</title><style>{_CSS} body {{ margin: 16px; }}</style></head>
<body class="dc">
<h1>datacheck report {_verdict(report)}</h1>
<p class="muted">{_esc(tool)} &middot; inputs: {_esc(inputs)} &middot; schema: {_esc(report.settings.get("schema") or "none")}
&middot; {s.get("seconds", 0):.2f} s</p>
{_gate_html(report)}
<h2>Summary</h2>{_summary_table(report)}
<h2>Findings by check</h2>{_checks_table(report)}
{_samples_table(report)}
{"<h2>Plots</h2>" + _plots_section(report) if plots else ""}
<h2>Files</h2>{_files_table(report, MAX_FILE_ROWS, samples_column=True)}
</body></html>
"""


def write_html(report: ReportData, dest: str | os.PathLike[str] | None = None) -> Path:
    """Write ``report.html`` (default: into the report folder); returns its path."""
    path = Path(dest) if dest is not None else report.dir / "report.html"
    if path.is_dir():
        path = path / "report.html"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_html(report), encoding="utf-8")
    os.replace(tmp, path)
    return path
