"""`make_app`: the one way to build the dashboard, for `tfctl ui`, `tfctl demo` and the tests.

Why a factory (as posting's `make_posting`): the callers say what to inject (a controller, and
where they have them telemetry, owners, findings, a tunnel) and how often to refresh; how those
become the app's `Sources`, `Timing` and thread `Workers` stays here and in `TfctlApp`. This
module imports textual (through `app.py`): import it where the dashboard is about to run, never at
the top of a headless command.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tfctl.tui.app.app import TfctlApp
from tfctl.tui.app.sources import (
    FindingsSource,
    OwnerOf,
    RunControl,
    Sources,
    TelemetrySource,
    Timing,
    Tunnel,
)


def make_app(
    controller: RunControl,
    telemetry: TelemetrySource | None = None,
    *,
    owners: OwnerOf | None = None,
    findings: FindingsSource | None = None,
    tunnel: Tunnel | None = None,
    reporter: Callable[[str], str] | None = None,
    opener: Callable[[str], object] | None = None,
    shell: Callable[[str], int] | None = None,
    gpu_refresh_s: float = 1.0,
    task_refresh_s: float = 2.0,
    log_refresh_s: float = 1.0,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> TfctlApp:
    """The dashboard over `controller` (its `inventory` and `plan` are the ones shown).

    `telemetry` None: every host says "telemetry not available"; `owners` None: GPU owners are
    worked out from the GPU processes and the tasks' pids; `findings` None: only the app's own
    (unreachable hosts, failed tasks); `tunnel` None: `t` says the tunnel is not available.
    The caller keeps the controller (and closes it); the app starts and stops the telemetry and
    closes a tunnel it opened."""
    sources = Sources(controller, telemetry, owners=owners, findings=findings, tunnel=tunnel,
                      reporter=reporter, opener=opener, shell=shell)
    timing = Timing(gpu_refresh_s, task_refresh_s, log_refresh_s, clock=clock,
                    monotonic=monotonic)
    return TfctlApp(sources, timing)
