"""Several Unix users on the lab's hosts, and GPUs that every user sees as on a real box.

A lab is shared by people, each with their own account, key and inventory. As root the lab can
have them: `ensure_user` makes a system account (`useradd`, no password: key login only) that is
kept for later sessions (another test session may be using it at the same moment, so it is never
deleted); `make_lab_user` gives it, in this lab, its own key (authorized only for it, see
`tests/support/testbed/sshd.py`), and on every lab host a workdir it owns. The lab hosts share this
machine's /etc/passwd, /home and /tmp, as hosts of a lab share their accounts and homes over NFS.

A second user cannot run an interpreter under /root (pyenv there is mode 700): the users'
inventories use the system Python (`SYSTEM_PYTHON`), which is all the agent needs (stdlib 3.8+).

GPUs (`install_gpus`): the stand-in nvidia-smi reads, from /proc, which processes use a GPU
(their CUDA_VISIBLE_DEVICES). A real driver sees every user's processes; /proc/<pid>/environ is
readable only by its owner. So the stand-in runs under a copy of the system Python that holds
the file capabilities `cap_sys_ptrace` and `cap_dac_read_search` (setcap): like the driver, it
sees every process of the host, whoever runs nvidia-smi.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.fakes import NVIDIA_SMI_STANDIN

SYSTEM_PYTHON = "/usr/bin/python3"
USER_PREFIX = "tfctl-"
ALICE, BOB, CAROL = "tfctl-alice", "tfctl-bob", "tfctl-carol"
"""The shared lab's users (`shared_lab`): alice runs, bob looks, queues and reserves, carol holds
a GPU by hand."""


@dataclass(frozen=True)
class LabUser:
    name: str
    uid: int
    gid: int
    key: Path
    """The private key (read by the test's client, which runs as root)."""
    workdirs: dict[str, Path]
    """Lab host name → the user's workdir there (owned by the user)."""


def can_add_users() -> bool:
    return os.geteuid() == 0 and shutil.which("useradd") is not None


def ensure_user(name: str) -> pwd.struct_passwd:
    """The account `name`, made when missing (`*` as password: not locked, no password login)."""
    if not name.startswith(USER_PREFIX):
        raise ValueError(f"lab users are named {USER_PREFIX}*, not {name!r}")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    done = subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "--password",
                           "*", name], capture_output=True, text=True, check=False)
    try:
        return pwd.getpwnam(name)  # made by us, or by another session meanwhile
    except KeyError:
        raise RuntimeError(f"useradd {name} failed: {done.stderr.strip()}") from None


def make_lab_user(lab_dir: Path, users_dir: Path, name: str, hosts: dict[str, Path]
                  ) -> LabUser:
    """`name` in this lab: its key in `users_dir/name/`, a workdir per host (`hosts`: host name →
    the host's folder in the lab dir)."""
    from tests.support.testbed.sshd import start_keygen, wait_keygens

    entry = ensure_user(name)
    for folder in (lab_dir, users_dir):  # others may pass through to their own folders
        folder.mkdir(exist_ok=True)
        folder.chmod(0o711)
    mine = users_dir / name
    mine.mkdir(exist_ok=True)
    mine.chmod(0o711)
    key = mine / "id_ed25519"
    wait_keygens([start_keygen(key, f"{name}@{lab_dir.name}")])
    shutil.copyfile(key.with_name(key.name + ".pub"), mine / "authorized_keys")
    workdirs = {}
    for host in hosts:
        work = mine / host / "work"
        work.mkdir(parents=True, exist_ok=True)
        for folder in (work.parent, work):
            os.chown(folder, entry.pw_uid, entry.pw_gid)
        workdirs[host] = work
    return LabUser(name, entry.pw_uid, entry.pw_gid, key, workdirs)


def gpu_python(lab_dir: Path) -> Path:
    """The system Python, copied into the lab with the capabilities to read every process."""
    tools = lab_dir / "tools"
    tools.mkdir(exist_ok=True)
    tools.chmod(0o755)
    python = tools / "python3-sees-all"
    if not python.exists():
        shutil.copyfile(os.path.realpath(SYSTEM_PYTHON), python)
        python.chmod(0o755)
        subprocess.run(["setcap", "cap_sys_ptrace,cap_dac_read_search+ep", str(python)],
                       check=True, capture_output=True)
    standin = tools / NVIDIA_SMI_STANDIN.name
    shutil.copyfile(NVIDIA_SMI_STANDIN, standin)
    standin.chmod(0o644)
    return python


def install_gpus(lab_dir: Path, host_dir: Path, bin_dir: Path, host: str, count: int) -> Path:
    """`count` stand-in GPUs on the host, seen by every user; the nvidia-smi written."""
    python = gpu_python(lab_dir)
    config = host_dir / "gpus.json"
    config.write_text(json.dumps({"host": host, "gpus": [{} for _ in range(count)]}))
    config.chmod(0o644)
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\nexport TFCTL_TEST_NVSMI_CONFIG={config}\n"
                    f"exec {python} {python.parent / NVIDIA_SMI_STANDIN.name} \"$@\"\n")
    tool.chmod(0o755)
    return tool
