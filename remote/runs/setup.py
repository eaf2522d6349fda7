"""Per-host setup (`job.setup`): shell commands run in each host's workdir after sync, cached.

Why a plain shell and not the agent: setup usually creates the interpreter the agent would run
under (`python3 -m venv .venv` with `python: .../.venv/bin/python`), so it must not need it.

On each host one shell (bash where present, else sh) runs the commands in order, `set -e` style:
each is `eval`ed in that same shell (so `cd`, `export` and `. .venv/bin/activate` carry over to
the next), its output appended to `<workdir>/.tfctl/setup/<hash>.log`, and the first non-zero
status stops the host's setup. The shell reports on stdout only with marker lines, which tfctl
turns into per-host progress and one `SetupOutcome` per host.

Cache: `<hash>` covers the commands and the contents and modification times (whole seconds) of the
`job.setup_inputs` files (or every file under a folder) as the host has them: the synced copies
(sync keeps mtimes), hashed there with sha256sum. As with make, touching an input counts as a
change: `touch requirements.txt` is how to ask for a re-run. A successful setup leaves
`.tfctl/setup/done-<hash>`; a later setup with the same hash is skipped. Starting a setup removes
every older `done-*` first, so only the latest success counts (switching requirements A → B → A
re-runs A's setup, because the venv now holds B) and a failed or interrupted setup always
re-runs next time.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from tfctl.inventory.model import Host, Job
from tfctl.remote.connect.fleet import Fleet, FleetResult
from tfctl.remote.connect.host_scripts import render, sections
from tfctl.remote.connect.transport import Transport, shell_path
from tfctl.remote.errors import RemoteError

MARK = "@@tfctl-setup:"
SETUP_DIR = ".tfctl/setup"
TAIL_LINES = 20
KEEP_LOGS = 10

State = Literal["done", "skipped", "failed", "not_finished"]
Progress = Callable[[str, str], None]


@dataclass(frozen=True)
class SetupOutcome:
    """How one host's setup went. `failed_index` is 0-based into `commands`."""

    host: str
    state: State
    commands: tuple[str, ...]
    inputs_hash: str | None = None
    elapsed_s: float = 0.0
    log_path: str | None = None
    """Absolute path of the setup log on the host (for `skipped`, the cached setup's log)."""
    failed_index: int | None = None
    exit_code: int | None = None
    tail: tuple[str, ...] = ()
    """Last lines of the log when the setup failed or did not finish."""
    done_at: float | None = None
    """When the cached setup finished (epoch seconds), for `skipped`."""
    reason: str = ""
    """Why it failed outside a command (workdir missing, connection lost)."""

    @property
    def ok(self) -> bool:
        return self.state in ("done", "skipped")

    @property
    def failed_command(self) -> str | None:
        if self.failed_index is None or not 0 <= self.failed_index < len(self.commands):
            return None
        return self.commands[self.failed_index]

    def summary(self) -> str:
        """One line for a person: `h1: setup done in 12.3 s (2 commands)`."""
        n = len(self.commands)
        if self.state == "skipped":
            since = "" if self.done_at is None else \
                " since " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.done_at))
            return f"{self.host}: setup skipped (inputs unchanged{since})"
        if self.state == "done":
            return f"{self.host}: setup done in {self.elapsed_s:.1f} s ({n} commands)"
        return f"{self.host}: setup {self.problem()}"

    def problem(self) -> str:
        """What went wrong, naming the command and its exit status."""
        where = ""
        if self.failed_index is not None and self.failed_command is not None:
            where = f"command {self.failed_index + 1}/{len(self.commands)} `{self.failed_command}`"
        if self.state == "not_finished":
            during = f" during {where}" if where else ""
            return f"did not finish{during}: {self.reason or 'the connection ended'}"
        if where:
            status = "?" if self.exit_code is None else str(self.exit_code)
            return f"failed: {where} exited {status}"
        return f"failed: {self.reason or 'unknown error'}"


class SetupFailed(RemoteError):
    """A host's setup failed or did not finish; `detail` holds the last lines of its log."""

    def __init__(self, outcome: SetupOutcome):
        log = f"\n(full log on {outcome.host}: {outcome.log_path})" if outcome.log_path else ""
        super().__init__(outcome.host, f"setup {outcome.problem()}",
                         "\n".join(outcome.tail) + log, kind="setup")
        self.outcome = outcome


# ---------------------------------------------------------------- the host-side script

def commands_digest(commands: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps(list(commands)).encode()).hexdigest()


def setup_script(job: Job, workdir: str, force: bool) -> str:
    """The POSIX shell program one host runs (`remote/agent/setup.sh`); it speaks only in `MARK`
    lines on stdout.

    Its own variables start with `_tf_` so that the user's commands, run by `eval` in the same
    shell, neither clobber them nor see surprising names.
    """
    parts = sections("setup.sh")
    values = {"MARK": MARK, "TAIL_LINES": TAIL_LINES, "WORKDIR": shell_path(workdir),
              "WORKDIR_ECHO": _q_echo(workdir), "SETUP_DIR": SETUP_DIR,
              "DIGEST": commands_digest(job.setup), "KEEP_LOGS": KEEP_LOGS,
              "INPUTS": " ".join(shlex.quote(p) for p in job.setup_inputs)}
    head = render(parts["head"] + ("" if force else parts["skip"]) + parts["prepare"], **values)
    steps = "".join(render(parts["step"], **values, I=i, COMMAND=shlex.quote(command))
                    for i, command in enumerate(job.setup))
    return head + steps + render(parts["tail"], **values)


def _q_echo(text: str) -> str:
    """`text` made safe inside a double-quoted echo argument."""
    return "".join("\\" + ch if ch in '"$`\\' else ch for ch in text)


def shell_command(script: str) -> str:
    """Run `script` with bash where the host has it (users write `source`), else sh."""
    return (f"S={shlex.quote(script)}; if command -v bash >/dev/null 2>&1; "
            'then exec bash -c "$S"; else exec sh -c "$S"; fi')


# ---------------------------------------------------------------- reading what the host said

def parse_setup_output(host: str, commands: Sequence[str], lines: Iterable[str],
                       elapsed_s: float = 0.0) -> SetupOutcome:
    """The outcome from a host's marker lines. Pure.

    A command that ends the shell itself (`exit 3`) shows as its `start` followed by `exit 3`;
    no `exit` marker at all means the connection or the shell died: `not_finished`.
    """
    commands = tuple(commands)
    inputs_hash = log = reason = None
    state: State | None = None
    started = failed = exit_code = shell_exit = None
    done_at: float | None = None
    tail: list[str] = []
    other: list[str] = []
    for raw in lines:
        if not raw.startswith(MARK):
            other.append(raw)
            continue
        word, _, rest = raw[len(MARK):].partition(" ")
        if word == "hash":
            inputs_hash = rest.strip() or None
        elif word == "log":
            log = rest
        elif word == "skip":
            state = "skipped"
            done_at = float(rest) if rest.strip().isdigit() else None
        elif word == "start":
            started = int(rest)
        elif word == "ok":
            started = None
        elif word == "fail":
            index, _, status = rest.partition(" ")
            failed, exit_code, state = int(index), int(status), "failed"
        elif word == "out":
            tail.append(rest)
        elif word == "done":
            state = "done"
        elif word == "error":
            state, reason = "failed", rest
        elif word == "exit":
            shell_exit = int(rest) if rest.strip().lstrip("-").isdigit() else None
    if state is None and started is not None and shell_exit is not None:
        # the command itself ended the setup shell (`exit N`, a fatal syntax error)
        state, failed, exit_code = "failed", started, shell_exit
    if shell_exit is None and state not in ("done", "skipped"):
        state = "not_finished"
        failed = failed if failed is not None else started
        reason = reason or "the connection ended before the setup shell did"
        tail = tail or other[-TAIL_LINES:]
    if state is None:
        state, reason = "failed", f"the setup shell exited {shell_exit} without finishing"
        tail = other[-TAIL_LINES:]
    return SetupOutcome(host, state, commands, inputs_hash, round(elapsed_s, 3), log, failed,
                        exit_code, tuple(tail), done_at, reason or "")


# ---------------------------------------------------------------- running it

def setup_host(t: Transport, job: Job, force: bool = False,
               progress: Progress | None = None) -> SetupOutcome:
    """Run (or skip) one host's setup; progress reports each command as it starts."""
    host = t.host
    commands = job.setup
    started = time.monotonic()
    stream = t.stream(shell_command(setup_script(job, host.workdir, force)))
    seen: list[str] = []
    try:
        for line in stream.lines():
            seen.append(line)
            if progress is not None:
                _report(host.name, commands, line, progress)
    finally:
        stream.close()
    return parse_setup_output(host.name, commands, seen, time.monotonic() - started)


def _report(host: str, commands: Sequence[str], line: str, progress: Progress) -> None:
    if not line.startswith(MARK):
        return
    word, _, rest = line[len(MARK):].partition(" ")
    if word == "start":
        i = int(rest)
        progress(host, f"[{i + 1}/{len(commands)}] {commands[i]}")
    elif word == "skip":
        progress(host, "inputs unchanged: skipped")
    elif word == "fail":
        index, _, status = rest.partition(" ")
        progress(host, f"[{int(index) + 1}/{len(commands)}] exited {status}")


def setup_waves(hosts: Sequence[Host]) -> list[list[Host]]:
    """Hosts with their own filesystem first, all at once; then the `shared_fs` ones.

    A shared_fs host sees the workdir of a host of the first wave: running its setup at the same
    time would race in one directory (two `venv` creations); afterwards it finds the done marker.
    """
    own = [h for h in hosts if not h.shared_fs]
    shared = [h for h in hosts if h.shared_fs]
    return [wave for wave in (own, shared) if wave]


def run_setup(fleet: Fleet, *, force: bool = False, progress: Progress | None = None,
              hosts: Sequence[str] | None = None) -> FleetResult[SetupOutcome]:
    """Setup on every host (or `hosts`), in parallel; an empty result when `job.setup` is empty.

    Every host's setup runs to its end even when another fails, so none is left half-way
    unreported. Connection failures are in `.failed`; a failed command is an outcome in
    `.succeeded` with `ok` False: use `setup_errors` to have them all as errors.
    """
    inv = fleet.inventory
    job = inv.job
    if not job.setup:
        return FleetResult({}, {})
    chosen = [inv.host(h) for h in hosts] if hosts is not None else list(inv.hosts)
    values: dict[str, SetupOutcome] = {}
    errors: dict[str, RemoteError] = {}
    for wave in setup_waves(chosen):
        result = fleet.map(lambda t: setup_host(t, job, force, progress), wave)
        values.update(result.succeeded)
        errors.update(result.failed)
    order = [h.name for h in chosen]
    return FleetResult({k: values[k] for k in order if k in values},
                       {k: errors[k] for k in order if k in errors})


def setup_errors(result: FleetResult[SetupOutcome]) -> list[RemoteError]:
    """Every host whose setup did not succeed, as errors (connection failures included)."""
    out: list[RemoteError] = [SetupFailed(o) for o in result.succeeded.values() if not o.ok]
    return out + list(result.failed.values())
