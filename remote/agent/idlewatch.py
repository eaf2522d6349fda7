"""The lab policy's idle rule applied to one run, by the run's watcher (docs/policy.md).

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, Linux, no tfctl imports.

The watcher (`watch.py`) runs as the run's user, one per run per host, and samples nvidia-smi
through its recorder (`record.py`, one stream a second). Each tick it hands this module the
latest utilization of every GPU; where the policy's `idle` rule applies to the run (a session,
or a run where `applies_to` names runs: `policy.idle_rule_for`), the idle clock runs while
every GPU the run holds on this host is under `below_util_pct`. It restarts with GPU use over
the threshold, with the user's activity (the run directory's `activity` file, whose mtime a
session keeps at its user's last keystroke or executed cell), and where a GPU has no fresh
sample (nothing is stopped on a guess). After `warn_after` the owner is told (the job's
`notify`, `events.jsonl`, and `idle.json`, which `status` reads and the run's claim carries for
every user's `tfctl lab`); after `stop_after` this host's part of the run is stopped as
`tfctl down` stops it, `finished.json` says why (`tfctl runs` shows it), and the watcher, ending,
releases the claim and tells the owner.

The watcher looks at the policy file again every POLICY_LOOK_S, so an administrator's change
reaches runs already running; a policy file it ignores is said once per watcher (its
`events.jsonl` and `keeper.log`), not at every look.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from tfctl.remote.agent.activity import last_activity
from tfctl.remote.agent.claims import claim_run, mask_gpus
from tfctl.remote.agent.jsonfile import now, write_json
from tfctl.remote.agent.notify import start_notifier
from tfctl.remote.agent.policy import duration_words, idle_rule_for, read_policy, session_kind
from tfctl.remote.agent.rundir import task_file
from tfctl.remote.agent.state import stop_tasks

POLICY_LOOK_S = 10.0
SAMPLE_FRESH_S = 5.0
"""A GPU's latest sample older than this says nothing: the idle clock does not run on it."""
IDLE_FILE = "idle.json"
STOPPED_AS_IDLE = "stopped as idle by the lab's policy"
IDLE_STOP_GRACE_S = 10.0


def run_gpus(manifest: dict[str, Any]) -> list[Any]:
    """The GPU tokens (indices, UUIDs) the run's tasks on this host hold, from their masks."""
    gpus: list[Any] = []
    for task in manifest.get("tasks", []):
        env = task.get("env") or {}
        for gpu in mask_gpus(env.get("CUDA_VISIBLE_DEVICES", task.get("cuda_visible_devices"))):
            if gpu not in gpus:
                gpus.append(gpu)
    return gpus


def clock_words(seconds: float) -> str:
    """65 min → `1:05`, 15 s → `0:00:15`: how long a GPU has been idle."""
    total = int(seconds)
    hours, minutes = divmod(total // 60, 60)
    return f"{hours}:{minutes:02d}" if total >= 60 else f"0:00:{total:02d}"


class IdleWatch:
    """The idle clock of one run on this host, under the lab's policy (None rule: no policy, or
    one that does not apply to this run; then nothing is measured or stopped)."""

    def __init__(self, run_dir: str, run_id: str, manifest: dict[str, Any], events: Any) -> None:
        self.run_dir, self.run_id, self.manifest, self.events = run_dir, run_id, manifest, events
        self.gpus = run_gpus(manifest)
        self.rule: dict[str, Any] | None = None
        self.policy_path: str | None = None
        self.looked_at = -POLICY_LOOK_S
        self.said: set[str] = set()
        self.since: float | None = None
        self.warned = False
        self.stopped: str | None = None
        """Why the run was stopped as idle (the notice's cause), once it was."""
        with contextlib.suppress(FileNotFoundError):  # a warning of an earlier watcher's clock
            os.unlink(os.path.join(run_dir, IDLE_FILE))

    def look_at_policy(self, now_s: float) -> None:
        if now_s - self.looked_at < POLICY_LOOK_S:
            return
        self.looked_at = now_s
        reading = read_policy()
        why = reading.get("ignored")
        if why and why not in self.said:  # said once per watcher, not at every look
            self.said.add(why)
            self.events.write({"event": "policy_ignored", "why": why})
            print(why, flush=True)
        rule = idle_rule_for(reading.get("policy"), self.manifest)
        if rule != self.rule:
            self.rule, self.policy_path = rule, reading.get("path")
            self.events.write({"event": "policy", "path": reading.get("path"), "idle": rule,
                               "session": session_kind(self.manifest)})
            self._reset(None)

    def low(self, latest: dict[str, tuple[float, str]], index_of_uuid: dict[str, str],
            now_s: float) -> bool | None:
        """True when every GPU of the run is under the threshold now, False when one is not,
        None when one has no fresh sample."""
        assert self.rule is not None
        for gpu in self.gpus:
            index = str(gpu) if isinstance(gpu, int) else index_of_uuid.get(str(gpu))
            sample = latest.get(index or "")
            if sample is None or now_s - sample[0] > SAMPLE_FRESH_S or sample[1] == "":
                return None
            try:
                util = float(sample[1])
            except ValueError:
                return None
            if util >= self.rule["below_util_pct"]:
                return False
        return True

    def tick(self, latest: dict[str, tuple[float, str]], index_of_uuid: dict[str, str],
             now_s: float) -> bool:
        """One look; True when the run is to be stopped as idle now (`stop`)."""
        self.look_at_policy(now_s)
        if self.rule is None or not self.gpus or self.stopped:
            return False
        low = self.low(latest, index_of_uuid, now_s)
        if not low:
            if self.since is not None:
                self._reset("busy" if low is False else "unsampled")
            return False
        if self.since is None:
            self.since = now_s
        active = last_activity(self.run_dir)  # a session's user (activity.py)
        if active is not None and active > self.since:
            self._reset("activity")
            self.since = min(active, now_s)
        idle_s = now_s - self.since
        if idle_s >= self.rule["stop_after_s"]:
            return True
        if idle_s >= self.rule["warn_after_s"] and not self.warned:
            self._warn(now_s)
        return False

    def stop_at(self) -> float:
        assert self.rule is not None and self.since is not None
        return self.since + self.rule["stop_after_s"]

    def words(self, now_s: float) -> str:
        """`GPU 1 under 5 % for 0:00:15 (idle since 14:05:10)`."""
        assert self.rule is not None and self.since is not None
        gpus = ",".join(str(g) for g in self.gpus)
        return (f"GPU {gpus} under {self.rule['below_util_pct']:g} % for "
                f"{clock_words(now_s - self.since)}")

    def _warn(self, now_s: float) -> None:
        assert self.rule is not None
        self.warned = True
        stop_at = self.stop_at()
        record = {"since": self.since, "warned_at": now_s, "stop_at": stop_at,
                  "below_util_pct": self.rule["below_util_pct"], "gpus": self.gpus,
                  "stop_after_s": self.rule["stop_after_s"], "policy": self.policy_path}
        with contextlib.suppress(OSError):  # no room: the warning still goes out below
            write_json(os.path.join(self.run_dir, IDLE_FILE), record)
        clock = time.strftime("%H:%M:%S", time.localtime(stop_at))
        cause = (f"idle: {self.words(now_s)} — stops at {clock} by the lab's policy "
                 f"(stop_after {duration_words(self.rule['stop_after_s'])})")
        self.events.write({"event": "idle_warning", "since": self.since, "stop_at": stop_at,
                           "cause": cause})
        print(f"run {self.run_id}: {cause}", flush=True)
        start_notifier(self.run_dir, self.manifest, "idle", cause, None)
        claim_run(self.run_dir, self.run_id, self.manifest)  # every user's `lab` shows it

    def _reset(self, why: str | None) -> None:
        """The idle clock stopped (GPU use, activity, no sample, or a policy change)."""
        was_warned = self.warned
        if why is not None and self.since is not None and was_warned:
            self.events.write({"event": "active", "why": why, "idle_since": self.since})
        self.since, self.warned = None, False
        if was_warned:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.run_dir, IDLE_FILE))
            claim_run(self.run_dir, self.run_id, self.manifest)

    def stop(self, local: list[str], now_s: float) -> None:
        """Stop this host's part of the run as `tfctl down` does, and record why."""
        cause = f"{STOPPED_AS_IDLE}: {self.words(now_s)}"
        self.stopped = cause
        self.events.write({"event": "idle_stop", "since": self.since, "cause": cause})
        print(f"run {self.run_id}: {cause}", flush=True)
        with contextlib.suppress(OSError):  # no room: the tasks are stopped all the same
            write_json(os.path.join(self.run_dir, "finished.json"), {
                "status": {"state": "stopped", "cause": cause, "exit_code": None,
                           "by": f"watcher on {self.manifest.get('host')}, lab policy "
                                 f"{self.policy_path}"},
                "finished_at": now()})
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.run_dir, IDLE_FILE))
        launched = [n for n in local if os.path.exists(task_file(self.run_dir, n, ".pid.json"))]
        if launched:
            stop_tasks(self.run_dir, self.run_id, launched, IDLE_STOP_GRACE_S)
