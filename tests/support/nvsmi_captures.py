"""The real nvidia-smi captures (tests/support/data/nvidia-smi/, MIT, see its README), read as
sections headed by the exact command that printed them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CAPTURES = sorted((Path(__file__).parent / "data" / "nvidia-smi").glob("*.txt"))
BANNER = "#" * 80


@dataclass(frozen=True)
class Section:
    capture: str
    title: str
    command: str
    body: str

    @property
    def query_fields(self) -> list[str]:
        match = re.search(r"--query-[a-z-]+=(\S+)", self.command)
        assert match, self.command
        return match.group(1).split(",")

    @property
    def data_lines(self) -> list[str]:
        """Non-blank lines after the CSV header (these sections all use --format=csv)."""
        lines = [line for line in self.body.splitlines() if line.strip()]
        assert lines and lines[0].startswith(self.query_fields[0]), lines[:1]
        return lines[1:]


def read_sections(path: Path) -> list[Section]:
    """Split a capture into (title, command, body) by its banner lines."""
    lines = path.read_text(encoding="utf-8").split("\n")
    sections = []
    for i, line in enumerate(lines):
        if line.startswith("# $ nvidia-smi") and lines[i + 1] == BANNER:
            end = next((j for j in range(i + 2, len(lines)) if lines[j] == BANNER), len(lines))
            body = "\n".join(lines[i + 2 : end])
            sections.append(Section(path.name, lines[i - 1][2:], line[4:], body))
    return sections


def sections_of(command_prefix: str) -> list[Section]:
    found = [s for p in CAPTURES for s in read_sections(p) if s.command.startswith(command_prefix)]
    assert found, command_prefix
    return found


def section_id(section: Section) -> str:
    return f"{section.capture}:{section.title}"
