"""`tfctl usage --html DIR`: the lab's GPU use as files, made the way `tfctl report` makes its page:
a PNG per figure (matplotlib, imported only here and in figures.py) and one self-contained
HTML page that shows them (the PNGs inline as data URIs).

Figures: per user, their GPU-hours per day (held busy, held idle); per host, each user's
GPU-hours (busy, idle). The table says the totals per user, with the run kinds, the idle share
and the energy; the hosts that did not answer are named (their hours are not in the page).
"""

from __future__ import annotations

import base64
import html
import os
import re
import time
from collections.abc import Sequence

from tfctl.remote.lab.usage import (
    KINDS,
    Usage,
    UsageRow,
    day_of,
    energy_words,
    hours_words,
    share_words,
    totals,
)
from tfctl.tui.report.figures import _png, _pyplot
from tfctl.tui.report.page import Written, write_page

BUSY, IDLE = "tab:blue", "tab:orange"


def window_days(since_s: float, until_s: float) -> list[str]:
    """Every local date from `since_s` to `until_s` (a day without use is a day of none)."""
    days, hour = [], int(since_s // 3600)
    while hour <= until_s // 3600:
        day = day_of(hour)
        if day not in days:
            days.append(day)
        hour += 1
    return days


def stacked_figure(title: str, labels: Sequence[str], busy_h: Sequence[float],
                   idle_h: Sequence[float]) -> bytes:
    """Bars of GPU-hours per label: held busy below, held idle on top."""
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(max(4.0, 0.7 * len(labels) + 2), 3.2))
    axis.bar(labels, busy_h, color=BUSY, label="held, busy")
    axis.bar(labels, idle_h, bottom=busy_h, color=IDLE, label="held, idle")
    axis.set_ylabel("GPU-hours")
    axis.set_title(title)
    axis.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.autofmt_xdate()
    return _png(fig)


def user_figure(user: str, rows: Sequence[UsageRow], days: Sequence[str]) -> bytes:
    """One user's GPU-hours on each of `days`."""
    by_day = {t.key: t for t in totals(rows, "day")}
    days = sorted(set(days) | set(by_day))
    return stacked_figure(f"{user}: GPU-hours per day", days,
                          [(by_day[d].held_s - by_day[d].idle_s) / 3600 if d in by_day else 0.0
                           for d in days],
                          [by_day[d].idle_s / 3600 if d in by_day else 0.0 for d in days])


def host_figure(host: str, rows: Sequence[UsageRow]) -> bytes:
    """One host's GPU-hours per user."""
    found = totals(rows, "user")
    return stacked_figure(f"{host}: GPU-hours per user", [t.key for t in found],
                          [(t.held_s - t.idle_s) / 3600 for t in found],
                          [t.idle_s / 3600 for t in found])


def _file_name(prefix: str, name: str) -> str:
    return f"{prefix}-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.png"


def write_usage_page(usage: Usage, out_dir: str) -> Written:
    """The PNGs and usage.html into `out_dir`."""
    os.makedirs(out_dir, exist_ok=True)
    images: list[tuple[str, str, bytes]] = []
    first = max(usage.since_s, usage.until_s - 62 * 86400)  # a bar a day: two months at most
    days = window_days(first, usage.until_s)
    for user in sorted({r.user for r in usage.rows}):
        mine = [r for r in usage.rows if r.user == user]
        images.append((_file_name("user", user), f"user {user}: GPU-hours per day",
                       user_figure(user, mine, days)))
    for host in usage.answered:
        theirs = [r for r in usage.rows if r.host == host]
        if theirs:
            images.append((_file_name("host", host), f"host {host}: GPU-hours per user",
                           host_figure(host, theirs)))
    return write_page(out_dir, "usage.html", images, render_usage_html(usage, images))


def render_usage_html(usage: Usage, images: Sequence[tuple[str, str, bytes]]) -> str:
    esc = html.escape

    def when(t: float) -> str:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))

    per_user = totals(usage.rows, "user")
    head = "".join(f"<th>{esc(h)}</th>" for h in (
        "user", "GPU-hours", *(f"{k}s" if k != "other" else "other processes" for k in KINDS),
        "held idle", "energy"))
    body = "".join(
        "<tr>" + "".join(f"<td>{esc(v)}</td>" for v in (
            t.key, f"{t.gpu_hours:.2f}", *(hours_words(t.by_kind[k]) for k in KINDS),
            share_words(t.idle_share), energy_words(t))) + "</tr>" for t in per_user)
    missing = "".join(f"<li>{esc(h)}: {esc(why)}</li>" for h, why in usage.unanswered.items())
    missing_html = (f"<h2>Hosts left out</h2><p>These hosts did not answer: their hours are "
                    f"not counted (not as zero: unknown).</p><ul>{missing}</ul>"
                    if missing else "")
    threshold = "" if usage.idle_below_pct is None else \
        f" under {usage.idle_below_pct:g} % utilization"
    figures_html = "".join(
        f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,'
        f'{base64.b64encode(data).decode()}"><figcaption>{esc(caption)}</figcaption></figure>'
        for _, caption, data in images)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>tfctl usage · {esc(when(usage.since_s))} – {esc(when(usage.until_s))}</title>
<style>
body {{ font-family: sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
th {{ text-align: left; padding-right: 1em; }} td {{ padding-right: 1.2em; }}
figure {{ margin: 1.5em 0; }} img {{ max-width: 100%; border: 1px solid #ddd; }}
p.note {{ color: #555; font-size: 90%; }}
</style></head>
<body>
<h1>GPU use of the lab, {esc(when(usage.since_s))} – {esc(when(usage.until_s))}</h1>
<p>Hosts counted: {esc(", ".join(usage.answered) or "none")}.</p>
<table class="usage"><tr>{head}</tr>
{body}</table>
<p class="note">Held idle: the GPU was held{esc(threshold)}. tfctl's runs and sessions are
counted by their watchers each second; other processes by tfctl's samplers, a minute for each
minute they were seen in. Energy: the whole board's, as nvidia-smi measures it.</p>
{missing_html}
<h2>Figures</h2>
{figures_html}
</body></html>
"""
