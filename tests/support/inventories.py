"""Inventory texts the tests share, and a way to write one from its hosts and job."""

from __future__ import annotations

import textwrap


def yaml_text(hosts: str, job: str) -> str:
    """An inventory with `hosts` (YAML list items) and `job` (YAML mapping lines)."""
    return (f"name: lab\nhosts:\n{textwrap.indent(textwrap.dedent(hosts).strip(), '  ')}\n"
            f"job:\n  script: train.py\n{textwrap.indent(textwrap.dedent(job).strip(), '  ')}\n")


TITAN_GTX = """
- name: titan
  gpus: 4
- name: gtx970
  gpus: [0]
"""
"""Two hosts of unequal GPUs: titan with four, gtx970 with one (its GPU 0)."""
