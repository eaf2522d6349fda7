"""nvidia-smi's query vocabulary: the properties tfctl asks for, each with every spelling a driver
may know, and how to tell which spellings a driver knows.

One list for the host's run recorder (`record.py`) and the client's live telemetry
(`tfctl.remote.gpus.nvsmi`), so the two cannot drift apart. Drivers renamed properties over the
years: `clocks_throttle_reasons.*` became `clocks_event_reasons.*` (newer drivers list both,
`"clocks_event_reasons.active" or "clocks_throttle_reasons.active"`, in `--help-query-gpu`; older
ones know only the old name and refuse the new one with `Field "clocks_event_reasons.active" is
not a valid field to query.`, failing the whole query). An unknown property fails the whole
query, so a query names each property in a spelling the driver listed.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8. The agent files are
joined into one module on the hosts, so every top-level name here carries `NVSMI`/`nvsmi`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence, Set

# Each wanted GPU property: the attribute it fills (GpuSample's, in `tfctl.remote.gpus.nvsmi`)
# and its spellings, preferred first.
NVSMI_GPU_PROPERTIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("timestamp", ("timestamp",)),
    ("index", ("index",)),
    ("uuid", ("uuid", "gpu_uuid")),
    ("name", ("name", "gpu_name")),
    ("pci_bus_id", ("pci.bus_id", "gpu_bus_id")),
    ("utilization_gpu_pct", ("utilization.gpu",)),
    ("utilization_memory_pct", ("utilization.memory",)),
    ("memory_used_mib", ("memory.used",)),
    ("memory_total_mib", ("memory.total",)),
    ("temperature_c", ("temperature.gpu",)),
    ("power_draw_w", ("power.draw",)),
    ("power_limit_w", ("power.limit",)),
    ("fan_pct", ("fan.speed",)),
    ("pstate", ("pstate",)),
    ("throttle_reasons", ("clocks_event_reasons.active", "clocks_throttle_reasons.active")),
)
# Each wanted compute-app property; the process name last, the one column that may hold commas.
NVSMI_APP_PROPERTIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gpu_uuid", ("gpu_uuid",)),
    ("pid", ("pid",)),
    ("used_memory_mib", ("used_memory", "used_gpu_memory")),
    ("process_name", ("process_name", "name")),
)

# What the run recorder keeps per GPU per second, in `gpu.csv`'s column order (after the time).
NVSMI_RECORD_ATTRS: tuple[str, ...] = (
    "index", "utilization_gpu_pct", "memory_used_mib", "temperature_c", "power_draw_w",
    "throttle_reasons",
)

# Texts nvidia-smi prints on stdout instead of rows when the host (or one GPU) cannot be read.
NVSMI_HOST_ERROR_MARKERS: tuple[str, ...] = (
    "Failed to initialize NVML",
    "Driver/library version mismatch",
    "NVML library version",
    "No devices were found",
    "NVIDIA-SMI has failed",
    "couldn't communicate with the NVIDIA driver",
    "Unable to determine the device handle",
    "is not a valid field to query",
    "GPU is lost",
    "fallen off the bus",
)

# Patterns as text, compiled (and cached) by `re` where used: the agent imports `re` on first use.
_NVSMI_HELP_FIELD_LINE = r'^"([A-Za-z_][\w.]*)"(?:\s+or\s+"[A-Za-z_][\w.]*")*\s*$'
_NVSMI_HELP_FIELD_NAME = r'"([A-Za-z_][\w.]*)"'
_NVSMI_REFUSED_FIELD = r'Field "([^"]+)" is not a valid field to query'


def nvsmi_spellings(attr: str,
                    properties: Sequence[tuple[str, tuple[str, ...]]] = NVSMI_GPU_PROPERTIES
                    ) -> tuple[str, ...]:
    """The spellings of the property that fills `attr`, preferred first."""
    for name, spellings in properties:
        if name == attr:
            return spellings
    raise KeyError(attr)


def nvsmi_help_names(help_text: str) -> frozenset[str]:
    """Every property spelling a `--help-query-gpu` / `--help-query-compute-apps` text lists."""
    names = set()
    for line in help_text.splitlines():
        if re.match(_NVSMI_HELP_FIELD_LINE, line.strip()):
            names.update(re.findall(_NVSMI_HELP_FIELD_NAME, line))
    return frozenset(names)


def nvsmi_choose(wanted: Sequence[tuple[str, ...]], known: Set[str]
                 ) -> tuple[str | None, ...]:
    """For each wanted property (its spellings), the first spelling the driver knows, or None
    where it knows none of them."""
    return tuple(next((name for name in spellings if name in known), None)
                 for spellings in wanted)


def nvsmi_refused_field(output: str) -> str | None:
    """The property a query was refused for (`Field "x" is not a valid field to query.`)."""
    match = re.search(_NVSMI_REFUSED_FIELD, output)
    return match.group(1) if match else None


def nvsmi_next_spelling(refused: str, properties: Sequence[tuple[str, tuple[str, ...]]]
                        = NVSMI_GPU_PROPERTIES) -> str | None:
    """The spelling to try after `refused` was refused, or None when it was the last one."""
    for _, spellings in properties:
        if refused in spellings:
            later = spellings[spellings.index(refused) + 1:]
            return later[0] if later else None
    return None


def nvsmi_error_line(output: str) -> str | None:
    """The first line of an nvidia-smi output that says the host (or a query) failed."""
    for line in output.splitlines():
        if any(marker in line for marker in NVSMI_HOST_ERROR_MARKERS):
            return line.strip()
    return None
