#!/usr/bin/env python3
"""TEST DOUBLE of the `nvidia-smi` CLI. For tfctl's tests and lab test hosts only; stdlib only.

Installed on a test host's PATH as `nvidia-smi` (symlink or copy) so that tfctl's telemetry runs
its real code path on machines without GPUs. It is not a simulator of any real GPU: every number
it prints is made up from the rules below, so that tests can predict it.

Speaks:
  --query-gpu=<fields> --format=csv[,noheader][,nounits] [-l S | -lms MS] [-i 0,1]
  --query-compute-apps=<fields> --format=...              [-l S | -lms MS]
  --help-query-gpu, --help-query-compute-apps (same shape as the real help), -L, --version
  Loop mode prints one block per interval (header, if any, repeated per block), flushing, until
  killed. An unknown property prints `Field "x" is not a valid field to query.` and exits 2.

GPUs:
  TFCTL_TEST_NVSMI_CONFIG=<path to JSON>, e.g.
      {"host": "lab1", "gpus": [{"name": "NVIDIA TITAN X (Pascal)", "memory_total_mib": 12288,
        "power_limit_w": 250}, {"name": "NVIDIA GeForce GTX 970", "memory_total_mib": 4096,
        "power": null, "fan": null}]}
    `"power": null` → power.draw/power.limit print [Not Supported] (old GeForce); `"fan": null` →
    fan.speed prints [N/A] (datacenter cards). Optional top-level: "host", "driver_version",
    "process_memory_mib".
  or TFCTL_TEST_NVSMI_GPUS=<count> for that many default GPUs. Neither: "No devices were found".
  UUIDs are derived stably from the host name ("host" in the config, else TFCTL_TEST_NVSMI_HOST,
  else the hostname) and the GPU index.

Who uses a GPU (re-read from /proc for every block; an exited, unreaped process has no
environment left in /proc, so only live processes count):
  * a process whose CUDA_VISIBLE_DEVICES is non-empty uses the GPUs it names (indices or UUIDs,
    comma-separated; like CUDA, the list ends at the first invalid entry, so "-1" means none);
  * CUDA_VISIBLE_DEVICES="" means no GPU, whatever else is set;
  * CUDA_VISIBLE_DEVICES unset: the process uses all GPUs only if it has TFCTL_TEST_USES_GPU=1;
  * only processes in this process's network namespace count (each netns lab host sees its own);
  * if this process has TFCTL_TEST_NVSMI_TAG=x, only processes with the same tag count (tests
    running side by side on one machine don't see each other's processes).
  Each such process is a compute app on each of its GPUs with a fixed used memory (1500 MiB by
  default), named by its argv[0] (else /proc/<pid>/comm). A GPU with a compute app is busy
  (utilization 90–99 %, P2, hot, high power); a GPU without one is idle (0 %, P8). A process
  with TFCTL_TEST_GPU_UTIL=N declares its utilization: a GPU whose apps all declare one shows
  the highest (N=0: memory held, nothing computed — a forgotten notebook).
  The pids are the real ones; run as a user, it sees only what that user may read in /proc,
  unless its interpreter may read every process (tests/support/testbed/users.py), as a driver does.

Drivers: TFCTL_TEST_NVSMI_DRIVER=old (or `"driver": "old"` in the config) plays a driver from
before the `clocks_throttle_reasons` → `clocks_event_reasons` rename: its help lists only the old
names, and a query naming a new one is refused with nvidia-smi's own words,
`Field "clocks_event_reasons.active" is not a valid field to query.` (exit 2). The default plays
a newer driver, which lists both spellings (`"clocks_event_reasons.active" or
"clocks_throttle_reasons.active"`, as in tests/support/data/nvidia-smi/*.txt) and answers to either.

Failures: TFCTL_TEST_NVSMI_FAIL="Failed to initialize NVML: Driver/library version mismatch"
prints that text on stdout and exits 9 (TFCTL_TEST_NVSMI_FAIL_RC overrides the status).
TFCTL_TEST_NVSMI_HANG=1: every query hangs without a word (a stuck driver) until killed.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_GPU = {
    "name": "NVIDIA GeForce GTX 1080 Ti",
    "memory_total_mib": 11264,
    "power_limit_w": 250,
}
DEFAULT_DRIVER_VERSION = "999.0.0"
OLD_DRIVER_VERSION = "470.256.02"  # a driver from before the rename
DEFAULT_PROCESS_MEMORY_MIB = 1500
IDLE_MEMORY_MIB = 5
UNKNOWN_FIELD_RC = 2
NO_DEVICES_RC = 6


@dataclass
class Gpu:
    index: int
    name: str
    uuid: str
    memory_total_mib: int
    power_limit_w: float | None
    has_fan: bool
    apps: list[tuple[int, str]] = field(default_factory=list)  # (pid, process name)
    app_util: list[int | None] = field(default_factory=list)  # each app's TFCTL_TEST_GPU_UTIL


@dataclass
class Machine:
    gpus: list[Gpu]
    driver_version: str
    process_memory_mib: int
    old_driver: bool = False


def load_machine(environ: dict[str, str]) -> Machine:
    config_path = environ.get("TFCTL_TEST_NVSMI_CONFIG")
    if config_path:
        with open(config_path, encoding="utf-8") as handle:
            config = json.load(handle)
    else:
        count = int(environ.get("TFCTL_TEST_NVSMI_GPUS", "0") or "0")
        config = {"gpus": [dict(DEFAULT_GPU) for _ in range(count)]}
    host = config.get("host") or environ.get("TFCTL_TEST_NVSMI_HOST") or socket.gethostname()
    gpus = []
    for index, spec in enumerate(config.get("gpus", [])):
        power_limit = spec.get("power_limit_w", DEFAULT_GPU["power_limit_w"])
        gpus.append(
            Gpu(
                index=index,
                name=str(spec.get("name", DEFAULT_GPU["name"])),
                uuid=spec.get("uuid") or f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{host}/{index}')}",
                memory_total_mib=int(spec.get("memory_total_mib", DEFAULT_GPU["memory_total_mib"])),
                power_limit_w=None if "power" in spec and spec["power"] is None else power_limit,
                has_fan=not ("fan" in spec and spec["fan"] is None),
            )
        )
    old = (config.get("driver") or environ.get("TFCTL_TEST_NVSMI_DRIVER")) == "old"
    return Machine(
        gpus=gpus,
        driver_version=str(config.get("driver_version",
                                      OLD_DRIVER_VERSION if old else DEFAULT_DRIVER_VERSION)),
        process_memory_mib=int(config.get("process_memory_mib", DEFAULT_PROCESS_MEMORY_MIB)),
        old_driver=old,
    )


# --- who uses which GPU ---------------------------------------------------------------------


def read_environ(pid: str) -> dict[str, str] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None  # gone, or not ours to read
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def gpus_in_mask(env: dict[str, str], gpus: list[Gpu]) -> list[Gpu]:
    mask = env.get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return list(gpus) if env.get("TFCTL_TEST_USES_GPU") == "1" else []
    chosen: list[Gpu] = []
    for token in (t.strip() for t in mask.split(",")):
        match = [g for g in gpus if (token.isdigit() and int(token) == g.index) or token == g.uuid]
        if not match:
            break  # CUDA ignores everything after the first invalid entry
        if match[0] not in chosen:
            chosen.append(match[0])
    return chosen


def net_namespace(pid: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def process_name(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv0 = handle.read().split(b"\0", 1)[0].decode(errors="replace")
        if argv0:
            return argv0
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return "[unknown]"


def attach_processes(gpus: list[Gpu], own_env: dict[str, str]) -> None:
    """Fill each GPU's `apps` from the processes alive now (see the module docstring)."""
    own_pid, own_ns = str(os.getpid()), net_namespace("self")
    tag = own_env.get("TFCTL_TEST_NVSMI_TAG")
    for gpu in gpus:
        gpu.apps.clear()
        gpu.app_util.clear()
    for pid in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
        env = read_environ(pid) if pid != own_pid else None
        if env is None or (tag is not None and env.get("TFCTL_TEST_NVSMI_TAG") != tag):
            continue
        used = gpus_in_mask(env, gpus)
        if not used or net_namespace(pid) != own_ns:
            continue
        name = process_name(pid)
        declared = env.get("TFCTL_TEST_GPU_UTIL", "")
        for gpu in used:
            gpu.apps.append((int(pid), name))
            gpu.app_util.append(int(declared) if declared.isdigit() else None)


# --- values ---------------------------------------------------------------------------------

NOT_SUPPORTED = "[Not Supported]"
NOT_AVAILABLE = "[N/A]"


def timestamp() -> str:
    now = time.time()
    milliseconds = int(now * 1000) % 1000
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now)) + f".{milliseconds:03d}"


def utilization(gpu: Gpu) -> int:
    """0 without apps; the most any app declares when all declare one; else 90–99."""
    if not gpu.apps:
        return 0
    if gpu.app_util and None not in gpu.app_util:
        return min(100, max(u for u in gpu.app_util if u is not None))
    return 90 + (int(time.time()) + gpu.index) % 10


def memory_used(gpu: Gpu, machine: Machine) -> int:
    used = IDLE_MEMORY_MIB + machine.process_memory_mib * len(gpu.apps)
    return min(used, gpu.memory_total_mib)


def power(gpu: Gpu, fraction_busy: float, fraction_idle: float) -> str:
    if gpu.power_limit_w is None:
        return NOT_SUPPORTED
    return f"{gpu.power_limit_w * (fraction_busy if gpu.apps else fraction_idle):.2f}"


# Each property: (unit or "", value(gpu, machine) -> str). Aliases share the entry.
Prop = tuple[str, Callable[[Gpu, Machine], str]]
GPU_PROPERTIES: dict[str, Prop] = {
    "timestamp": ("", lambda g, m: timestamp()),
    "driver_version": ("", lambda g, m: m.driver_version),
    "count": ("", lambda g, m: str(len(m.gpus))),
    "index": ("", lambda g, m: str(g.index)),
    "name": ("", lambda g, m: g.name),
    "serial": ("", lambda g, m: NOT_AVAILABLE),
    "uuid": ("", lambda g, m: g.uuid),
    "pci.bus_id": ("", lambda g, m: f"00000000:{g.index + 1:02X}:00.0"),
    "utilization.gpu": ("%", lambda g, m: str(utilization(g))),
    "utilization.memory": ("%", lambda g, m: str(utilization(g) // 3)),
    "memory.total": ("MiB", lambda g, m: str(g.memory_total_mib)),
    "memory.used": ("MiB", lambda g, m: str(memory_used(g, m))),
    "memory.free": ("MiB", lambda g, m: str(g.memory_total_mib - memory_used(g, m))),
    "temperature.gpu": ("", lambda g, m: "72" if g.apps else "35"),
    "power.draw": ("W", lambda g, m: power(g, 0.85, 0.12)),
    "power.limit": ("W", lambda g, m: power(g, 1.0, 1.0)),
    "fan.speed": ("%", lambda g, m: ("65" if g.apps else "30") if g.has_fan else NOT_AVAILABLE),
    "pstate": ("", lambda g, m: "P2" if g.apps else "P8"),
    "clocks_event_reasons.active": ("", lambda g, m: f"0x{0 if g.apps else 1:016X}"),
    "compute_mode": ("", lambda g, m: "Default"),
}
GPU_ALIASES = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
}
# The names a driver from before the rename knows instead (the newer names are unknown to it).
OLD_NAMES = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}
APP_PROPERTIES = ("timestamp", "gpu_name", "gpu_bus_id", "gpu_serial", "gpu_uuid", "pid")
APP_ALIASES = {"used_gpu_memory": ("used_memory",), "process_name": ("name",)}


def gpu_vocabulary(old_driver: bool) -> tuple[dict[str, Prop], dict[str, str]]:
    """(properties, aliases → property) of the driver played."""
    if not old_driver:
        return GPU_PROPERTIES, GPU_ALIASES
    props = {OLD_NAMES.get(name, name): entry for name, entry in GPU_PROPERTIES.items()}
    aliases = {alias: OLD_NAMES.get(target, target) for alias, target in GPU_ALIASES.items()
               if alias not in props}
    return props, aliases


def app_value(prop: str, gpu: Gpu, pid: int, name: str, machine: Machine) -> tuple[str, str]:
    """(unit, value) of one compute-app property."""
    if prop in ("used_gpu_memory", "used_memory"):
        return "MiB", str(machine.process_memory_mib)
    if prop in ("process_name", "name"):
        return "", name
    if prop == "pid":
        return "", str(pid)
    unit, value = GPU_PROPERTIES[GPU_ALIASES.get(prop, prop)]
    return unit, value(gpu, machine)


def csv_line(cells: list[tuple[str, str]], units: bool) -> str:
    shown = (f"{v} {u}" if units and u and not v.startswith("[") else v for u, v in cells)
    return ", ".join(shown)


def header_line(props: list[str], units: list[str], with_units: bool) -> str:
    return ", ".join(
        f"{p} [{u}]" if with_units and u else p for p, u in zip(props, units, strict=True)
    )


# --- commands -------------------------------------------------------------------------------


def gpu_block(props: list[str], machine: Machine, gpus: list[Gpu], fmt: set[str]) -> list[str]:
    known, aliases = gpu_vocabulary(machine.old_driver)
    entries = [known[aliases.get(p, p)] for p in props]
    lines = [] if "noheader" in fmt else [header_line(props, [u for u, _ in entries], True)]
    for gpu in gpus:
        cells = [(unit, value(gpu, machine)) for unit, value in entries]
        lines.append(csv_line(cells, "nounits" not in fmt))
    return lines


def app_block(props: list[str], machine: Machine, gpus: list[Gpu], fmt: set[str]) -> list[str]:
    units = [app_value(p, gpus[0], 0, "", machine)[0] for p in props] if gpus else [""] * len(props)
    lines = [] if "noheader" in fmt else [header_line(props, units, True)]
    for gpu in gpus:
        for pid, name in gpu.apps:
            cells = [app_value(p, gpu, pid, name, machine) for p in props]
            lines.append(csv_line(cells, "nounits" not in fmt))
    return lines


def help_text(switch: str, names: list[list[str]]) -> str:
    out = [f'List of valid properties to query for the switch "{switch}":', ""]
    for spellings in names:
        out += [" or ".join(f'"{n}"' for n in spellings), "Made up by the tfctl stand-in.", ""]
    return "\n".join(out)


def gpu_help(old_driver: bool) -> str:
    known, aliases = gpu_vocabulary(old_driver)
    aliases_of: dict[str, list[str]] = {}
    for alias, target in aliases.items():
        aliases_of.setdefault(target, []).append(alias)
    return help_text("--query-gpu", [[p, *aliases_of.get(p, [])] for p in known])


def apps_help() -> str:
    names = [[p] for p in APP_PROPERTIES] + [[p, *a] for p, a in APP_ALIASES.items()]
    return help_text("--query-compute-apps", names)


def known_app_props() -> set[str]:
    return set(APP_PROPERTIES) | {n for p, a in APP_ALIASES.items() for n in (p, *a)}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nvidia-smi", description=__doc__.splitlines()[0])
    parser.add_argument("--query-gpu")
    parser.add_argument("--query-compute-apps")
    parser.add_argument("--format", default="csv")
    parser.add_argument("-l", "--loop", type=float)
    parser.add_argument("-lms", "--loop-ms", type=int)
    parser.add_argument("-i", "--id")
    parser.add_argument("-L", "--list-gpus", action="store_true")
    parser.add_argument("--help-query-gpu", action="store_true")
    parser.add_argument("--help-query-compute-apps", action="store_true")
    parser.add_argument("--version", action="store_true")
    return parser.parse_args(argv)


def emit(lines: list[str]) -> None:
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    machine = load_machine(dict(os.environ))
    if args.help_query_gpu or args.help_query_compute_apps:
        print(gpu_help(machine.old_driver) if args.help_query_gpu else apps_help())
        return 0
    if os.environ.get("TFCTL_TEST_NVSMI_HANG") == "1":
        while True:
            time.sleep(3600)
    failure = os.environ.get("TFCTL_TEST_NVSMI_FAIL")
    if failure:
        print(failure, flush=True)
        return int(os.environ.get("TFCTL_TEST_NVSMI_FAIL_RC", "9"))
    if args.version:
        print(f"NVIDIA-SMI version  : {machine.driver_version} (tfctl test stand-in)")
        return 0
    if not machine.gpus:
        print("No devices were found", flush=True)
        return NO_DEVICES_RC
    gpus = machine.gpus
    if args.id is not None:
        wanted = {t.strip() for t in args.id.split(",")}
        gpus = [g for g in gpus if str(g.index) in wanted or g.uuid in wanted]
    if args.list_gpus:
        emit([f"GPU {g.index}: {g.name} (UUID: {g.uuid})" for g in gpus])
        return 0
    query = args.query_gpu or args.query_compute_apps
    if not query:
        print("stand-in: use --query-gpu, --query-compute-apps or -L", file=sys.stderr)
        return UNKNOWN_FIELD_RC
    props = [p.strip() for p in query.split(",")]
    gpu_props, gpu_aliases = gpu_vocabulary(machine.old_driver)
    known = set(gpu_props) | set(gpu_aliases) if args.query_gpu else known_app_props()
    unknown = [p for p in props if p not in known]
    if unknown:
        print(f'Field "{unknown[0]}" is not a valid field to query.', flush=True)
        return UNKNOWN_FIELD_RC
    fmt = {part.strip() for part in args.format.split(",")}
    block = gpu_block if args.query_gpu else app_block
    interval_s = args.loop_ms / 1000 if args.loop_ms else args.loop
    while True:
        attach_processes(machine.gpus, dict(os.environ))
        emit(block(props, machine, gpus, fmt))
        if not interval_s:
            return 0
        time.sleep(interval_s)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (BrokenPipeError, KeyboardInterrupt):
        # The reader went away or Ctrl-C: end quietly, as a loop is meant to be ended.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
