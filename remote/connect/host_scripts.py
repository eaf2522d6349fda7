"""The shell programs hosts run, read from `tfctl/remote/agent/*.sh` (read once, cached).

A program's `{{NAME}}` placeholders are filled by `render`; a program with `#@section NAME`
lines is a set of named parts (`sections`) that the caller joins, such as the setup program's
one part per command.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

_SECTION = re.compile(r"^#@section (\w+)\n", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@functools.cache
def host_script(name: str) -> str:
    """The text of `remote/agent/<name>`."""
    return resources.files("tfctl.remote.agent").joinpath(name).read_text()


@functools.cache
def sections(name: str) -> dict[str, str]:
    """`remote/agent/<name>` split at its `#@section NAME` lines, in order."""
    parts = _SECTION.split(host_script(name))
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def render(template: str, **values: object) -> str:
    """`template` with each `{{NAME}}` replaced by `values[NAME]` (a missing one is an error)."""
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)
