"""A lab of real SSH hosts on this machine, for tests and benchmarks that must not be mocks.

As root each host is a network namespace on a private bridge (10.77.<k>.0/24) running its own
`sshd` with its own host key, hostname and PATH, so tfctl sees machines on a LAN: they can be cut
off, their sshd stopped, their key changed. Without root the lab falls back to sshd instances on
127.0.0.1 ports (`isolated = False`): enough for SSH behaviour, not for network faults.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.fakes import NVIDIA_SMI_STANDIN
from tests.support.testbed import netns
from tests.support.testbed.inventory import InventoryHost, build_inventory, dump_inventory
from tests.support.testbed.layout import (
    LabHost,
    free_port,
    kill_descendants,
    make_host,
    make_lab_dir,
    write_state,
)
from tests.support.testbed.sshd import (
    SSHD,
    SshdProcess,
    public_key_line,
    start_keygen,
    wait_keygens,
    write_config,
)
from tests.support.testbed.users import SYSTEM_PYTHON, LabUser, install_gpus, make_lab_user

SSHD_PRESENT = Path(SSHD).exists()


class LabUnsupported(RuntimeError):
    """This lab mode cannot do that (network faults need the root, namespace mode)."""


class LabCommandError(subprocess.CalledProcessError):
    """`Lab.run` failed; unlike CalledProcessError its message shows the output's tail."""

    def __str__(self) -> str:
        tail = "\n".join(f"{self.stdout or ''}{self.stderr or ''}".splitlines()[-20:])
        return f"{super().__str__()}\n{tail}"


class Testbed:
    """`Testbed(3)` starts hosts h1..h3 and returns when every sshd accepts; `close()` removes
    all. (Not a test class, whatever pytest makes of its name.)"""

    __test__ = False

    def __init__(
        self,
        hosts: int | Sequence[str] = 3,
        *,
        lab_dir: str | Path | None = None,
        isolated: bool | None = None,
        python: str = sys.executable,
        start_timeout_s: float = 30.0,
    ) -> None:
        names = [f"h{i + 1}" for i in range(hosts)] if isinstance(hosts, int) else list(hosts)
        if not names or len(set(names)) != len(names) or len(names) > 240:
            raise ValueError(f"need 1..240 distinct host names, got {names}")
        can_isolate = netns.usable()
        if isolated and not can_isolate:
            raise LabUnsupported("an isolated lab needs root and a working `ip netns`")
        self.isolated = can_isolate if isolated is None else isolated
        self.python = python
        self.user = "root" if self.isolated else pwd.getpwuid(os.geteuid()).pw_name
        self.start_timeout_s = start_timeout_s
        self.k: int | None = None
        self._nets: list[netns.HostNet] = []
        self._sshd: dict[str, SshdProcess] = {}
        self._closed = False
        if self.isolated:
            netns.cleanup_stale()
        self.dir = make_lab_dir(lab_dir)
        self.key = self.dir / "id_ed25519"
        self.known_hosts = self.dir / "known_hosts"
        self.authorized_keys = self.dir / "authorized_keys"
        self.users_dir = self.dir / "users"
        """Other Unix users' keys and workdirs (`add_user`, tests/support/testbed/users.py)."""
        self.users: dict[str, LabUser] = {}
        self.hosts: tuple[LabHost, ...] = ()
        try:
            self._start(names)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- start and stop

    def _start(self, names: list[str]) -> None:
        if self.isolated:
            self.k = netns.claim_subnet(self.dir)
            self._nets = netns.host_nets(self.k, len(names))
            addresses = [(n.address, 22) for n in self._nets]
        else:
            addresses = [("127.0.0.1", free_port()) for _ in names]
        namespaces: list[str | None] = [n.namespace for n in self._nets] or [None] * len(names)
        self.hosts = tuple(
            make_host(self.dir, name, addr, port, namespace)
            for name, (addr, port), namespace in zip(names, addresses, namespaces, strict=True)
        )
        write_state(self.dir, isolated=self.isolated, k=self.k, hosts=self.hosts)
        for host in self.hosts:  # each host's own /tmp, for its claims folder
            self.claims_dir(host.name).parent.mkdir(exist_ok=True)
            self.claims_dir(host.name).parent.chmod(0o1777)
        keygens = [start_keygen(self.key, f"tfctl-lab-user@{self.dir.name}")]
        keygens += [start_keygen(h.host_key, f"{h.name}@{self.dir.name}") for h in self.hosts]
        if self.isolated:
            assert self.k is not None
            netns.build(self.k, self._nets, names)
            Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
        wait_keygens(keygens)
        shutil.copyfile(self.key.with_name(self.key.name + ".pub"), self.authorized_keys)
        self.known_hosts.write_text("".join(self._known_hosts_line(h) for h in self.hosts))
        for host in self.hosts:
            self._sshd[host.name] = self._make_sshd(host)
            self._sshd[host.name].start()
        deadline = time.monotonic() + self.start_timeout_s
        for host in self.hosts:
            self._sshd[host.name].wait_ready(deadline)

    def _make_sshd(self, host: LabHost) -> SshdProcess:
        config = host.dir / "sshd_config"
        write_config(
            config,
            listen=host.address,
            port=host.port,
            host_key=host.host_key,
            authorized_keys=self.authorized_keys,
            pid_file=host.dir / "sshd.pid",
            path_dirs=[host.bin_dir],
            home=host.home,
            as_root=self.user == "root",
            users_dir=self.users_dir,
            owner=self.user,
            # Each host its own claims folder (remote/agent/claims.py), as each machine has its
            # own /tmp: the lab hosts share this machine's.
            # and its own lab policy file (remote/agent/policy.py), absent unless a test writes
            # it, as each machine has its own /etc/tfctl/lab.yaml.
            env={"TFCTL_CLAIMS_DIR": str(self.claims_dir(host.name)),
                 "TFCTL_LAB_POLICY": str(self.policy_file(host.name))},
        )
        prefix: list[str] = []
        if host.namespace is not None:
            # Own UTS namespace: `hostname` in a session names the lab host, as on a real LAN.
            hostname = 'hostname "$0" && exec "$@"'
            prefix = ["ip", "netns", "exec", host.namespace, "unshare", "--uts"]
            prefix += ["sh", "-c", hostname, host.name]
        return SshdProcess(prefix, config, host.dir / "sshd.log", host.address, host.port)

    @staticmethod
    def _known_hosts_line(host: LabHost) -> str:
        where = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
        return f"{where} {public_key_line(host.host_key)}\n"

    def close(self) -> None:
        """Kill everything the hosts run, then remove namespaces, links, bridge and the lab dir."""
        if self._closed:
            return
        self._closed = True
        if self.isolated and self.k is not None:
            netns.teardown(self.k, self._nets)
        for sshd in self._sshd.values():
            if not self.isolated and sshd.proc is not None:
                kill_descendants(sshd.proc.pid)
            sshd.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- looking up hosts

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def host(self, name: str) -> LabHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(f"no lab host {name!r} (hosts: {self.names})")

    def claims_dir(self, name: str) -> Path:
        """The host's claims folder (its sessions' TFCTL_CLAIMS_DIR) in the host's own /tmp
        (mode 1777), made by whoever claims first."""
        return self.host(name).dir / "tmp" / "tfctl-claims"

    def policy_file(self, name: str) -> Path:
        """The host's lab policy file (its sessions' TFCTL_LAB_POLICY), in the host's own
        `etc/tfctl/` (mode 755, root's, as /etc/tfctl is): none until a test writes one."""
        return self.host(name).dir / "etc" / "tfctl" / "lab.yaml"

    # ---------------------------------------------------------------- other users, GPUs

    def add_user(self, name: str) -> LabUser:
        """The Unix user `name` (made if missing) with its own key and a workdir on every host
        (tests/support/testbed/users.py); root lab only."""
        if self.user != "root":
            raise LabUnsupported("other users need the root lab")
        if name not in self.users:
            hosts = {h.name: h.dir for h in self.hosts}
            self.users[name] = make_lab_user(self.dir, self.users_dir, name, hosts)
        return self.users[name]

    def install_gpus(self, name: str, count: int) -> Path:
        """`count` stand-in GPUs on host `name` that every user's nvidia-smi sees."""
        host = self.host(name)
        return install_gpus(self.dir, host.dir, host.bin_dir, name, count)

    def standin_gpus(self, name: str, count: int, env: str = "", **config: Any) -> Path:
        """`count` stand-in GPUs on host `name`, seen by the testbed's own user: its nvidia-smi
        runs the stand-in (tests/support/fakes) with this Python. `config`: more of the
        stand-in's config (e.g. the driver it plays); `env`: shell lines run before it (e.g. a
        failure to play). Undone with `remove_from_path(name, "nvidia-smi")`."""
        path = self.host(name).dir / "standin-gpus.json"
        path.write_text(json.dumps({"host": name, "gpus": [{} for _ in range(count)], **config}))
        return self.write_tool(name, "nvidia-smi",
                               f"#!/bin/sh\nexport TFCTL_TEST_NVSMI_CONFIG={path}\n{env}"
                               f'exec {sys.executable} {NVIDIA_SMI_STANDIN} "$@"\n')

    def start_on_gpu(self, name: str, gpu: int) -> int:
        """The pid of a process that holds GPU `gpu` of host `name` as the stand-in sees it (a
        `sleep 300` with that CUDA_VISIBLE_DEVICES, started inside the host as its own
        session): someone else's job. The caller kills it."""
        return int(self.run(name, f"CUDA_VISIBLE_DEVICES={gpu} setsid sleep 300 </dev/null "
                                  ">/dev/null 2>&1 & echo $!").stdout)

    def user_inventory_dict(self, user: LabUser, job: Mapping[str, Any], **kwargs: Any
                            ) -> dict[str, Any]:
        """`inventory_dict` for `user`: its login, key, workdirs and the system Python."""
        given = kwargs.pop("host_fields", None) or {}
        fields = {n: dict(given.get(n, {}), workdir=str(w)) for n, w in user.workdirs.items()
                  if kwargs.get("hosts") is None or n in kwargs["hosts"]}
        return self.inventory_dict(job, host_fields=fields, user=user.name,
                                   identity_file=str(user.key), python=SYSTEM_PYTHON, **kwargs)

    def write_user_inventory(self, user: LabUser, path: str | Path, job: Mapping[str, Any],
                             **kwargs: Any) -> Path:
        return dump_inventory(self.user_inventory_dict(user, job, **kwargs), Path(path))

    def address(self, name: str) -> str:
        return self.host(name).address

    @property
    def gateway(self) -> str | None:
        """The root namespace's address on the lab bridge (where the client appears from)."""
        return None if self.k is None else f"{netns.SUBNET_BASE}.{self.k}.1"

    # ---------------------------------------------------------------- faults

    def _namespace(self, name: str) -> str:
        namespace = self.host(name).namespace
        if namespace is None:
            raise LabUnsupported("network faults need the isolated (root, ip netns) lab")
        return namespace

    def cut(self, name: str) -> None:
        """Drop every packet arriving at the host: connects time out, open sessions stall."""
        netns.cut(self._namespace(name))

    def cut_from(self, name: str, peers: Sequence[str]) -> None:
        """Drop every packet arriving at the host from these lab hosts: a partition between
        hosts (both ways, as TCP needs the answers), while the client still reaches it."""
        netns.cut_from(self._namespace(name), [self.address(p) for p in peers])

    def heal(self, name: str) -> None:
        """Undo `cut` and `cut_from` on the host."""
        netns.heal(self._namespace(name))

    def is_cut(self, name: str) -> bool:
        return self.isolated and netns.is_cut(self._namespace(name))

    def stop_sshd(self, name: str) -> None:
        """Stop the listener (connects are refused); sessions already open keep running."""
        self._sshd[name].stop()

    def start_sshd(self, name: str) -> None:
        sshd = self._sshd[name]
        sshd.start()
        sshd.wait_ready(time.monotonic() + self.start_timeout_s)

    def sshd_running(self, name: str) -> bool:
        return self._sshd[name].running

    def regenerate_host_key(self, name: str) -> None:
        """New host key, sshd restarted; known_hosts keeps the old key so strict clients refuse."""
        host = self.host(name)
        original = host.host_key.with_name("original_host_key")
        if not original.exists():
            host.host_key.rename(original)
            host.host_key.with_name(host.host_key.name + ".pub").rename(
                original.with_name(original.name + ".pub")
            )
        wait_keygens([start_keygen(host.host_key, f"{name}@{self.dir.name}-regenerated")])
        self._restart_sshd(name)

    def restore_host_key(self, name: str) -> None:
        """Put back the key known_hosts lists (undoes `regenerate_host_key`)."""
        host = self.host(name)
        original = host.host_key.with_name("original_host_key")
        if original.exists():
            original.replace(host.host_key)
            original.with_name(original.name + ".pub").replace(
                host.host_key.with_name(host.host_key.name + ".pub")
            )
            self._restart_sshd(name)

    def _restart_sshd(self, name: str) -> None:
        self.stop_sshd(name)
        self.start_sshd(name)

    def reset(self) -> None:
        """Undo every fault: heal links, restore host keys, (re)start stopped sshds."""
        for host in self.hosts:
            if self.isolated:
                self.heal(host.name)
            self.restore_host_key(host.name)
            if not self.sshd_running(host.name):
                self.start_sshd(host.name)

    # ---------------------------------------------------------------- inspecting hosts

    def run(
        self,
        name: str,
        command: str | Sequence[str],
        *,
        check: bool = True,
        timeout: float = 60,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `command` on the host without SSH (inside its namespace), with its PATH and HOME.

        A string runs through `bash -c`; output is captured as text.
        """
        host = self.host(name)
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        if host.namespace is not None:
            argv = ["ip", "netns", "exec", host.namespace, *argv]
        env = {**os.environ, "PATH": host.path_env, "HOME": str(host.home)}
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, input=input, env=env
        )
        if check and done.returncode != 0:
            raise LabCommandError(done.returncode, argv, done.stdout, done.stderr)
        return done

    def pids_in(self, name: str) -> list[int]:
        """Every process in the host's namespace, sshd included."""
        return netns.namespace_pids(self._namespace(name))

    def sshd_pid(self, name: str) -> int | None:
        proc = self._sshd[name].proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def kill_strays(self, name: str | None = None) -> list[int]:
        """SIGKILL every process on the host(s) except the sshd listener; returns the pids."""
        killed: list[int] = []
        for host in [self.host(name)] if name else self.hosts:
            keep = self.sshd_pid(host.name)
            for pid in self.pids_in(host.name):
                if pid != keep:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                    except ProcessLookupError:
                        continue
        return killed

    def add_to_path(self, name: str, src: str | Path, tool: str | None = None) -> Path:
        """Copy an executable onto the host's PATH (as `tool`, default its own name)."""
        target = self.host(name).bin_dir / (tool or Path(src).name)
        shutil.copyfile(src, target)
        target.chmod(0o755)
        return target

    def write_tool(self, name: str, tool: str, content: str) -> Path:
        """Write a script onto the host's PATH."""
        target = self.host(name).bin_dir / tool
        target.write_text(content)
        target.chmod(0o755)
        return target

    def remove_from_path(self, name: str, tool: str) -> None:
        (self.host(name).bin_dir / tool).unlink(missing_ok=True)

    def ssh_argv(self, name: str, *command: str, connect_timeout_s: int = 5) -> list[str]:
        """An OpenSSH client command line that logs in with the lab key and strict host keys."""
        host = self.host(name)
        return [
            "ssh", "-F", "/dev/null", "-i", str(self.key), "-p", str(host.port),
            "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes", "-o", f"ConnectTimeout={connect_timeout_s}",
            "-o", "LogLevel=ERROR",
            f"{self.user}@{host.address}", *command,
        ]  # fmt: skip

    # ---------------------------------------------------------------- inventory

    def inventory_dict(
        self,
        job: Mapping[str, Any],
        *,
        gpus: Mapping[str, int | Sequence[int]] | None = None,
        ps: Mapping[str, int] | None = None,
        hosts: Sequence[str] | None = None,
        host_fields: Mapping[str, Mapping[str, Any]] | None = None,
        name: str = "lab",
        **defaults: Any,
    ) -> dict[str, Any]:
        """tfctl inventory for the lab (or the `hosts` subset); `defaults` override the SSH ones."""
        chosen = [self.host(n) for n in hosts] if hosts is not None else list(self.hosts)
        base: dict[str, Any] = {
            "user": self.user,
            "port": 22,
            "identity_file": str(self.key),
            "known_hosts": str(self.known_hosts),
            "python": self.python,
            "env": {},
        }
        base.update(defaults)
        entries = [InventoryHost(h.name, h.address, h.port, h.workdir) for h in chosen]
        return build_inventory(
            entries, job, name=name, defaults=base, gpus=gpus, ps=ps, host_fields=host_fields
        )

    def write_inventory(self, path: str | Path, job: Mapping[str, Any], **kwargs: Any) -> Path:
        """`inventory_dict` written as YAML; same keyword arguments."""
        return dump_inventory(self.inventory_dict(job, **kwargs), Path(path))
