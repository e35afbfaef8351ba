"""The terminal summary of a scan: a short table a person reads in five seconds."""

from __future__ import annotations

from datacheck.report._data import MANIFEST, ReportData


def format_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)  # pragma: no cover


def render_text(report: ReportData) -> str:
    s = report.summary
    st = s["status"]
    lines = [
        f"scanned {s['files']} files ({st['ok']} ok, {st['flagged']} flagged, "
        f"{st['corrupt']} corrupt), {s['rows']:,} rows, {format_size(s['bytes'])} in {s['seconds']:.2f} s",
    ]
    if s["sites"]:
        lines.append("")
        lines.append(f"  {'check':<14}{'errors':>10}{'warnings':>10}{'values':>12}")
        for check, by_sev in s["sites"].items():
            lines.append(
                f"  {check:<14}{by_sev.get('error', 0):>10,}{by_sev.get('warning', 0):>10,}"
                f"{s['values'].get(check, 0):>12,}"
            )
    corrupt = [f for f in report.data["files"] if f["status"] == "corrupt"]
    if corrupt:
        lines.append("")
        lines.append(f"corrupt files ({len(corrupt)}):")
        for f in corrupt[:10]:
            lines.append(f"  {f['path']}: {f['error']}")
        if len(corrupt) > 10:
            lines.append(f"  ... and {len(corrupt) - 10} more (see report.json)")
    lines.append("")
    lines.append(f"report:     {report.dir / 'report.json'}")
    lines.append(f"quarantine: {report.dir / MANIFEST}")
    code = report.exit_code()
    fail_on = report.settings.get("fail_on", "error")
    verdict = "PASS" if code == 0 else f"FAIL (findings at or above '{fail_on}')"
    lines.append(f"verdict:    {verdict}, exit {code}")
    return "\n".join(lines)
