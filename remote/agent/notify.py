"""Word when a run ends (`job.notify`), sent from the chief's host with no client connected.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

The client writes `notify` ({"command", "webhook"}) into one host's manifest only: the host of
the first task whose end is the job's (the chief, else worker 0), where the watcher knows the
exit status. That watcher, once it has judged the job's end (or was stopped by `tfctl down`
after the run was up), starts a notifier: a detached process of its own session, so that
neither the end's grace periods nor `down` killing the watcher's session delay or cut it.

The notifier runs the command with `sh -c` in the workdir, the notice in its environment
(`TFCTL_RUN_ID`, `TFCTL_EXIT_CODE` (empty when not known), `TFCTL_REASON` (`finished`,
`failed` or `stopped`), `TFCTL_CAUSE`, `TFCTL_DURATION_S`, `TFCTL_HOST`, `TFCTL_INVENTORY`,
`TFCTL_RUN_DIR`, and `TFCTL_NOTICE`, all of it as JSON), and POSTs the same JSON to the webhook
with urllib (a `text` line in it, which Slack's and Matrix's hooks show; ntfy shows the body).
Each has a time limit; the webhook is tried `WEBHOOK_TRIES` times. What came of both is
recorded in the run's `notify.json` (and `notify.log`); a failure never reaches the watcher.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tfctl.remote.agent.detach import fork_detached
from tfctl.remote.agent.jsonfile import write_json
from tfctl.remote.agent.wire import json_dumps

NOTIFY_FILE = "notify.json"
COMMAND_TIMEOUT_S = 120.0
WEBHOOK_TIMEOUT_S = 15.0
WEBHOOK_TRIES = 3
WEBHOOK_BACKOFF_S = 3.0


def notice_of(manifest: dict[str, Any], run_dir: str, reason: str, cause: str,
              exit_code: int | None) -> dict[str, Any]:
    """The run's end as the command and the webhook get it."""
    started = manifest.get("created_at")
    duration = None if started is None else round(max(0.0, time.time() - float(started)), 1)
    run_id = str(manifest.get("run_id", ""))
    code = "" if exit_code is None else f", exit {exit_code}"
    took = "" if duration is None else f" after {duration:g} s"
    return {"run_id": run_id, "reason": reason, "exit_code": exit_code, "cause": cause,
            "duration_s": duration, "host": manifest.get("host"),
            "inventory": manifest.get("inventory"), "run_dir": run_dir,
            "text": f"tfctl run {run_id} ({manifest.get('inventory')}) {reason}{code}{took}: "
                    f"{cause}"}


def start_notifier(run_dir: str, manifest: dict[str, Any], reason: str, cause: str,
                   exit_code: int | None) -> int | None:
    """Send the run's word in a process of its own (None: nothing to send, or no fork)."""
    ask = manifest.get("notify") or {}
    if not (ask.get("command") or ask.get("webhook")):
        return None
    notice = notice_of(manifest, run_dir, reason, cause, exit_code)
    try:
        return fork_detached(lambda: send(run_dir, ask, notice),
                             os.path.join(run_dir, "notify.log"))
    except OSError:
        return None


def send(run_dir: str, ask: dict[str, Any], notice: dict[str, Any]) -> int:
    """Run the command and POST the webhook; record both outcomes in `notify.json`."""
    record: dict[str, Any] = {"notice": notice}
    if ask.get("command"):
        record["command"] = run_command(str(ask["command"]), notice,
                                        os.path.dirname(os.path.dirname(os.path.dirname(run_dir))))
    if ask.get("webhook"):
        record["webhook"] = post_webhook(str(ask["webhook"]), notice)
    record["at"] = time.time()
    try:
        write_json(os.path.join(run_dir, NOTIFY_FILE), record)
    except OSError as exc:
        print(f"tfctl notify: cannot record {NOTIFY_FILE}: {exc}", flush=True)
    return 0


def environment(notice: dict[str, Any]) -> dict[str, str]:
    """The notice as TFCTL_* variables, over this process's own environment."""
    env = dict(os.environ)
    env.update({
        "TFCTL_RUN_ID": str(notice["run_id"]),
        "TFCTL_EXIT_CODE": "" if notice["exit_code"] is None else str(notice["exit_code"]),
        "TFCTL_REASON": str(notice["reason"]),
        "TFCTL_CAUSE": str(notice["cause"]),
        "TFCTL_DURATION_S": "" if notice["duration_s"] is None else str(notice["duration_s"]),
        "TFCTL_HOST": str(notice.get("host") or ""),
        "TFCTL_INVENTORY": str(notice.get("inventory") or ""),
        "TFCTL_RUN_DIR": str(notice.get("run_dir") or ""),
        "TFCTL_NOTICE": json_dumps(notice),
    })
    return env


def run_command(command: str, notice: dict[str, Any], workdir: str) -> dict[str, Any]:
    """`sh -c command` in the workdir, its output into notify.log; its exit or why it had none."""
    import subprocess

    started = time.time()
    try:
        done = subprocess.run(["sh", "-c", command], env=environment(notice),
                              cwd=workdir if os.path.isdir(workdir) else "/",
                              stdin=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"exit_code": None, "error": f"still running after {COMMAND_TIMEOUT_S:g} s: "
                                            "killed"}
    except OSError as exc:
        return {"exit_code": None, "error": str(exc)}
    return {"exit_code": done.returncode, "error": None,
            "elapsed_s": round(time.time() - started, 2)}


def post_webhook(url: str, notice: dict[str, Any]) -> dict[str, Any]:
    """POST the notice as JSON; the HTTP status, or the last error after WEBHOOK_TRIES."""
    import urllib.error
    import urllib.request

    body = json_dumps(notice).encode()
    error = None
    for attempt in range(WEBHOOK_TRIES):
        if attempt:
            time.sleep(WEBHOOK_BACKOFF_S * attempt)
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "tfctl-notify"})
        try:
            with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_S) as answer:
                return {"status": answer.status, "error": None, "tries": attempt + 1}
        except urllib.error.HTTPError as exc:  # the server answered: trying again won't help
            return {"status": exc.code, "error": f"HTTP {exc.code} {exc.reason}",
                    "tries": attempt + 1}
        except (OSError, ValueError) as exc:  # URLError, a timeout, a refused connect
            error = str(getattr(exc, "reason", None) or exc) or type(exc).__name__
    return {"status": None, "error": error, "tries": WEBHOOK_TRIES}
