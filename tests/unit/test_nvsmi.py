"""tfctl.remote.gpus.nvsmi and lastseen against real nvidia-smi captures and synthesized edge cases.

The captures (tests/support/data/nvidia-smi/, MIT, see its README) hold sections headed by the exact
command. Their query sections were run with `--format=csv` (header and units) over a long field
list; the parser is given that same field list and must agree with the file row by row.
"""

from __future__ import annotations

import pytest

from tests.support.nvsmi_captures import (
    CAPTURES,
    Section,
    section_id,
    sections_of,
)
from tfctl.remote.gpus.lastseen import GpuHistory, HostTelemetry, TelemetryState
from tfctl.remote.gpus.nvsmi import (
    BASE_GPU_FIELDS,
    DEFAULT_COMPUTE_APP_FIELDS,
    NUMERIC_SAMPLE_ATTRS,
    WANTED_COMPUTE_APP_FIELDS,
    GpuProcess,
    GpuSample,
    HostError,
    LoopParser,
    help_field_names,
    parse_compute_apps,
    parse_gpu_rows,
    processes_by_gpu,
    query_compute_apps_argv,
    query_gpu_argv,
    supported_fields,
    throttle_reason_names,
)

# Query property → GpuSample attribute, written out here independently of the module's table.
ATTR_OF_FIELD = {
    "timestamp": "timestamp",
    "index": "index",
    "uuid": "uuid",
    "name": "name",
    "pci.bus_id": "pci_bus_id",
    "utilization.gpu": "utilization_gpu_pct",
    "utilization.memory": "utilization_memory_pct",
    "memory.used": "memory_used_mib",
    "memory.total": "memory_total_mib",
    "temperature.gpu": "temperature_c",
    "power.draw": "power_draw_w",
    "power.limit": "power_limit_w",
    "fan.speed": "fan_pct",
    "pstate": "pstate",
    "clocks_event_reasons.active": "throttle_reasons",
}
ALL_WANTED_NEW_DRIVER = (*BASE_GPU_FIELDS, "clocks_event_reasons.active")


GPU_QUERY_SECTIONS = sections_of("nvidia-smi --query-gpu=")
APP_QUERY_SECTIONS = sections_of("nvidia-smi --query-compute-apps=")
HELP_GPU_SECTIONS = sections_of("nvidia-smi --help-query-gpu")
HELP_APP_SECTIONS = sections_of("nvidia-smi --help-query-compute-apps")


def test_all_ten_captures_have_query_sections() -> None:
    assert len(CAPTURES) == 10
    assert {s.capture for s in GPU_QUERY_SECTIONS} == {p.name for p in CAPTURES}
    assert {s.capture for s in APP_QUERY_SECTIONS} == {p.name for p in CAPTURES}
    assert len(GPU_QUERY_SECTIONS) == 20 and len(APP_QUERY_SECTIONS) == 20


# --- every --query-gpu section ----------------------------------------------------------------


@pytest.mark.parametrize("section", GPU_QUERY_SECTIONS, ids=section_id)
def test_every_gpu_row_equals_the_file(section: Section) -> None:
    fields = section.query_fields
    result = parse_gpu_rows(section.body, fields)
    assert result.errors == () and result.skipped_lines == ()
    assert len(result.samples) == len(section.data_lines) >= 1
    for sample, line in zip(result.samples, section.data_lines, strict=True):
        tokens = line.split(", ")
        assert len(tokens) == len(fields)  # no commas inside values in these captures
        for field, attr in ATTR_OF_FIELD.items():
            token, value = tokens[fields.index(field)], getattr(sample, attr)
            if token.startswith("["):
                assert value is None, (field, token)
            elif attr in NUMERIC_SAMPLE_ATTRS:
                assert value == float(token.split(" ")[0]), (field, token)
            elif attr == "index":
                assert value == int(token)
            else:
                assert value == token


@pytest.mark.parametrize("section", GPU_QUERY_SECTIONS, ids=section_id)
def test_throttle_mask_decodes_like_the_per_reason_columns(section: Section) -> None:
    fields = section.query_fields
    (sample,) = parse_gpu_rows(section.body, fields).samples
    tokens = dict(zip(fields, section.data_lines[0].split(", "), strict=True))
    active_by_column = {
        field.split(".", 1)[1]
        for field, token in tokens.items()
        if field.startswith("clocks_event_reasons.") and token == "Active"
    }
    assert set(throttle_reason_names(sample.throttle_reasons)) == active_by_column


KNOWN_ROWS = [
    # (capture, title start, attribute values read by hand from the file)
    (
        "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt",
        "load",
        dict(
            utilization_gpu_pct=100.0,
            memory_used_mib=19818.0,
            memory_total_mib=81559.0,
            power_draw_w=631.95,
            power_limit_w=700.0,
            fan_pct=None,
            pstate="P0",
            temperature_c=59.0,
            name="NVIDIA H100 80GB HBM3",
            pci_bus_id="00000000:00:09.0",
        ),
    ),
    (
        "linux-x86_64__nvidia-h100-mig__590.48.01.txt",
        "idle",
        dict(
            utilization_gpu_pct=None,
            utilization_memory_pct=None,
            memory_used_mib=59.0,
            power_draw_w=71.15,
            timestamp="2026/07/14 09:00:27.792",
        ),
    ),
    (
        "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt",
        "idle",
        dict(fan_pct=0.0, utilization_memory_pct=23.0, memory_total_mib=16376.0, pstate="P8"),
    ),
    (
        "linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt",
        "idle",
        dict(power_draw_w=39.32, fan_pct=38.0, throttle_reasons="0x0000000000000004", index=0),
    ),
    (
        "windows-x86_64__nvidia-geforce-rtx-2080-super__591.86.txt",
        "load",
        dict(memory_used_mib=1296.0, utilization_gpu_pct=7.0, power_draw_w=97.43, fan_pct=38.0),
    ),
]


@pytest.mark.parametrize(("capture", "title", "expected"), KNOWN_ROWS)
def test_known_values_read_by_hand(capture: str, title: str, expected: dict[str, object]) -> None:
    (section,) = [
        s for s in GPU_QUERY_SECTIONS if s.capture == capture and s.title.startswith(title)
    ]
    (sample,) = parse_gpu_rows(section.body, section.query_fields).samples
    assert {attr: getattr(sample, attr) for attr in expected} == expected


# --- every --query-compute-apps section -------------------------------------------------------


@pytest.mark.parametrize("section", APP_QUERY_SECTIONS, ids=section_id)
def test_every_compute_app_row_equals_the_file(section: Section) -> None:
    fields = section.query_fields
    processes = parse_compute_apps(section.body, fields)
    assert len(processes) == len(section.data_lines)
    for process, line in zip(processes, section.data_lines, strict=True):
        tokens = dict(zip(fields, line.split(", "), strict=True))
        assert process.gpu_uuid == tokens["gpu_uuid"]
        assert process.pid == int(tokens["pid"])
        assert process.process_name == tokens["process_name"]
        memory = tokens["used_gpu_memory"]
        expected = None if memory == "[N/A]" else float(memory.removesuffix(" MiB"))
        assert process.used_memory_mib == expected


def test_known_compute_apps_read_by_hand() -> None:
    (h100,) = [
        s
        for s in APP_QUERY_SECTIONS
        if s.capture.startswith("linux-x86_64__nvidia-h100-80gb") and s.title.startswith("load")
    ]
    processes = parse_compute_apps(h100.body, h100.query_fields)
    assert [(p.pid, p.used_memory_mib, p.process_name) for p in processes] == [
        (11327, 2566.0, "/root/tools/memhog"),
        (11328, 1542.0, "/root/tools/memhog"),
        (11345, 15690.0, "./gpu_burn"),
    ]
    windows = next(s for s in APP_QUERY_SECTIONS if s.capture.startswith("windows-x86_64"))
    by_pid = {p.pid: p for p in parse_compute_apps(windows.body, windows.query_fields)}
    assert by_pid[20372].process_name == r"C:\Program Files\NZXT CAM\NZXT CAM.exe"
    assert by_pid[20372].used_memory_mib is None  # WDDM: the driver doesn't own the memory


def test_idle_captures_with_header_only_have_no_processes() -> None:
    header_only = [s for s in APP_QUERY_SECTIONS if not s.data_lines]
    assert len(header_only) >= 5
    for section in header_only:
        assert parse_compute_apps(section.body, section.query_fields) == []


# --- help texts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("section", HELP_GPU_SECTIONS, ids=section_id)
def test_help_lists_every_field_the_capture_queried(section: Section) -> None:
    names = help_field_names(section.body)
    (query,) = [s for s in GPU_QUERY_SECTIONS if s.capture == section.capture][:1]
    assert set(query.query_fields) <= names
    assert {"gpu_name", "clocks_throttle_reasons.active"} <= names  # aliases are listed too
    assert not [n for n in names if " " in n or ":" in n]  # "0: Default" lines are prose
    assert supported_fields(section.body) == ALL_WANTED_NEW_DRIVER


@pytest.mark.parametrize("section", HELP_APP_SECTIONS, ids=section_id)
def test_compute_app_help_supports_the_default_fields(section: Section) -> None:
    assert supported_fields(section.body, WANTED_COMPUTE_APP_FIELDS) == DEFAULT_COMPUTE_APP_FIELDS


def test_old_driver_gets_the_old_throttle_spelling_and_missing_fields_dropped() -> None:
    old_help = (
        "\n".join(f'"{name}"\nSome text.\n' for name in ("index", "uuid", "name", "memory.used"))
        + '\n"clocks_throttle_reasons.active"\nBitmask.\n'
    )
    assert supported_fields(old_help) == (
        "index",
        "uuid",
        "name",
        "memory.used",
        "clocks_throttle_reasons.active",
    )
    assert supported_fields("Failed to initialize NVML: Unknown Error") == ()


# --- command lines --------------------------------------------------------------------------


def test_query_argv() -> None:
    assert query_gpu_argv(("index", "uuid")) == [
        "nvidia-smi",
        "--query-gpu=index,uuid",
        "--format=csv,noheader,nounits",
    ]
    assert query_gpu_argv(("uuid",), 1000)[-2:] == ["-lms", "1000"]
    assert query_gpu_argv(("uuid",), with_units=True, with_header=True)[-1] == "--format=csv"
    assert query_compute_apps_argv() == [
        "nvidia-smi",
        "--query-compute-apps=gpu_uuid,pid,used_memory,process_name",
        "--format=csv,noheader,nounits",
    ]
    with pytest.raises(ValueError):
        query_gpu_argv(("uuid",), 0)


# --- synthesized edge cases -----------------------------------------------------------------

FIELDS = (*BASE_GPU_FIELDS, "clocks_event_reasons.active")
UUID0 = "GPU-11111111-2222-3333-4444-555555555555"
UUID1 = "GPU-66666666-7777-8888-9999-000000000000"


def row(uuid: str = UUID0, name: str = "NVIDIA TITAN X (Pascal)", **overrides: str) -> str:
    values = {
        "timestamp": "2024/01/02 03:04:05.678",
        "index": "0",
        "uuid": uuid,
        "name": name,
        "pci.bus_id": "00000000:02:00.0",
        "utilization.gpu": "31",
        "utilization.memory": "12",
        "memory.used": "1234",
        "memory.total": "12288",
        "temperature.gpu": "70",
        "power.draw": "120.55",
        "power.limit": "250.00",
        "fan.speed": "45",
        "pstate": "P2",
        "clocks_event_reasons.active": "0x0000000000000000",
    }
    values.update({key.replace("_", "."): value for key, value in overrides.items()})
    return ", ".join(values[f] for f in FIELDS)


@pytest.mark.parametrize(
    "name", ["NVIDIA TITAN X, Pascal", "A, B, C", "Odd,no-space", "Trailing, ", ", leading"]
)
def test_gpu_names_with_commas_parse_from_both_ends(name: str) -> None:
    (sample,) = parse_gpu_rows(row(name=name.strip()), FIELDS).samples
    assert sample.name == name.strip()
    assert (sample.pci_bus_id, sample.memory_used_mib, sample.uuid) == (
        "00000000:02:00.0",
        1234.0,
        UUID0,
    )
    assert sample.throttle_reasons == "0x0000000000000000"


@pytest.mark.parametrize(
    "token",
    [
        "[N/A]",
        "[Not Supported]",
        "[Insufficient Permissions]",
        "[Unknown Error]",
        "[GPU requires reset]",
    ],
)
def test_bracketed_values_are_none_never_zero(token: str) -> None:
    line = row(power_draw=token, fan_speed=token, utilization_gpu=token, pstate=token)
    (sample,) = parse_gpu_rows(line, FIELDS).samples
    assert (sample.power_draw_w, sample.fan_pct, sample.utilization_gpu_pct) == (None, None, None)
    assert sample.pstate is None
    assert sample.memory_used_mib == 1234.0


def test_values_with_units_parse_like_without() -> None:
    with_units = row(memory_used="1234 MiB", utilization_gpu="31 %", power_draw="120.55 W")
    assert parse_gpu_rows(with_units, FIELDS).samples == parse_gpu_rows(row(), FIELDS).samples


def test_header_lines_are_ignored_anywhere() -> None:
    header = ", ".join(f"{f} [MiB]" if f.startswith("memory") else f for f in FIELDS)
    result = parse_gpu_rows("\n".join([header, row(), header, row(UUID1)]), FIELDS)
    assert [s.uuid for s in result.samples] == [UUID0, UUID1]
    assert result.skipped_lines == ()
    assert set(result.by_uuid) == {UUID0, UUID1}


@pytest.mark.parametrize(
    "text",
    [
        "Failed to initialize NVML: Driver/library version mismatch",
        "No devices were found",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.",
        'Field "clocks_event_reasons.active" is not a valid field to query.',
    ],
)
def test_host_error_texts(text: str) -> None:
    result = parse_gpu_rows(text + "\n", FIELDS)
    assert result.samples == () and result.errors == (text,)


def test_one_lost_gpu_beside_a_good_one() -> None:
    lost = "Unable to determine the device handle for GPU0000:03:00.0: Unknown Error"
    result = parse_gpu_rows(f"{row()}\n{lost}\n", FIELDS)
    assert [s.uuid for s in result.samples] == [UUID0] and result.errors == (lost,)
    telemetry = HostTelemetry.from_parse("h1", result, at_s=10.0)
    assert telemetry.state(now=10.0) is TelemetryState.ERROR and len(telemetry.gpus) == 1


def test_loop_mode_stream_with_interleaved_event_text() -> None:
    xid = "NVRM: Xid (PCI:0000:02:00): 13, pid=4242, name=python3, Graphics SM Warp Exception"
    stream = [row(), row(UUID1), "", xid, row(), row(UUID1), "NVML library version: 535.129"]
    parser = LoopParser(FIELDS, keep_skipped=1)
    fed = [parser.feed(line + "\n") for line in stream]
    assert [f.uuid if isinstance(f, GpuSample) else f for f in fed[:3]] == [UUID0, UUID1, None]
    assert fed[3] is None and parser.skipped_lines == [xid]
    assert isinstance(fed[-1], HostError)
    # A few-field query: the event line's commas could fill the columns, but it has no UUID.
    assert LoopParser(("index", "uuid", "name")).feed(xid) is None
    with pytest.raises(ValueError):
        LoopParser(("index", "name"))


def test_compute_apps_edge_cases() -> None:
    fields = DEFAULT_COMPUTE_APP_FIELDS
    header = "gpu_uuid, pid, used_memory [MiB], process_name"
    assert parse_compute_apps("", fields) == []
    assert parse_compute_apps(header + "\n", fields) == []
    assert parse_compute_apps("No running processes found\n", fields) == []
    text = (
        f"{UUID0}, 4242, 1500, python3 train.py, --flag=a,b\n"
        f"{UUID1}, 4242, [N/A], /opt/my app/bin/x\n"
        "Failed to initialize NVML: Unknown Error\n"
    )
    assert parse_compute_apps(text, fields) == [
        GpuProcess(UUID0, 4242, 1500.0, "python3 train.py, --flag=a,b"),
        GpuProcess(UUID1, 4242, None, "/opt/my app/bin/x"),
    ]
    grouped = processes_by_gpu(parse_compute_apps(text, fields))
    assert {uuid: [p.pid for p in ps] for uuid, ps in grouped.items()} == {
        UUID0: [4242],
        UUID1: [4242],
    }


# --- history and host snapshots -------------------------------------------------------------


def test_history_is_a_bounded_ring_per_host_and_gpu() -> None:
    history = GpuHistory(length=3)
    for second in range(5):
        result = parse_gpu_rows(row(utilization_gpu=str(second * 10)), FIELDS)
        history.record("h1", result.samples, at_s=float(second))
    history.record("h2", parse_gpu_rows(row(), FIELDS).samples, at_s=9.0)
    assert [t.at_s for t in history.recent("h1", UUID0)] == [2.0, 3.0, 4.0]
    assert history.series("h1", UUID0, "utilization_gpu_pct") == (20.0, 30.0, 40.0)
    assert history.series("h1", UUID0, "utilization_gpu_pct", last=2) == (30.0, 40.0)
    assert history.series("h1", UUID0, "utilization_gpu_pct", last=9) == (20.0, 30.0, 40.0)
    assert history.latest("h2", UUID0) is not None
    assert set(history.keys()) == {("h1", UUID0), ("h2", UUID0)}
    history.forget_host("h1")
    assert history.recent("h1", UUID0) == () and history.latest("h1", UUID0) is None
    with pytest.raises(ValueError):
        history.series("h2", UUID0, "pstate")


def test_host_states_over_time() -> None:
    ok = HostTelemetry.from_parse("h1", parse_gpu_rows(row(), FIELDS), at_s=100.0)
    assert ok.state(now=101.0) is TelemetryState.OK and ok.staleness_s(101.0) == 1.0
    assert ok.state(now=200.0) is TelemetryState.STALE
    assert ok.state(now=103.0, stale_after_s=2.0) is TelemetryState.STALE
    failed = ok.with_error("ssh: connection refused")
    assert failed.state(now=101.0) is TelemetryState.ERROR and failed.gpus == ok.gpus
    never = HostTelemetry("h2")
    assert never.state(now=0.0) is TelemetryState.STALE and never.staleness_s(0.0) is None


def test_no_devices_is_a_gpu_less_host_and_nvml_failure_is_an_error() -> None:
    no_devices = parse_gpu_rows("No devices were found\n", FIELDS)
    empty = HostTelemetry.from_parse("h1", no_devices, at_s=5.0)
    assert empty.state(now=5.0) is TelemetryState.NO_GPUS and empty.error is None
    text = "Failed to initialize NVML: Driver/library version mismatch\n"
    broken = HostTelemetry.from_parse("h1", parse_gpu_rows(text, FIELDS), at_s=5.0)
    assert broken.state(now=5.0) is TelemetryState.ERROR
    assert broken.error == text.strip() and broken.last_sample_at is None


def test_unreadable_numbers_are_none_not_zero() -> None:
    (sample,) = parse_gpu_rows(row(memory_used="lots", power_draw="12 apples"), FIELDS).samples
    assert (sample.memory_used_mib, sample.power_draw_w) == (None, None)
    assert sample.memory_total_mib == 12288.0
