"""remote/agent/nvfields.py: the one nvidia-smi vocabulary of the run recorder and the live
telemetry, read against the real `--help-query-gpu` texts (tests/support/data/nvidia-smi) and
against the stand-in playing a driver from before the `clocks_event_reasons` rename."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.fakes import NVIDIA_SMI_STANDIN
from tests.support.nvsmi_captures import Section, section_id, sections_of
from tfctl.remote.agent.nvfields import (
    NVSMI_GPU_PROPERTIES,
    NVSMI_RECORD_ATTRS,
    nvsmi_choose,
    nvsmi_error_line,
    nvsmi_help_names,
    nvsmi_next_spelling,
    nvsmi_refused_field,
    nvsmi_spellings,
)
from tfctl.remote.gpus import nvsmi

RECORDED = [nvsmi_spellings(attr) for attr in NVSMI_RECORD_ATTRS]
# nvidia-smi's words for a property it does not know (an older driver; the stand-in).
REFUSAL = 'Field "clocks_event_reasons.active" is not a valid field to query.'


def test_the_client_reads_the_agents_vocabulary() -> None:
    assert tuple(names for _, names in NVSMI_GPU_PROPERTIES) == nvsmi.WANTED_GPU_FIELDS
    assert ("clocks_event_reasons.active", "clocks_throttle_reasons.active") in \
        nvsmi.WANTED_GPU_FIELDS


@pytest.mark.parametrize("section", sections_of("nvidia-smi --help-query-gpu"), ids=section_id)
def test_newer_drivers_list_both_spellings_and_get_the_new_one(section: Section) -> None:
    known = nvsmi_help_names(section.body)
    assert {"clocks_event_reasons.active", "clocks_throttle_reasons.active"} <= known
    assert nvsmi_choose(RECORDED, known) == tuple(s[0] for s in RECORDED)


def _standin_help(driver: str) -> str:
    env = {"TFCTL_TEST_NVSMI_DRIVER": driver, "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, str(NVIDIA_SMI_STANDIN), "--help-query-gpu"],
                          capture_output=True, text=True, env=env, check=True).stdout


def test_an_old_driver_lists_only_the_old_name_and_gets_it() -> None:
    known = nvsmi_help_names(_standin_help("old"))
    assert "clocks_event_reasons.active" not in known
    assert nvsmi_choose(RECORDED, known)[-1] == "clocks_throttle_reasons.active"
    assert nvsmi.supported_fields(_standin_help("old"))[-1] == "clocks_throttle_reasons.active"


def test_a_refusal_names_the_field_and_its_next_spelling() -> None:
    assert nvsmi_refused_field(REFUSAL) == "clocks_event_reasons.active"
    assert nvsmi_next_spelling("clocks_event_reasons.active") == "clocks_throttle_reasons.active"
    assert nvsmi_next_spelling("clocks_throttle_reasons.active") is None
    assert nvsmi_refused_field("0, 45, 1234") is None
    assert nvsmi_error_line(f"\n{REFUSAL}\n") == REFUSAL
    assert nvsmi_error_line("0, 45, 1234") is None
