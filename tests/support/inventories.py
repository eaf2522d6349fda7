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


PS_JOB = """
name: lab
hosts:
  - {name: h1, gpus: 2, ps: 1}
  - {name: h2, gpus: 1, ps: 0}
  - {name: h3, gpus: 1, ps: 0}
job:
  script: train.py
  strategy: parameter_server
  chief: h2
  evaluator: {host: h3, script: eval.py}
  tensorboard: {host: h3}
"""
"""Three hosts under ParameterServerStrategy with a chief, an evaluator and TensorBoard: what
`--only` and `--exclude` choose from (tests/cli/test_only_exclude.py and
tests/unit/test_inventory_subset.py)."""
