"""Inventories that `tfctl export` is checked on: every strategy, the bundled examples, the jobs
of ranks (torch, jax; `export slurm` only), and the jobs the lab tests write (the same dicts
`tests/support/testbed/testbed.py` builds, on made-up addresses).

Every host has its own address, so a cluster entry `address:port` names one host: the tests
replace it by the node (Slurm) or the pod (TFJob) that stands for that host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.support.testbed.inventory import InventoryHost, build_inventory
from tfctl.inventory import load_inventory, parse_inventory
from tfctl.inventory.model import Inventory

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _hosts(text: str) -> str:
    return text.strip("\n")


TITAN_GTX = """
  - {name: titan, address: 10.1.0.1, gpus: 4}
  - {name: gtx970, address: 10.1.0.2, gpus: [0]}"""
ODD_GPUS = """
  - {name: a, address: 10.1.0.1, gpus: [1, 3]}
  - {name: b, address: 10.1.0.2, gpus: 2}"""

# id → (hosts, job) in YAML; python3 everywhere (the Slurm test's stand-in answers to it).
STRATEGY_CASES: dict[str, tuple[str, str]] = {
    "flags": (TITAN_GTX, "strategy: flags\nargs: [--batch_size=32]"),
    "flags-per-host-odd-gpus": (ODD_GPUS, "strategy: flags\nworkers: per_host"),
    "parameter-server-everything": (
        TITAN_GTX,
        "strategy: parameter_server\nchief: gtx970\n"
        "evaluator: {host: gtx970, script: evaluate.py, args: [--train_dir=out]}\n"
        "tensorboard: {host: titan, logdir: out, port: 6006}\n"
        "task_args: {chief: [--checkpoint_every=50]}\ntask_env: {ps: {TF_CPP_MIN_LOG_LEVEL: '2'}}"),
    "mwms-chief-odd-gpus": (ODD_GPUS, "strategy: multi_worker_mirrored\nchief: true"),
    "mwms-restart": (TITAN_GTX.replace("gpus: 4", "gpus: 1"),
                     "strategy: multi_worker_mirrored\n"
                     "restart: {worker: on-failure, max: 2, backoff: 0}"),
    "mirrored": (TITAN_GTX + "\n  - {name: cpubox, address: 10.1.0.3}", "strategy: mirrored"),
    "custom-portless-workers": (
        TITAN_GTX, "strategy: custom\nchief: true\nports: {worker: none}\nkeras: legacy"),
    "old-style-flags": (TITAN_GTX, "style: flags"),
    "old-style-tf-config": (
        TITAN_GTX.replace("gpus: [0]}", "gpus: [0], args: [--batch_size=16], "
                          "env: {TF_GPU_ALLOCATOR: cuda_malloc_async}}"),
        "args: [--steps=10]\nchief: true"),
}

# Jobs of ranks (torch, jax): `export slurm` writes them, a TFJob refuses them.
GROUP_CASES: dict[str, tuple[str, str]] = {
    "torch-ddp": (ODD_GPUS + "\n  - {name: cpubox, address: 10.1.0.3, gpus: 0, cpu_workers: 2}",
                  "framework: torch"),
    "jax-per-gpu": (TITAN_GTX, "framework: jax\nworkers: per_gpu\nports: {worker: 1234}"),
}

# The jobs of the lab tests (test_lab_checkpoints, _mwms_restart, _report, _resume,
# _strategies, _tf), with the hosts they choose: (job, hosts, ps).
LAB_JOBS: dict[str, tuple[dict[str, Any], list[str], dict[str, int]]] = {
    "lab-checkpoints-flags": (
        {"script": "train.py", "strategy": "flags", "args": ["--logdir=out/train"]},
        ["h1", "h2", "h3"], {}),
    "lab-mwms-restart": (
        {"script": "train.py", "strategy": "multi_worker_mirrored",
         "args": ["--steps=2000", "--log_every=100", "--checkpoint_every=200"],
         "restart": {"worker": "on-failure", "max": 2, "backoff": 1}},
        ["h1", "h2"], {"h1": 0, "h2": 0}),
    "lab-report-flags-per-host": (
        {"script": "job.py", "strategy": "flags", "workers": "per_host", "args": ["--steps=40"]},
        ["h1", "h2", "h3"], {}),
    "lab-resume-flags": (
        {"script": "train.py", "strategy": "flags",
         "args": ["--steps=3000", "--log_every=500", "--checkpoint_every=5000"],
         "restart": {"worker": "on-failure", "max": 2, "backoff": 1}},
        ["h1", "h2"], {"h2": 0}),
    "lab-strategies-mirrored": (
        {"script": "train.py", "strategy": "mirrored",
         "args": ["--strategy=mirrored", "--cpu_devices=2", "--log_every=10", "--steps=30"]},
        ["h1"], {"h1": 0}),
    "lab-tf-parameter-server": (
        {"script": "train.py", "strategy": "parameter_server", "chief": True,
         "args": ["--train_dir=out/ps-0", "--steps=30", "--log_every=10"]},
        ["h1", "h2"], {}),
}


def strategy_text(case: str) -> str:
    hosts, job = {**STRATEGY_CASES, **GROUP_CASES}[case]
    job_lines = "\n".join("  " + line for line in job.splitlines())
    return (f"name: lab\ndefaults: {{python: python3, workdir: ~/tfctl/lab}}\n"
            f"hosts:\n{_hosts(hosts)}\njob:\n  script: train.py\n{job_lines}\n")


def lab_text(case: str) -> str:
    job, names, ps = LAB_JOBS[case]
    hosts = [InventoryHost(n, f"10.2.0.{i + 1}", 22, Path(f"/srv/lab/{n}/tfctl"))
             for i, n in enumerate(names)]
    data = build_inventory(hosts, job, name="lab", ps=ps,
                           defaults={"user": "tfctl", "port": 22, "python": "python3",
                                     "env": {}})
    return yaml.safe_dump(data, sort_keys=False)


CASES = ["examples/two-hosts.yaml", "examples/beyond-the-lab.yaml",
         *STRATEGY_CASES, *LAB_JOBS]


def inventory(case: str, tmp_path: Path) -> Inventory:
    """The case's inventory, read through the loader (as `tfctl export` reads it)."""
    if case.startswith("examples/"):
        return load_inventory(EXAMPLES.parent / case)
    text = strategy_text(case) if case in STRATEGY_CASES or case in GROUP_CASES \
        else lab_text(case)
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return parse_inventory(text, str(path))
