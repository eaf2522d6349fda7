"""`tfctl ui --web` over the testbed's SSH hosts, following a run: a second tab costs the hosts
nothing new. Both tabs read the one set of sources the server runs (its hub, tui/web/hub.py),
so with two tabs open, the lab view (`L`) in each, every host has the one SSH connection and
the one nvidia-smi stream it had with one tab, and no more agent sessions than one dashboard
keeps (their pool grows, up to MAX_IDLE_SESSIONS, as the dashboard's own reads happen to
overlap, tabs or not); after Ctrl-C none of them is left."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.testbed.testbed import Testbed
from tests.support.testbedtools import FOREVER, job_dir, tfctl, wait_until
from tests.support.webui import (
    DRAW_S,
    Forwarder,
    WebServer,
    chromium,
    colours,
    host_costs,
    new_page,
    open_dashboard,
    wait_for,
)
from tfctl.remote.connect.session.agentclient import MAX_IDLE_SESSIONS

pytestmark = pytest.mark.testbed


def settled(testbed: Testbed) -> dict[str, dict[str, int]]:
    """What runs on the hosts once two counts in a row agree (the tabs' first reads done)."""
    last: list[dict[str, dict[str, int]]] = [host_costs(testbed)]

    def same_again() -> dict[str, dict[str, int]] | None:
        now = host_costs(testbed)
        agreed = now == last[0]
        last[0] = now
        return now if agreed else None

    found: dict[str, dict[str, int]] = wait_until("the hosts' processes to settle", same_again,
                                                  60, every_s=0.5)
    return found


def recording(testbed: Testbed) -> dict[str, dict[str, int]] | None:
    """What runs on the hosts once the run records its GPUs (remote/agent/record.py), else
    None."""
    costs = host_costs(testbed)
    return costs if costs["h1"]["nvidia-smi streams"] and costs["h2"]["nvidia-smi streams"] \
        else None


def test_a_second_tab_costs_the_hosts_nothing_new(gpu_testbed: Testbed, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    inv = gpu_testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER)
    up = tfctl(inv, "up")
    assert up.returncode == 0, up.stderr
    served: WebServer | None = None
    try:
        before = wait_until("the run's GPU recorder on h1 and h2 (an nvidia-smi stream each)",
                            lambda: recording(gpu_testbed), 30)
        # Users' default --persist: the server must not lean on kept connections to be cheap.
        served = WebServer(inv, env={"TFCTL_PERSIST": "60"})
        tunnel = Forwarder(served.port)
        with sync_playwright() as playwright:
            browser = chromium(playwright)
            try:
                pages = []
                for _ in range(2):
                    page = new_page(browser)
                    pages.append(page)
                    open_dashboard(page, f"http://127.0.0.1:{tunnel.port}/?token={served.token}")
                    wait_for("the dashboard drawn", lambda p=page: colours(p) > 50, DRAW_S)
                    page.click("#terminal")
                    page.keyboard.press("L")  # the lab view: one more read of every host
                    costs = settled(gpu_testbed)
                    if len(pages) == 1:
                        one = costs
                        assert all(one[h]["ssh"] and one[h]["agents"] for h in one), one
                        for h in ("h1", "h2"):  # the GPU stream, beside the run's own recorder
                            assert one[h]["nvidia-smi streams"] == \
                                before[h]["nvidia-smi streams"] + 1, (before, one)
                assert len(served.viewers()) == 2
                for h, two in costs.items():
                    assert two["ssh"] == one[h]["ssh"] == 1, (one, costs)
                    assert two["nvidia-smi streams"] == one[h]["nvidia-smi streams"], (one, costs)
                    assert two["agents"] <= max(one[h]["agents"], MAX_IDLE_SESSIONS), (one, costs)
                assert served.interrupt() == 0
                wait_until("nothing of the dashboard left on the hosts",
                           lambda: host_costs(gpu_testbed) == before, 20, every_s=0.5)
            finally:
                browser.close()
                tunnel.close()
    finally:
        if served is not None:
            served.close()
        tfctl(inv, "down")
