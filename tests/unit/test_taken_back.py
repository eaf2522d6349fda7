"""What `status` says of tasks a new keeper took back from one that was killed (agent/keeper.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tfctl.remote.runs.status import taken_back_words


@pytest.mark.parametrize(("taken", "said"), [
    ({"tasks": ["ps:1", "worker:1"], "keeper_pid": 977, "gone_pid": 812},
     "on h2 the run's keeper (pid 812) was gone: ps:1, worker:1 run on, taken back by a new "
     "keeper (pid 977)"),
    ({"tasks": ["worker:1"], "keeper_pid": None, "gone_pid": None},  # a keeper still starting
     "on h2 the run's keeper was gone: worker:1 run on, taken back by a new keeper"),
])
def test_taken_back_words(taken: dict[str, Any], said: str) -> None:
    assert taken_back_words("h2", taken) == said
