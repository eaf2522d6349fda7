"""The run directory on a host: where a run's files are, its manifest, and its tasks' records.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

Layout, `<workdir>/.tfctl/runs/<run_id>/`: `manifest.json`; per task (":" in its name becomes
"-"): `<task>.log` (stdout+stderr, appended; tasklog.py), `<task>.pid.json` ({pid, pgid,
supervisor_pid, started_at, restarts, start ticks, boot_id: the host's boot it started in, see
`boot.py`}), `<task>.exit.json` once it ended for good ({exit_code, signal, ended_at}; written
through `<task>.exit.slot`, room kept for it at the start, when the disk is full), `<task>.stopped`
when `tfctl down` stopped it; `finished.json` when the job ended. The host's run directory is
the source of truth about what runs there.
"""

from __future__ import annotations

import os
from typing import Any

from tfctl.remote.agent.jsonfile import read_json
from tfctl.remote.agent.wire import AgentError


def expand(path: str) -> str:
    """A workdir as the request gives it (`~` allowed), as an absolute path on this host."""
    return os.path.abspath(os.path.expanduser(str(path)))


def runs_root(workdir: str) -> str:
    return os.path.join(workdir, ".tfctl", "runs")


def run_dir_of(workdir: str, run_id: str) -> str:
    run_id = str(run_id)
    if not run_id or run_id.startswith(".") or "/" in run_id or "\0" in run_id:
        raise AgentError("bad_request", f"invalid run id {run_id!r}")
    return os.path.join(runs_root(workdir), run_id)


def task_file(run_dir: str, task: str, suffix: str) -> str:
    return os.path.join(run_dir, task.replace(":", "-").replace("/", "-") + suffix)


def load_manifest(run_dir: str) -> dict[str, Any]:
    manifest = read_json(os.path.join(run_dir, "manifest.json"))
    if not isinstance(manifest, dict):
        raise AgentError("no_run", f"no tfctl run at {run_dir} (manifest.json missing)",
                         run_dir=run_dir)
    return manifest


def manifest_tasks(manifest: dict[str, Any], names: list[str] | None) -> list[dict[str, Any]]:
    """The manifest's task records, all of them or those named (unknown names are an error)."""
    by_name = {t["name"]: t for t in manifest.get("tasks", [])}
    if names is None:
        return list(by_name.values())
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise AgentError("unknown_task", f"run {manifest.get('run_id')} has no task "
                         f"{', '.join(unknown)} on this host", tasks=unknown)
    return [by_name[n] for n in names]
