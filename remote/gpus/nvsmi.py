"""nvidia-smi query output → immutable records. Pure: no I/O, no clock, no subprocess.

Why a hand parser and not `csv`: nvidia-smi does no CSV quoting, so a comma inside a GPU or process
name splits a naive row. Every row has exactly one free-text column we care about (the GPU name, or
the process name); the other columns never hold a comma, so a row is read from both ends and the
surplus goes to the free-text column. nvidia-smi separates columns with ", ", which keeps a name
with a bare "," intact and lets a ", " inside a name be re-joined exactly.

Absent values (`[N/A]`, `[Not Supported]`, `[Insufficient Permissions]`, `[Unknown Error]`, any
`[...]`) become None, never 0. Values may carry units ("45 %", "1234 MiB", "70.00 W") when the query
was run without `nounits`; both forms parse. Errors come on stdout, so every line that is not a
row is classified as a host error (known NVML failure texts) or skipped (event text such as XID
messages between rows in `-lms` loop mode, blank lines, headers).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tfctl.remote.agent.nvfields import (
    NVSMI_APP_PROPERTIES,
    NVSMI_GPU_PROPERTIES,
    NVSMI_HOST_ERROR_MARKERS,
    nvsmi_choose,
    nvsmi_help_names,
)

# The wanted properties and their spellings live with the agent (`remote/agent/nvfields.py`),
# which the host's run recorder shares: one vocabulary for the client and the hosts.
_GPU_PROPERTIES = NVSMI_GPU_PROPERTIES
WANTED_GPU_FIELDS: tuple[tuple[str, ...], ...] = tuple(names for _, names in _GPU_PROPERTIES)
# Used before (or without) a `--help-query-gpu` probe: every driver with `--query-gpu` knows these.
BASE_GPU_FIELDS: tuple[str, ...] = tuple(names[0] for names in WANTED_GPU_FIELDS[:-1])

_APP_PROPERTIES = NVSMI_APP_PROPERTIES
WANTED_COMPUTE_APP_FIELDS: tuple[tuple[str, ...], ...] = tuple(n for _, n in _APP_PROPERTIES)
DEFAULT_COMPUTE_APP_FIELDS: tuple[str, ...] = tuple(n[0] for n in WANTED_COMPUTE_APP_FIELDS)

# Query property (any spelling) → record attribute.
_GPU_ATTR_BY_FIELD = {name: attr for attr, names in _GPU_PROPERTIES for name in names}
_APP_ATTR_BY_FIELD = {name: attr for attr, names in _APP_PROPERTIES for name in names}
_GPU_FREE_TEXT_FIELDS = frozenset({"name", "gpu_name"})
_APP_FREE_TEXT_FIELDS = frozenset({"process_name", "name"})

# Texts nvidia-smi prints on stdout instead of rows when the host (or one GPU) cannot be read.
HOST_ERROR_MARKERS: tuple[str, ...] = NVSMI_HOST_ERROR_MARKERS
NO_DEVICES_TEXT = "No devices were found"
NO_PROCESSES_TEXT = "No running processes found"

# Bits of `clocks_event_reasons.active` (NVML nvmlClocksEventReason*), in bit order.
_THROTTLE_REASONS_BY_BIT = (
    "gpu_idle applications_clocks_setting sw_power_cap hw_slowdown sync_boost sw_thermal_slowdown"
    " hw_thermal_slowdown hw_power_brake_slowdown display_clock_setting"
)
THROTTLE_REASON_BITS: tuple[tuple[int, str], ...] = tuple(
    (1 << bit, name) for bit, name in enumerate(_THROTTLE_REASONS_BY_BIT.split())
)

_SEPARATOR = ", "
_NUMBER_WITH_UNIT = re.compile(r"^([-+]?\d+(?:\.\d+)?)(?:\s*(?:%|MiB|GiB|KiB|W|C|MHz|ms|us))?$")
_UNIT_SUFFIX = re.compile(r"\s*\[[^\]]*\]$")
_GPU_UUID = re.compile(r"^(?:GPU|MIG)-[0-9A-Fa-f-]+$")


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one moment, as nvidia-smi reported it. None = not reported / not available."""

    uuid: str
    index: int | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    utilization_gpu_pct: float | None = None
    utilization_memory_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    fan_pct: float | None = None
    pstate: str | None = None
    throttle_reasons: str | None = None  # hex mask as printed, e.g. "0x0000000000000004"
    timestamp: str | None = None  # nvidia-smi's own "YYYY/MM/DD HH:MM:SS.mmm", host clock


NUMERIC_SAMPLE_ATTRS: frozenset[str] = frozenset(
    attr for attr, _ in _GPU_PROPERTIES if attr.endswith(("_pct", "_mib", "_c", "_w"))
)


@dataclass(frozen=True)
class GpuProcess:
    """One compute context on one GPU. A pid using two GPUs appears twice."""

    gpu_uuid: str
    pid: int
    used_memory_mib: float | None = None  # [N/A] on Windows/WDDM
    process_name: str | None = None


@dataclass(frozen=True)
class HostError:
    """A line nvidia-smi printed instead of rows: the host (or one of its GPUs) can't be read."""

    message: str

    @property
    def is_no_devices(self) -> bool:
        return NO_DEVICES_TEXT in self.message


@dataclass(frozen=True)
class ParseResult:
    """What one `--query-gpu` output held: rows in output order, host errors, ignored lines."""

    samples: tuple[GpuSample, ...] = ()
    errors: tuple[str, ...] = ()
    skipped_lines: tuple[str, ...] = ()

    @property
    def by_uuid(self) -> dict[str, GpuSample]:
        """Samples keyed by UUID (the index can change at boot; the UUID cannot)."""
        return {sample.uuid: sample for sample in self.samples}


# --- building the command ---------------------------------------------------------------------


def help_field_names(help_text: str) -> frozenset[str]:
    """Every property spelling a `--help-query-gpu` / `--help-query-compute-apps` text lists."""
    return nvsmi_help_names(help_text)


def supported_fields(
    help_query_text: str, wanted: Sequence[tuple[str, ...]] = WANTED_GPU_FIELDS
) -> tuple[str, ...]:
    """The wanted properties this driver knows, each in our preferred spelling among those listed.

    An unknown property fails the whole query, so probe the help once per host and query only
    these. Empty when the help lists nothing (an error text): fall back to BASE_GPU_FIELDS.
    """
    chosen = nvsmi_choose(wanted, help_field_names(help_query_text))
    return tuple(name for name in chosen if name is not None)


def _format_argv(with_units: bool, with_header: bool) -> str:
    parts = ["csv"] + ([] if with_header else ["noheader"]) + ([] if with_units else ["nounits"])
    return "--format=" + ",".join(parts)


def query_gpu_argv(
    fields: Sequence[str] = BASE_GPU_FIELDS,
    interval_ms: int | None = None,
    *,
    with_units: bool = False,
    with_header: bool = False,
) -> list[str]:
    """`nvidia-smi --query-gpu=... --format=csv,noheader,nounits [-lms N]`."""
    argv = ["nvidia-smi", "--query-gpu=" + ",".join(fields), _format_argv(with_units, with_header)]
    return argv + _loop_argv(interval_ms)


def query_compute_apps_argv(
    fields: Sequence[str] = DEFAULT_COMPUTE_APP_FIELDS,
    interval_ms: int | None = None,
    *,
    with_units: bool = False,
    with_header: bool = False,
) -> list[str]:
    """`nvidia-smi --query-compute-apps=... --format=csv,noheader,nounits [-lms N]`."""
    argv = ["nvidia-smi", "--query-compute-apps=" + ",".join(fields)]
    return [*argv, _format_argv(with_units, with_header), *_loop_argv(interval_ms)]


def _loop_argv(interval_ms: int | None) -> list[str]:
    if interval_ms is None:
        return []
    if interval_ms <= 0:
        raise ValueError(f"interval_ms must be positive, got {interval_ms}")
    return ["-lms", str(interval_ms)]


# --- reading values -------------------------------------------------------------------------


def is_absent(token: str) -> bool:
    """`[N/A]`, `[Not Supported]`, `[Insufficient Permissions]`, any `[...]`, or a bare N/A."""
    text = token.strip()
    return not text or (text.startswith("[") and text.endswith("]")) or text == "N/A"


def parse_number(token: str) -> float | None:
    """'45', '45 %', '1234 MiB', '70.00 W' → float; absent or malformed → None."""
    if is_absent(token):
        return None
    match = _NUMBER_WITH_UNIT.match(token.strip())
    return float(match.group(1)) if match else None


def parse_text(token: str) -> str | None:
    return None if is_absent(token) else token.strip()


def throttle_reason_names(mask: str | None) -> tuple[str, ...]:
    """'0x0000000000000005' → ('gpu_idle', 'sw_power_cap'); None or unreadable → ()."""
    if mask is None:
        return ()
    try:
        bits = int(mask, 16)
    except ValueError:
        return ()
    return tuple(name for bit, name in THROTTLE_REASON_BITS if bits & bit)


def is_host_error_line(line: str) -> bool:
    return any(marker in line for marker in HOST_ERROR_MARKERS)


def _is_header(tokens: Sequence[str], field_names: Sequence[str]) -> bool:
    """A `--format=csv` header: the property names, maybe with ' [unit]' after each."""
    if len(tokens) != len(field_names):
        return False
    matches = sum(_UNIT_SUFFIX.sub("", t) == f for t, f in zip(tokens, field_names, strict=True))
    return matches * 2 >= len(field_names)


def split_row(line: str, field_names: Sequence[str], free_text: frozenset[str]) -> list[str] | None:
    """Split one row into exactly len(field_names) tokens, or None if it can't be a row.

    Surplus tokens belong to the (single) free-text column, read from both ends of the line.
    """
    count = len(field_names)
    tokens = [t.strip() for t in line.split(_SEPARATOR)]
    if len(tokens) == count:
        return tokens
    free_positions = [i for i, name in enumerate(field_names) if name in free_text]
    if len(tokens) < count or len(free_positions) != 1:
        return None
    free = free_positions[0]
    tail_count = count - free - 1
    head = tokens[:free]
    tail = tokens[len(tokens) - tail_count :] if tail_count else []
    middle = _SEPARATOR.join(tokens[free : len(tokens) - tail_count])
    return [*head, middle, *tail]


# --- GPU rows -------------------------------------------------------------------------------


def _sample_from_tokens(field_names: Sequence[str], tokens: Sequence[str]) -> GpuSample | None:
    values: dict[str, object] = {}
    for name, token in zip(field_names, tokens, strict=True):
        attr = _GPU_ATTR_BY_FIELD.get(name)
        if attr is None or attr in values:
            continue
        if attr in NUMERIC_SAMPLE_ATTRS:
            values[attr] = parse_number(token)
        elif attr == "index":
            number = parse_number(token)
            values[attr] = int(number) if number is not None and number.is_integer() else None
        else:
            values[attr] = parse_text(token)
    uuid = values.get("uuid")
    if not isinstance(uuid, str) or not _GPU_UUID.match(uuid):
        return None
    return GpuSample(**values)  # type: ignore[arg-type]


class LoopParser:
    """Line-by-line parser for a long-lived `--query-gpu ... -lms N` stream.

    `feed(line)` returns a GpuSample for a row, a HostError for a failure text, and None for
    anything else (headers, blank lines, XID/ECC event text); the last ignored lines are kept
    in `skipped_lines` (bounded) for diagnostics.
    """

    def __init__(self, fields: Sequence[str], *, keep_skipped: int | None = 20) -> None:
        if not any(_GPU_ATTR_BY_FIELD.get(f) == "uuid" for f in fields):
            raise ValueError("the query must include uuid: samples are keyed by it")
        self.fields = tuple(fields)
        self._keep_skipped = keep_skipped
        self.skipped_lines: list[str] = []

    def feed(self, line: str) -> GpuSample | HostError | None:
        text = line.rstrip("\r\n")
        if not text.strip():
            return None
        tokens = split_row(text, self.fields, _GPU_FREE_TEXT_FIELDS)
        if tokens is not None and _is_header(tokens, self.fields):
            return None
        sample = _sample_from_tokens(self.fields, tokens) if tokens is not None else None
        if sample is not None:
            return sample
        if is_host_error_line(text):
            return HostError(text.strip())
        self.skipped_lines.append(text)
        if self._keep_skipped is not None and len(self.skipped_lines) > self._keep_skipped:
            del self.skipped_lines[: len(self.skipped_lines) - self._keep_skipped]
        return None


def parse_gpu_rows(text: str, fields: Sequence[str]) -> ParseResult:
    """Parse a whole `--query-gpu` output (one block, or several from a loop)."""
    parser = LoopParser(fields, keep_skipped=None)
    samples: list[GpuSample] = []
    errors: list[str] = []
    for line in text.splitlines():
        item = parser.feed(line)
        if isinstance(item, GpuSample):
            samples.append(item)
        elif isinstance(item, HostError):
            errors.append(item.message)
    return ParseResult(tuple(samples), tuple(errors), tuple(parser.skipped_lines))


# --- compute apps ---------------------------------------------------------------------------


def parse_compute_apps(
    text: str, fields: Sequence[str] = DEFAULT_COMPUTE_APP_FIELDS
) -> list[GpuProcess]:
    """Parse `--query-compute-apps` output. Header-only, empty, "No running processes found",
    error texts and malformed lines yield no process."""
    processes: list[GpuProcess] = []
    for line in text.splitlines():
        process = _process_from_line(line, fields)
        if process is not None:
            processes.append(process)
    return processes


def _process_from_line(line: str, field_names: Sequence[str]) -> GpuProcess | None:
    if not line.strip() or NO_PROCESSES_TEXT in line:
        return None
    tokens = split_row(line.rstrip("\r\n"), field_names, _APP_FREE_TEXT_FIELDS)
    if tokens is None or _is_header(tokens, field_names):
        return None
    values: dict[str, str] = {}
    for name, token in zip(field_names, tokens, strict=True):
        attr = _APP_ATTR_BY_FIELD.get(name)
        if attr is not None and attr not in values:
            values[attr] = token
    uuid = parse_text(values.get("gpu_uuid", ""))
    pid_text = values.get("pid", "").strip()
    if uuid is None or not _GPU_UUID.match(uuid) or not pid_text.isdigit():
        return None
    return GpuProcess(
        gpu_uuid=uuid,
        pid=int(pid_text),
        used_memory_mib=parse_number(values.get("used_memory_mib", "")),
        process_name=parse_text(values.get("process_name", "")),
    )


def processes_by_gpu(processes: Iterable[GpuProcess]) -> dict[str, tuple[GpuProcess, ...]]:
    """Group compute apps by GPU UUID, keeping output order."""
    grouped: dict[str, list[GpuProcess]] = {}
    for process in processes:
        grouped.setdefault(process.gpu_uuid, []).append(process)
    return {uuid: tuple(items) for uuid, items in grouped.items()}
