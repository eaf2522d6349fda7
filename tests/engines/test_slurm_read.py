"""A Slurm run's state from what the submit host answered, for the cases a test cluster does
not reach in seconds: Slurm not answering, a job it has forgotten (MinJobAge passed), a time
limit. The inputs are what scontrol and the batch script (remote/exporters/slurm_sh.py) print;
tests/testbed/test_slurm.py covers the rest against a real Slurm."""

from __future__ import annotations

from tfctl.remote.engines.slurm import SlurmEngine
from tfctl.remote.engines.slurm_read import (
    SlurmAnswer,
    SlurmJob,
    SlurmSilent,
    SlurmStatus,
    SlurmTask,
    status_from,
)

JOB = SlurmJob("42", "/scratch/wd", "digits",
               (SlurmTask("ps:0", "titan"), SlurmTask("worker:0", "titan"),
                SlurmTask("worker:1", "gtx970")), "flags")
STARTED = ["tfctl: job 42 on gpu07 gpu08; logs in /scratch/wd/.tfctl/slurm/42",
           "tfctl: started ps:0 on gpu07 (/scratch/wd/.tfctl/slurm/42/ps-0.log)",
           "tfctl: started worker:0 on gpu07 (/scratch/wd/.tfctl/slurm/42/worker-0.log)",
           "tfctl: started worker:1 on gpu08 (/scratch/wd/.tfctl/slurm/42/worker-1.log)"]


def read(scontrol: tuple[int, str], driver: list[str], **logs: str) -> SlurmStatus:
    files = {"@sbatch": "\n".join(driver) + "\n", **logs}
    return status_from(JOB, SlurmAnswer(scontrol=scontrol, files=files), 5, 0.0)


def test_slurm_not_answering_is_no_end_of_the_job() -> None:
    st = read((1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"),
              STARTED)
    assert not st.job_ended and st.job_state == "NO_ANSWER"
    assert isinstance(st.no_answer, SlurmSilent) and not st.unreachable  # the run's, no host's
    assert str(st.no_answer).startswith("Slurm did not answer: slurm_load_jobs error: Unable to "
                                        "contact slurm controller")
    assert {t.state for t in st.tasks} == {"running"}


def test_a_job_slurm_forgot_reads_from_its_batch_output() -> None:
    driver = [*STARTED, "tfctl: worker:0 ended (exit 0)", "tfctl: the job has ended (exit 0)",
              "tfctl: stopping ps:0", "tfctl: ps:0 ended (exit 143)",
              "tfctl: worker:1 ended (exit 0)"]
    st = read((1, "slurm_load_jobs error: Invalid job id specified"), driver)
    assert st.job_ended and st.exit_code == 0 and st.fatal is None
    states = {t.name: (t.host, t.state, t.exit_code) for t in st.tasks}
    assert states == {"ps:0": ("gpu07", "stopped", 143), "worker:0": ("gpu07", "exited", 0),
                      "worker:1": ("gpu08", "exited", 0)}


def test_a_time_limit_is_the_cause_not_the_tasks_it_killed() -> None:
    info = ("JobId=42 JobName=digits JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 "
            "NodeList=gpu[07-08] StdOut=/scratch/wd/digits-42.out")
    st = read((0, info), STARTED, **{"worker-0": "step 9000 loss=0.1\n"})
    assert st.job_ended and st.exit_code == 143
    assert {t.state for t in st.tasks} == {"lost"}
    words = SlurmEngine.fatal_words(st)
    assert words is not None and words.startswith("Slurm job 42 reached its time limit")


def test_a_failed_task_keeps_the_lines_that_name_its_error() -> None:
    log = "\n".join(["Traceback (most recent call last):", '  File "train.py", line 3',
                     "ValueError: batch_size must be positive",
                     *(f"  frame {i}" for i in range(10))]) + "\n"
    driver = [*STARTED, "tfctl: worker:0 ended (exit 1)", "tfctl: the job has ended (exit 1)"]
    info = "JobId=42 JobState=RUNNING Reason=None ExitCode=0:0"
    st = read((0, info), driver, **{"worker-0": log})
    worker = next(t for t in st.tasks if t.name == "worker:0")
    assert worker.failed and worker.last_line == "ValueError: batch_size must be positive"
    words = SlurmEngine.fatal_words(st)
    assert words is not None and words.startswith("worker:0 on gpu07 failed (exited 1)")
    assert "ValueError: batch_size must be positive" in words
