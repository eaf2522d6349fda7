"""A task lost to its host's restart, as the client reads it: words, the job's end, the target.

Pure: TaskStatus/RunStatus from agent records (remote/runs/status.py) and the name `tfctl
restart` is given (remote/runs/relaunch.py). The lab tests (tests/testbed/test_reboot.py) restart a
host for real.
"""

from __future__ import annotations

import time

import pytest

from tfctl.inventory.model import Job
from tfctl.remote.runs.relaunch import NotRestartable, lost_words, target_of
from tfctl.remote.runs.status import RunStatus, TaskStatus, status_from, task_from_agent

BOOTED = time.mktime((2026, 11, 25, 14, 2, 11, 0, 0, -1))


def _raw(name: str, state: str, restarted: float | None = None, **extra: object) -> dict:
    return dict({"name": name, "state": state, "host_restarted_at": restarted,
                 "last_lines": []}, **extra)


def _status(*tasks: TaskStatus, finished: dict | None = None,
            unreachable: dict[str, str] | None = None) -> RunStatus:
    return RunStatus("r1", tasks, unreachable or {}, finished)


def test_a_task_lost_to_a_restart_says_when_and_is_neither_ended_nor_failed() -> None:
    task = task_from_agent("h2", _raw("worker:1", "lost", BOOTED))
    assert task.describe() == "lost (host restarted at 14:02:11)"
    assert task.awaits_restart and not task.ended and not task.failed
    plain = task_from_agent("h2", _raw("worker:1", "lost"))  # its supervisor killed, say
    assert plain.describe() == "lost" and plain.ended and plain.failed


@pytest.mark.parametrize(("lost", "ended"), [
    ("ps:0", False),        # a parameter server lost to a restart is not the job's failure
    ("chief:0", False),     # nor is the chief: it waits for `tfctl restart`
    ("worker:1", False),
])
def test_the_job_waits_for_a_task_lost_to_a_restart(lost: str, ended: bool) -> None:
    names = ("ps:0", "worker:0", "worker:1", "chief:0")
    tasks = tuple(task_from_agent("h1", _raw(n, "lost", BOOTED) if n == lost else
                                  _raw(n, "running")) for n in names)
    st = _status(*tasks)
    assert (st.job_ended, st.fatal) == (ended, None)
    assert st.lost_to_restarts == {"h1": BOOTED}
    assert lost_words(st, "h1") == (f"h1 restarted at 14:02:11: {lost} lost; `tfctl restart h1` "
                                    "starts it again in this run")


def test_once_the_end_is_recorded_a_task_lost_to_a_restart_is_lost_like_any_other() -> None:
    chief = task_from_agent("h1", _raw("chief:0", "lost", BOOTED))
    ps = task_from_agent("h2", _raw("ps:0", "stopped"))
    waiting = _status(chief, ps)
    assert not waiting.job_ended
    ended = _status(chief, ps, finished={"status": {"state": "finished", "cause": "chief:0 ended"}})
    assert ended.job_ended and ended.exit_code == 137 and ended.fatal is not None
    assert ended.fatal.name == "chief:0"


def test_every_lost_task_of_a_host_is_named() -> None:
    st = _status(task_from_agent("h2", _raw("ps:1", "lost", BOOTED)),
                 task_from_agent("h2", _raw("worker:1", "lost", BOOTED)))
    assert lost_words(st, "h2") == ("h2 restarted at 14:02:11: ps:1, worker:1 lost; `tfctl "
                                    "restart h2` starts them again in this run")


def test_the_chief_ending_ends_the_job_while_a_worker_waits_for_its_restart() -> None:
    st = _status(task_from_agent("h1", _raw("chief:0", "exited", exit_code=0)),
                 task_from_agent("h2", _raw("worker:1", "lost", BOOTED)))
    assert st.job_ended and st.exit_code == 0


def test_status_from_answers_keeps_the_restart_time() -> None:
    from tfctl.remote.connect.session.agentops import StatusAnswer

    answer = StatusAnswer("r1", "/w/.tfctl/runs/r1", (_raw("worker:1", "lost", BOOTED),))
    st = status_from(Job(script="t.py"), "r1", {"h2": answer}, {}, time.time())
    assert st.tasks[0].host_restarted_at_s == BOOTED


@pytest.mark.parametrize(("target", "found"), [
    ("h2", ("h2", None)),                 # a host: every lost task of it
    ("worker:1", ("h2", ["worker:1"])),   # a task: that one, on its host
    ("chief:0", ("h1", ["chief:0"])),
])
def test_the_target_is_a_host_or_a_task_of_the_run(target: str,
                                                   found: tuple[str, list[str] | None]) -> None:
    st = _status(task_from_agent("h1", _raw("chief:0", "running")),
                 task_from_agent("h2", _raw("worker:1", "lost", BOOTED)))
    assert target_of(st, ("h1", "h2"), target) == found


def test_a_name_that_is_no_host_or_task_of_the_run_is_refused_in_one_sentence() -> None:
    st = _status(task_from_agent("h1", _raw("chief:0", "running")),
                 unreachable={"h3": "h3: no answer"})
    with pytest.raises(NotRestartable) as refused:
        target_of(st, ("h1", "h3"), "worker:7")
    assert str(refused.value) == ("run r1 has no host or task named 'worker:7' (its hosts: h1, "
                                  "h3; h3 did not answer)")
