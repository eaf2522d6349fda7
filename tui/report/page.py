"""The report as files: the figures as PNGs and one self-contained HTML page that shows them."""

from __future__ import annotations

import base64
import html
import os
import time
from dataclasses import dataclass

from tfctl.remote.history.findings import Finding, Summary
from tfctl.remote.history.records import RunRecording
from tfctl.tui.report import figures


@dataclass(frozen=True)
class Written:
    page: str
    pngs: tuple[str, ...]


def write_report(record: RunRecording, summary: Summary, findings: list[Finding],
                 out_dir: str) -> Written:
    os.makedirs(out_dir, exist_ok=True)
    images: list[tuple[str, str, bytes]] = []
    for host in sorted({g.host for g in record.gpus}):
        tracks = [g for g in record.gpus if g.host == host]
        images.append((f"gpus-{host}.png", f"{host}: GPU utilization and memory",
                       figures.gpu_figure(host, tracks)))
    if record.speeds:
        images.append(("speed.png", "training speed per worker",
                       figures.speed_figure(record.speeds)))
    if record.events:
        images.append(("timeline.png", "task timeline", figures.timeline_figure(record)))
    pngs = []
    for name, _, data in images:
        path = os.path.join(out_dir, name)
        with open(path, "wb") as out:
            out.write(data)
        pngs.append(path)
    page = os.path.join(out_dir, "report.html")
    with open(page, "w", encoding="utf-8") as out:
        out.write(render_html(record, summary, findings, images))
    return Written(page, tuple(pngs))


def gpu_hours(summary: Summary) -> str:
    """Busy / idle GPU-hours over the hosts that recorded samples; said unknown where none did."""
    if summary.gpu_hours_busy is None or summary.gpu_hours_idle is None:
        return "unknown: no GPU samples were recorded"
    hours = f"{summary.gpu_hours_busy:.2f} / {summary.gpu_hours_idle:.2f}"
    if summary.unsampled:
        hours += f" (without {', '.join(sorted(summary.unsampled))}: no samples there)"
    return hours


def render_html(record: RunRecording, summary: Summary, findings: list[Finding],
                images: list[tuple[str, str, bytes]]) -> str:
    esc = html.escape
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.started_at or 0))
    speed = ", ".join(f"{task} {value:.1f}/s" for task, value in sorted(
        summary.mean_speed.items())) or "not recorded"
    rows = [("run", record.run_id), ("started", started),
            ("duration", "?" if summary.duration_s is None else f"{summary.duration_s:.0f} s"),
            ("ended", summary.ended), ("mean speed", speed),
            ("GPU-hours busy / idle", gpu_hours(summary))]
    table = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    items = "".join(f'<li class="{esc(f.level)}">{esc(f.text)}</li>' for f in findings) or \
        '<li class="info">nothing to report: every GPU sampled worked and every task ended ' \
        'well</li>'
    figures_html = "".join(
        f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,'
        f'{base64.b64encode(data).decode()}"><figcaption>{esc(caption)}</figcaption></figure>'
        for _, caption, data in images)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>tfctl report · {esc(record.run_id)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
th {{ text-align: left; padding-right: 1em; }}
li.fail {{ color: #b00020; }} li.warn {{ color: #8a5a00; }} li.info {{ color: #205020; }}
figure {{ margin: 1.5em 0; }} img {{ max-width: 100%; border: 1px solid #ddd; }}
</style></head>
<body>
<h1>Run {esc(record.run_id)}</h1>
<table>{table}</table>
<h2>Findings</h2>
<ul>{items}</ul>
<h2>Figures</h2>
{figures_html}
</body></html>
"""
