"""PyTorch (`job.framework: torch`): one process per GPU or per host, each with torchrun's
environment, so a script written for `torchrun` runs unchanged.

Every rank gets what torchrun's agent sets for its workers (pytorch/pytorch,
`torch.distributed.elastic.agent.server.local_elastic_agent`, `_start_workers`): MASTER_ADDR (rank
0's host, as the cluster reaches it) and MASTER_PORT (rank 0's port, where `init_process_group()`'s
default `env://` starts its TCPStore), WORLD_SIZE and RANK, LOCAL_RANK and LOCAL_WORLD_SIZE (within
its host), GROUP_RANK and GROUP_WORLD_SIZE (its host among the hosts), ROLE_RANK, ROLE_NAME
(`default`) and ROLE_WORLD_SIZE. Left out: TORCHELASTIC_* (no elastic agent runs: a script that
reads TORCHELASTIC_USE_AGENT_STORE would look for its store). As torchrun does, a rank gets
TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and, where a host runs several ranks, OMP_NUM_THREADS=1, unless
the inventory sets them. A rank of a group across hosts gets GLOO_SOCKET_IFNAME and
NCCL_SOCKET_IFNAME, its host's interface toward rank 0's host found there at start, unless the
inventory sets them: gloo would otherwise advertise what the hostname resolves to, loopback on a
stock Debian or Ubuntu install (gloo.py).

`workers: per_gpu` (the default) runs one rank per GPU and, as under torchrun, every rank of a
host sees all the host's GPUs: it takes its own by LOCAL_RANK (`torch.cuda.set_device`), which
is what the usual DDP script does. `per_host` runs one rank per host on all its GPUs; a host
without GPUs runs `cpu_workers` ranks. NCCL needs GPUs: on CPU hosts the script uses `gloo`.

When a rank fails the group ends, or restarts whole under `restart:` (DDP cannot take one rank
back into a running group): ranks.py says how.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tfctl.inventory.frameworks import gloo, ranks
from tfctl.inventory.frameworks.interface import Cluster, Handed, Hint, Level
from tfctl.inventory.model import Job
from tfctl.inventory.tasks import Place

SHOWN = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
         "GLOO_SOCKET_IFNAME")


class PyTorch(ranks.Ranks):
    """torchrun's environment for every rank of one process group (`Framework`)."""

    name: str = "torch"
    title: str = "PyTorch"
    module: str = "torch"
    install: str = "pip install torch"
    asks_host: tuple[str, ...] = ("torch",)
    shared_mask: bool = True
    shown_env: tuple[str, ...] = SHOWN

    @property
    def hints(self) -> tuple[Hint, ...]:
        return _hints()

    def hand(self, job: Job, place: Place, cluster: Cluster) -> Handed:
        if place.type != "worker":
            return Handed()
        r = ranks.Rank(place, cluster.places)
        env = {"MASTER_ADDR": r.coordinator.address, "MASTER_PORT": str(r.coordinator.port),
               "WORLD_SIZE": str(r.world_size), "RANK": str(r.rank),
               "LOCAL_RANK": str(r.local_rank), "LOCAL_WORLD_SIZE": str(r.local_world_size),
               "GROUP_RANK": str(r.group_rank), "GROUP_WORLD_SIZE": str(r.group_world_size),
               "ROLE_RANK": str(r.rank), "ROLE_NAME": "default",
               "ROLE_WORLD_SIZE": str(r.world_size)}
        defaults = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
        if r.local_world_size > 1:
            defaults["OMP_NUM_THREADS"] = "1"
        defaults.update(gloo.interface_defaults(r.coordinator.address, r.addresses))
        return Handed(env=env, env_defaults=defaults)

    def judge_imported(self, said: Mapping[str, Any],
                       wanted: tuple[int, ...]) -> list[tuple[Level, str]]:
        gpus = list(said.get("gpus") or [])
        found: list[tuple[Level, str]] = [
            ("ok", f"PyTorch {said.get('version')} sees {len(gpus)} GPU(s); backends: "
                   f"{', '.join(said.get('backends') or []) or 'none'}")]
        if wanted and not said.get("cuda"):
            found.append(("fail", f"this PyTorch is built without CUDA (a CPU wheel) and cannot "
                                  f"use the {len(wanted)} GPU(s) the inventory selects: install "
                                  "a CUDA build of torch there"))
        else:
            found += ranks.too_few_gpus("PyTorch", said, wanted, "check the driver "
                                        "(`nvidia-smi`) and the CUDA version torch was built for")
        if not wanted and "gloo" not in (said.get("backends") or []):
            found.append(("fail", "a host without GPUs needs torch's gloo backend, which this "
                                  "build lacks"))
        elif not wanted:
            found.append(("info", "no GPUs selected: the script's ranks use "
                                  "init_process_group(\"gloo\") here (NCCL needs GPUs)"))
        return found


def _hints() -> tuple[Hint, ...]:
    return (
        gloo.LOOPBACK_HINT,
        Hint(re.compile(r"Distributed package doesn't have NCCL built in|ProcessGroupNCCL is "
                        r"only supported with GPUs|NCCL.*no GPUs found"),
             "NCCL needs CUDA GPUs: on a host without them (or with a CPU build of torch) use "
             "`init_process_group(\"gloo\")`, or `backend=\"cpu:gloo,cuda:nccl\"` for a job "
             "on both kinds of host"),
        Hint(re.compile(r"Torch not compiled with CUDA enabled|Found no NVIDIA driver"),
             "this torch cannot use a GPU there (a CPU wheel, or no NVIDIA driver): install a "
             "CUDA build of torch on the hosts with GPUs (`tfctl check` says which), or run "
             "on the CPU with `gloo`"),
        Hint(re.compile(r"invalid device ordinal|CUDA error: invalid device", re.IGNORECASE),
             "a rank asked for a GPU its host does not have: take the device by LOCAL_RANK "
             "(`torch.cuda.set_device(int(os.environ[\"LOCAL_RANK\"]))`), and check the host's "
             "`gpus:` in `tfctl plan`"),
        Hint(re.compile(r"(?:Gloo|c10d|TCPStore).*(?:Connection (?:refused|reset)|timed out|"
                        r"Timeout)|client socket has timed out|DistStoreError", re.IGNORECASE),
             "a rank could not reach rank 0 or another rank: MASTER_ADDR (`tfctl plan`) must "
             "resolve on every host, and the hosts must reach each other on any port (gloo and "
             "NCCL connect on ports of their own; `tfctl check --firewall`); when one rank "
             "failed first, the others' logs only say it went away"),
    )


PYTORCH = PyTorch()
