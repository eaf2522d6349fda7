"""The lab policy as every host of the inventory has it (`tfctl lab policy`, docs/policy.md).

Each host's agent reads its own policy file (remote/agent/policy.py, op `lab_policy`); here
they are put side by side: what each host enforces, which hosts' files are ignored and why, and
which hosts disagree with the rest (a host whose administrator forgot the file, or an old copy).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tfctl.remote.agent.policy import policy_words
from tfctl.remote.connect.fleet import Fleet
from tfctl.remote.connect.session import agentops


@dataclass(frozen=True)
class HostPolicy:
    """One host's policy: the file read, the policy in force (None: none), why the file is
    ignored, or why the host could not say (`error`)."""

    host: str
    path: str | None = None
    found: bool = False
    policy: dict[str, Any] | None = None
    ignored: str | None = None
    error: str | None = None

    @property
    def words(self) -> str:
        if self.error is not None:
            return f"unknown: {self.error}"
        if self.ignored is not None:
            return f"none in force: {self.ignored}"
        if self.policy is None:
            return "none (no policy file)"
        return policy_words(self.policy)

    def key(self) -> str:
        """What two hosts agree on when equal: the policy in force."""
        return json.dumps(self.policy, sort_keys=True)

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "path": self.path, "found": self.found,
                "policy": self.policy, "ignored": self.ignored, "error": self.error,
                "words": self.words}


def read_policies(fleet: Fleet) -> list[HostPolicy]:
    """Every host's policy, in the inventory's order: one `lab_policy` request each."""
    found = fleet.map(lambda t: agentops.lab_policy(t))
    out = []
    for host in fleet.inventory.hosts:
        answer = found.succeeded.get(host.name)
        if answer is None:
            out.append(HostPolicy(host.name, error=str(found.failed.get(host.name,
                                                                        "no answer"))))
        else:
            out.append(HostPolicy(host.name, answer.path, answer.found, answer.policy,
                                  answer.ignored))
    return out


def disagreeing(hosts: list[HostPolicy]) -> list[HostPolicy]:
    """The hosts whose policy in force differs from the one most hosts have (ties: the first
    host's); hosts that could not say are left out; pure."""
    known = [h for h in hosts if h.error is None]
    if len(known) < 2:
        return []
    counts = Counter(h.key() for h in known)
    best = max(counts.values())
    common = next(h.key() for h in known if counts[h.key()] == best)
    return [h for h in known if h.key() != common]


def disagreement_words(hosts: list[HostPolicy]) -> list[str]:
    """One sentence per host that disagrees with the others; pure."""
    odd = disagreeing(hosts)
    others = [h for h in hosts if h.error is None and h not in odd]
    if not odd or not others:
        return []
    common = others[0].words
    names = ", ".join(h.host for h in others)
    return [f"{h.host} disagrees with {names}: it has {h.words}; they have {common}"
            for h in odd]
