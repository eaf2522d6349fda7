"""`up --wait` and `wait` end with the story `status` tells (tui/cli/failures.py): the task that
failed first, its last lines and the hint, then the exit status. The job dies as Keras 2 code
does under Keras 3 (the metric's `reset_states` is gone), without TensorFlow."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.localcluster import local_cluster, run_tfctl
from tests.support.testbedtools import processes_of_run

DIES_LIKE_KERAS_3 = '''import json, os, socket, time
cfg = json.loads(os.environ["TF_CONFIG"])
me = cfg["cluster"][cfg["task"]["type"]][cfg["task"]["index"]]
server = socket.socket()  # serving, as a TensorFlow task does: up sees it start
server.bind(("0.0.0.0", int(me.rsplit(":", 1)[1])))
server.listen()
print("epoch 0: loss 0.6123", flush=True)
time.sleep(3)
class SparseCategoricalAccuracy:
    pass
SparseCategoricalAccuracy().reset_states()
'''


def test_up_wait_and_wait_tell_the_failed_task_its_lines_and_the_hint(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {"ps": 0}},
                        job={"script": "dies.py", "style": "tf_config", "args": []})
    (inv.parent / "dies.py").write_text(DIES_LIKE_KERAS_3)
    up = run_tfctl(inv, "up", "--wait")
    assert up.returncode == 1, up.stdout + up.stderr
    run_id = up.stdout.split("run ", 1)[1].split()[0]
    told = up.stderr.splitlines()
    start = told.index("worker:0 on a failed first (exited 1); its log says:")
    story = told[start:]
    assert "  worker:0 | epoch 0: loss 0.6123" in story
    assert ("  worker:0 | AttributeError: 'SparseCategoricalAccuracy' object has no attribute "
            "'reset_states'") in story
    assert any(line.startswith("  hint: ") and "`job.keras: legacy`" in line for line in story)
    assert story[-1] == f"tfctl: run {run_id} finished with exit status 1"
    assert "Traceback (most recent" not in "\n".join(told[:start])

    again = run_tfctl(inv, "wait", "--json")
    assert again.returncode == 1, again.stderr
    first = json.loads(again.stdout)["failed_first"]
    assert (first["task"], first["host"], first["state"], first["exit_code"]) == (
        "worker:0", "a", "exited 1", 1)
    assert any("reset_states" in line for line in first["lines"])
    assert "job.keras: legacy" in first["hint"]
    assert "failed first (exited 1)" in again.stderr
    assert processes_of_run(run_id) == {}
