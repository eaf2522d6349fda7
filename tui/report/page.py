"""The report as files: the figures as PNGs and one self-contained HTML page that shows them."""

from __future__ import annotations

import base64
import html
import os
import time
from dataclasses import dataclass

from tfctl.remote.history.cost import (
    WHOLE_BOARD,
    RunCost,
    energy_line,
    hours_text,
    recording_cost,
)
from tfctl.remote.history.findings import RunFinding, Summary
from tfctl.remote.history.records import RunRecording
from tfctl.tui.report import figures


@dataclass(frozen=True)
class Written:
    page: str
    pngs: tuple[str, ...]


def write_report(record: RunRecording, summary: Summary, findings: list[RunFinding],
                 out_dir: str, cost: RunCost | None = None) -> Written:
    """The PNGs and report.html into `out_dir` (`cost`: what the GPUs cost, else computed
    from the record)."""
    cost = recording_cost(record) if cost is None else cost
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
    return write_page(out_dir, "report.html", images,
                      render_html(record, summary, findings, images, cost))


def write_page(out_dir: str, page_name: str, images: list[tuple[str, str, bytes]],
               text: str) -> Written:
    """A page and its charts written into `out_dir`: each image `(file name, title, PNG)` as
    its own file beside the page (which also holds them inline)."""
    pngs = []
    for name, _, data in images:
        path = os.path.join(out_dir, name)
        with open(path, "wb") as out:
            out.write(data)
        pngs.append(path)
    page = os.path.join(out_dir, page_name)
    with open(page, "w", encoding="utf-8") as out:
        out.write(text)
    return Written(page, tuple(pngs))


def gpu_hours(summary: Summary) -> str:
    """Busy / idle GPU-hours over the hosts that recorded samples; said unknown where none did."""
    if summary.gpu_hours_busy is None or summary.gpu_hours_idle is None:
        return "unknown: no GPU samples were recorded"
    hours = f"{summary.gpu_hours_busy:.2f} / {summary.gpu_hours_idle:.2f}"
    if summary.unsampled:
        hours += f" (without {', '.join(sorted(summary.unsampled))}: no samples there)"
    return hours


def cost_rows(cost: RunCost) -> list[tuple[str, str, str, str, str]]:
    """Per GPU: (GPU, name, hours held, energy, what to know about it)."""
    rows = []
    for g in cost.gpus:
        c = g.cost
        energy = "unknown" if c.energy_wh is None else \
            f"{'≥' if (c.unsampled_s or 0) > 0 else ''}{c.energy_wh:.2f} Wh"
        notes = [c.energy_unknown] if c.energy_unknown else []
        if (c.unsampled_s or 0) > 0:
            notes.append(f"{c.unsampled_s:.0f} s without a power reading, not counted")
        if c.shared_with:
            notes.append(f"shared with {', '.join(c.shared_with)}: includes theirs")
        rows.append((g.label, c.name, hours_text(c.held_s / 3600), energy, "; ".join(notes)))
    return rows


def render_html(record: RunRecording, summary: Summary, findings: list[RunFinding],
                images: list[tuple[str, str, bytes]], cost: RunCost | None = None) -> str:
    cost = recording_cost(record) if cost is None else cost
    esc = html.escape
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.started_at or 0))
    speed = ", ".join(f"{task} {value:.1f}/s" for task, value in sorted(
        summary.mean_speed.items())) or "not recorded"
    rows = [("run", record.run_id), ("started", started),
            ("duration", "?" if summary.duration_s is None else f"{summary.duration_s:.0f} s"),
            ("ended", summary.ended), ("mean speed", speed),
            ("cost", energy_line(cost)),
            ("GPU-hours busy / idle (all GPUs sampled)", gpu_hours(summary))]
    table = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    costs = "".join("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in row) + "</tr>"
                    for row in cost_rows(cost))
    costs_html = f"""<h2>What each GPU cost</h2>
<table class="cost"><tr><th>GPU</th><th>name</th><th>hours held</th><th>energy</th><th></th></tr>
{costs}</table>
<p class="note">GPU-hours: from the first start to the last exit of the run's tasks whose
CUDA_VISIBLE_DEVICES named the GPU. Note: {esc(WHOLE_BOARD)}.</p>""" if costs else ""
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
table.cost td {{ padding-right: 1.2em; }} p.note {{ color: #555; font-size: 90%; }}
</style></head>
<body>
<h1>Run {esc(record.run_id)}</h1>
<table>{table}</table>
<h2>Findings</h2>
<ul>{items}</ul>
{costs_html}
<h2>Figures</h2>
{figures_html}
</body></html>
"""
