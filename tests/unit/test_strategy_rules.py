"""TensorFlow's rules per `job.strategy`: each refusal is located (FILE:LINE: key: what — fix)
and exits 2 from `tfctl plan`; each warning rides on the plan; an old file is held to none."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.inventories import TITAN_GTX, yaml_text
from tfctl.inventory import InventoryError, make_plan, parse_inventory
from tfctl.inventory.model import Host, Inventory, Job
from tfctl.inventory.rules import refusals


@dataclass(frozen=True)
class Refusal:
    """A file TensorFlow would fail on; `at` is text on the line the error must name."""

    id: str
    text: str
    key: str
    at: str
    words: str
    fix: str

    @property
    def line(self) -> int:
        return next(n for n, line in enumerate(self.text.splitlines(), 1) if self.at in line)


REFUSALS = [
    Refusal("ps-without-chief", yaml_text(TITAN_GTX, "strategy: parameter_server"),
            "job.strategy", "strategy: parameter_server", "never ends", "add `chief: true`"),
    Refusal("ps-chief-false", yaml_text(TITAN_GTX, "strategy: parameter_server\nchief: false"),
            "job.chief", "chief: false", "needs a chief", "add `chief: true`"),
    Refusal("ps-without-ps",
            yaml_text("- {name: a, gpus: 1, ps: 0}\n- {name: b, gpus: 1, ps: 0}",
                      "strategy: parameter_server\nchief: true"),
            "hosts[0].ps", "name: a", "There must be at least one ps.", "set `ps: 1`"),
    Refusal("ps-per-host-unequal-gpus",
            yaml_text(TITAN_GTX, "strategy: parameter_server\nchief: true\nworkers: per_host"),
            "job.workers", "workers: per_host", "Mismatched number of GPUs per worker",
            "use `workers: per_gpu`"),
    Refusal("mwms-cpu-next-to-gpus",
            yaml_text(TITAN_GTX + "- name: cpubox\n", "strategy: multi_worker_mirrored"),
            "hosts[2]", "name: cpubox", "worker:5 on cpubox has CPU only",
            "give cpubox GPUs, or take it out of `hosts:`"),
    Refusal("mwms-cpu-with-gpus-key",
            yaml_text("- {name: a, gpus: 2}\n- {name: b, gpus: 2}\n- {name: c, gpus: 0}",
                      "strategy: multi_worker_mirrored"),
            "hosts[2].gpus", "name: c", "same number of devices", "give c GPUs"),
    Refusal("mwms-gpu-among-cpus",
            yaml_text("- {name: a}\n- {name: b}\n- {name: g, gpus: 1}",
                      "strategy: multi_worker_mirrored"),
            "hosts[2].gpus", "name: g", "worker:2 on g has 1 GPU", "set `gpus: 0` on g"),
    Refusal("mwms-per-host-4-and-1",
            yaml_text(TITAN_GTX, "strategy: multi_worker_mirrored\nworkers: per_host"),
            "job.workers", "workers: per_host", "has 1 GPU and worker:0 on titan has 4 GPUs",
            "use `workers: per_gpu`"),
    Refusal("mwms-explicit-ps",
            yaml_text("- {name: a, gpus: 1}\n- name: b\n  gpus: 1\n  ps: 1",
                      "strategy: multi_worker_mirrored"),
            "hosts[1].ps", "ps: 1", "has no parameter servers", "remove `ps:`"),
    Refusal("mirrored-explicit-ps", yaml_text("- {name: a, gpus: 2, ps: 2}", "strategy: mirrored"),
            "hosts[0].ps", "ps: 2", "has no parameter servers", "remove `ps:`"),
    Refusal("mirrored-chief", yaml_text(TITAN_GTX, "strategy: mirrored\nchief: true"),
            "job.chief", "chief: true", "there is no chief", "remove `chief:`"),
    Refusal("mirrored-per-gpu", yaml_text(TITAN_GTX, "strategy: mirrored\nworkers: per_gpu"),
            "job.workers", "workers: per_gpu", "one process per host", "remove `workers:`"),
    Refusal("mirrored-cpu-workers",
            yaml_text("- name: a\n  cpu_workers: 2", "strategy: mirrored"),
            "hosts[0].cpu_workers", "cpu_workers: 2", "one process per host",
            "remove `cpu_workers:`"),
    Refusal("flags-without-ps", yaml_text("- {name: a, gpus: 2, ps: 0}", "strategy: flags"),
            "hosts[0].ps", "name: a", "trains a model of its own", "set `ps: 1`"),
    Refusal("flags-chief", yaml_text(TITAN_GTX, "strategy: flags\nchief: true"),
            "job.chief", "chief: true", "strategy flags has no chief", "remove `chief:`"),
    Refusal("style-contradicts-strategy",
            yaml_text(TITAN_GTX, "strategy: flags\nstyle: tf_config\nchief: false"),
            "job.style", "style: tf_config", "contradicts `strategy: flags`", "remove `style:`"),
    Refusal("style-with-mirrored", yaml_text(TITAN_GTX, "strategy: mirrored\nstyle: flags"),
            "job.style", "style: flags", "hands its processes no cluster", "remove `style:`"),
    Refusal("port-none-with-ps",
            yaml_text(TITAN_GTX, "strategy: parameter_server\nchief: true\n"
                                 "ports: {ps: 2222, worker: none}"),
            "job.ports.worker", "ports:", "cannot be reached",
            "write a port number, e.g. `worker: 2223` (only `strategy: custom`"),
    Refusal("port-null-without-strategy", yaml_text(TITAN_GTX, "ports:\n  chief: null"),
            "job.ports.chief", "chief: null", "cannot be reached", "write a port number"),
]


def refused(text: str) -> InventoryError:
    with pytest.raises(InventoryError) as info:
        parse_inventory(text, "c.yaml")
    return info.value


@pytest.mark.parametrize("case", REFUSALS, ids=lambda c: c.id)
def test_each_refusal_is_located_with_its_fix(case: Refusal) -> None:
    e = refused(case.text)
    assert (e.line, e.key_path) == (case.line, case.key), str(e)
    assert case.words in e.message, str(e)
    assert case.fix in e.hint, str(e)
    assert str(e).startswith(f"c.yaml:{case.line}: {case.key}: "), str(e)


@pytest.mark.parametrize("case", REFUSALS, ids=lambda c: c.id)
def test_tfctl_plan_exits_2_with_the_located_line(case: Refusal, tmp_path: Path) -> None:
    f = tmp_path / "cluster.yaml"
    f.write_text(case.text)
    proc = subprocess.run([sys.executable, "-m", "tfctl.tui", "-i", str(f), "plan"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"error: {f}:{case.line}: {case.key}: "), proc.stderr
    assert f" — {case.fix}" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""


def test_refusals_are_pure_functions_of_the_plan() -> None:
    """No file needed: a hand-built Inventory's plan names the rule and where to point."""
    hosts = (Host("titan", "titan", None, None, None, "~/.ssh/known_hosts", None, "~/w",
                  "python3", {}, (0, 1, 2, 3), 1),
             Host("gtx970", "gtx970", None, None, None, "~/.ssh/known_hosts", None, "~/w",
                  "python3", {}, (0,), 1))
    job = Job("train.py", strategy="parameter_server", workers="per_host")
    found = refusals(make_plan(Inventory("lab", hosts, job)))
    assert [f.keys[0] for f in found] == [("job", "chief"), ("job", "workers")]
    assert "Mismatched number of GPUs per worker" in found[1].message
    ok = Job("train.py", strategy="parameter_server", workers="per_gpu", chief="titan")
    assert refusals(make_plan(Inventory("lab", hosts, ok))) == []
    old = Job("train.py", workers="per_host")  # no strategy: no strategy rules
    assert refusals(make_plan(Inventory("lab", hosts, old))) == []


def warnings_of(hosts: str, job: str) -> tuple[str, ...]:
    return make_plan(parse_inventory(yaml_text(hosts, job))).warnings


def test_flags_per_host_on_a_multi_gpu_host_warns_and_names_the_idle_gpus() -> None:
    w, checkpoint = warnings_of(TITAN_GTX, "strategy: flags\nworkers: per_host")
    assert "sharded" in checkpoint  # ps on both hosts: the checkpoint warning comes too
    assert w.startswith("worker:0 on titan gets GPUs 0,1,2,3, but between-graph code pins its "
                        "graph to one device: GPU 0 busy, GPUs 1–3 idle unless the script "
                        "builds towers; use `workers: per_gpu`"), w
    (w,) = warnings_of("- {name: a, gpus: [1, 3]}", "strategy: flags\nworkers: per_host")
    assert "GPU 1 busy, GPU 3 idle" in w
    assert warnings_of(TITAN_GTX.replace("gpus: [0]", "gpus: [0]\n  ps: 0"),
                       "strategy: flags") == ()


@pytest.mark.parametrize(("hosts", "job", "warned"), [
    (TITAN_GTX, "strategy: flags", True),  # ps on 2 hosts, no shared filesystem
    (TITAN_GTX.replace("gpus: [0]", "gpus: [0]\n  ps: 0"), "strategy: flags", False),  # one ps
    (TITAN_GTX.replace("gpus: 4", "gpus: 4\n  shared_fs: true").replace(
        "gpus: [0]", "gpus: [0]\n  shared_fs: true"), "strategy: flags", False),
    ("- {name: a, gpus: 1, ps: 0}\n- {name: b, gpus: 1}", "strategy: flags", True),  # ps on b,
    # worker 0 (the saver) on a
])
def test_sharded_checkpoint_warning_names_both_ways_out(hosts: str, job: str,
                                                        warned: bool) -> None:
    found = [w for w in warnings_of(hosts, job) if "sharded" in w]
    assert bool(found) is warned
    if found:
        assert "shared_fs: true" in found[0] and "have the worker 0 write it itself" in found[0]


def test_outputs_default_to_the_tensorboard_logdir_and_stay_in_the_workdir() -> None:
    plain = parse_inventory(yaml_text("- {name: a, gpus: 1}", "strategy: flags"))
    assert plain.job.outputs == ("out",)
    tb = parse_inventory(yaml_text("- {name: a, gpus: 1}",
                                   "strategy: flags\ntensorboard: {host: a, logdir: runs/tb}"))
    assert tb.job.outputs == ("runs/tb",)
    given = parse_inventory(yaml_text("- {name: a, gpus: 1}", "outputs: [out, ckpt]"))
    assert given.job.outputs == ("out", "ckpt")
    with pytest.raises(InventoryError,
                       match=r"cluster.yaml:6: job\.outputs\[1\]: `\.\./x` is not inside"):
        parse_inventory(yaml_text("- {name: a, gpus: 1}", "outputs: [out, ../x]"))


def test_mirrored_on_several_hosts_says_they_train_apart() -> None:
    (w,) = warnings_of(TITAN_GTX, "strategy: mirrored")
    assert "2 independent trainings (titan, gtx970" in w and "multi_worker_mirrored" in w
    assert warnings_of("- {name: a, gpus: 2}", "strategy: mirrored") == ()


def test_parameter_server_keeps_the_shared_checkpoint_warning() -> None:
    (w,) = warnings_of(TITAN_GTX, "strategy: parameter_server\nchief: true")
    assert "(gtx970, titan)" in w and "on a filesystem all of them see" in w


def test_custom_is_held_to_nothing() -> None:
    inv = parse_inventory(yaml_text(TITAN_GTX + "- name: cpubox\n",
                                    "strategy: custom\nworkers: per_host"))
    plan = make_plan(inv)
    assert refusals(plan) == [] and plan.warnings == ()


THREE_PS = """
- {name: h1, gpus: 0}
- {name: h2, gpus: 0}
- {name: h3, gpus: 0}
"""


@pytest.mark.parametrize(("hosts", "job", "starts"), [
    # A ps on each of 3 hosts under the classic flags: the sharded checkpoint fails at the first
    # save, whether the file says `style: flags` or `strategy: flags`.
    (THREE_PS, "style: flags", ["parameter servers on 3 host(s) (h1, h2, h3)"]),
    (THREE_PS, "strategy: flags", ["parameter servers on 3 host(s) (h1, h2, h3)"]),
    (THREE_PS.replace("h2, gpus: 0", "h2, gpus: 0, ps: 0").replace("h3, gpus: 0",
                                                                   "h3, gpus: 0, ps: 0"),
     "style: flags", []),  # one ps, beside worker 0: nothing to merge across hosts
    (TITAN_GTX, "style: flags\nworkers: per_host",
     ["worker:0 on titan gets GPUs 0,1,2,3", "parameter servers on 2 host(s)"]),
    (TITAN_GTX, "style: tf_config", ["style tf_config with parameter servers but no chief"]),
    (TITAN_GTX, "style: tf_config\nchief: true", ["parameter servers on 2 host(s)"]),
    (TITAN_GTX + "- name: cpubox\n", "chief: true\nworkers: per_host",
     ["parameter servers on 3 host(s)"]),
    (TITAN_GTX.replace("gpus: 4", "gpus: 4\n  ps: 0").replace("gpus: [0]", "gpus: [0]\n  ps: 0"),
     "style: tf_config", []),  # no ps: MultiWorkerMirrored or the script's own
])
def test_a_file_without_strategy_is_warned_of_the_traps_its_style_walks_into(
        hosts: str, job: str, starts: list[str]) -> None:
    found = warnings_of(hosts, job)
    assert len(found) == len(starts), found
    for warning, start in zip(found, starts, strict=True):
        assert warning.startswith(start), warning


def test_a_file_without_strategy_is_refused_nothing() -> None:
    text = yaml_text("- {name: a, gpus: 1, ps: 0}\n- {name: b, gpus: 1, ps: 0}", "style: flags")
    assert refusals(make_plan(parse_inventory(text))) == []  # strategy flags refuses it


def test_keras_legacy_sets_the_switch_on_every_task() -> None:
    plan = make_plan(parse_inventory(yaml_text(TITAN_GTX, "strategy: flags\nkeras: legacy")))
    assert plan.tasks and all(t.env["TF_USE_LEGACY_KERAS"] == "1" for t in plan.tasks)
    plain = make_plan(parse_inventory(yaml_text(TITAN_GTX, "strategy: flags")))
    assert all("TF_USE_LEGACY_KERAS" not in t.env for t in plain.tasks)
