"""From a run id to a written report: the records brought home, read, judged and drawn.

Shared by `tfctl report` and the dashboard's past-runs screen. Blocking (rsync over SSH, then
matplotlib): call it from a command or a thread worker.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.history.collect import collect, collect_root
from tfctl.remote.history.cost import RunCost, recording_cost
from tfctl.remote.history.findings import RunFinding, Summary, all_findings, summarize
from tfctl.remote.history.records import read_run
from tfctl.tui.report.page import Written, write_report


@dataclass(frozen=True)
class Built:
    written: Written
    findings: list[RunFinding]
    summary: Summary
    cost: RunCost
    missing_hosts: dict[str, str]
    """Hosts whose records could not be fetched (host → why): the report leaves them out."""


def build_report(fleet: Fleet, run_id: str, hosts: list[str],
                 out_dir: str | None = None) -> Built:
    fetched = collect(fleet, run_id, hosts, outputs=False)
    root = collect_root(fleet.inventory, run_id)
    record = read_run(root, run_id)
    findings, summary, cost = all_findings(record), summarize(record), recording_cost(record)
    written = write_report(record, summary, findings, out_dir or os.path.join(root, "report"),
                           cost)
    return Built(written, findings, summary, cost,
                 {h: str(e) for h, e in fetched.failed.items()})
