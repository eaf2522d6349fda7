"""TensorFlow's start-up notices folded where a run is followed (remote/runs/notices.py): `logs -f`
shows one line per task for them, `logs` every line as written, and `status` the last line a
task said of its own. The tasks print the notices as TensorFlow 2.21 does (on stderr, before
their first line), without TensorFlow."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.localcluster import local_cluster, run_tfctl
from tests.support.testbedtools import wait_until
from tfctl.remote.runs.notices import FOLDED

ABSL = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
GREETS_LIKE_TENSORFLOW = f'''import json, os, socket, sys, time
sys.stderr.write({ABSL!r} + "\\n")
sys.stderr.write("I0000 00:00:1795780454.396911   31135 cpu_feature_guard.cc:227] This "
                 "TensorFlow binary is optimized to use available CPU instructions in "
                 "performance-critical operations.\\n")
sys.stderr.flush()
cfg = json.loads(os.environ["TF_CONFIG"])
me = cfg["task"]["type"] + ":" + str(cfg["task"]["index"])
server = socket.socket()
server.bind(("0.0.0.0", int(cfg["cluster"][cfg["task"]["type"]][cfg["task"]["index"]]
                            .rsplit(":", 1)[1])))
server.listen()
print(me, "serving", flush=True)
time.sleep(0.5)
sys.stderr.write("I0000 00:00:1795780455.1   31135 port.cc:153] oneDNN custom operations are "
                 "on. You may see slightly different numerical results.\\n")
sys.stderr.flush()
while True:
    time.sleep(1)
'''


def test_logs_follow_folds_the_notices_and_logs_keeps_them(tmp_path: Path) -> None:
    inv = local_cluster(tmp_path, {"a": {"ps": 1}},
                        job={"script": "greets.py", "style": "tf_config", "args": []})
    (inv.parent / "greets.py").write_text(GREETS_LIKE_TENSORFLOW)
    up = run_tfctl(inv, "up")
    assert up.returncode == 0, up.stdout + up.stderr
    follow = subprocess.Popen([sys.executable, "-m", "tfctl.tui", "-i", str(inv), "logs", "-f"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=inv.parent)
    shown: list[str] = []
    threading.Thread(target=lambda: shown.extend(follow.stdout or ()), daemon=True).start()
    try:
        def oned_nn_printed() -> bool:
            written = run_tfctl(inv, "logs").stdout  # every line, as written
            return written.count("oneDNN custom operations are on") == 2

        wait_until("both tasks' later notice", oned_nn_printed, 30)
        wait_until("both tasks followed", lambda: sum("serving" in s for s in shown) == 2, 30)
        written = run_tfctl(inv, "logs").stdout
        assert written.count(ABSL) == 2 and written.count("cpu_feature_guard") == 2
        status = json.loads(run_tfctl(inv, "status", "--json").stdout)
        assert {t["name"]: t["last_line"] for t in status["tasks"]} == {
            "ps:0": "ps:0 serving", "worker:0": "worker:0 serving"}
    finally:
        follow.send_signal(signal.SIGTERM)
        try:
            follow.communicate(timeout=20)
        finally:
            if follow.poll() is None:
                follow.kill()
            run_tfctl(inv, "down", "--grace", "1")
    said = [line.split(" | ", 1) for line in "".join(shown).splitlines()]
    assert [s for s in said if len(s) != 2] == [], shown
    by_task = {task.strip(): [line for t, line in said if t.strip() == task.strip()]
               for task, _ in said}
    assert by_task == {"ps:0": [FOLDED, "ps:0 serving"],
                       "worker:0": [FOLDED, "worker:0 serving"]}, shown
