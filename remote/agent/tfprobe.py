"""The agent's question to TensorFlow itself: its version, its package, the GPUs it sees.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, no tfctl imports.
`import tensorflow` costs seconds and hundreds of MB, so the answer is asked of a child process
of the host's python once and kept in `~/.cache/tfctl/tf-probe.json`, keyed by the interpreter's
real path, its mtime and the installed TensorFlow distribution's version: `tfctl check` asks
again only after the interpreter or TensorFlow changed.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

TF_PROBE_CODE = r"""
import json, os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = __import__("tensorflow")  # in a child process only: the agent itself never imports it
info = tf.sysconfig.get_build_info()
try:
    import tf_keras
    tf_keras_version = tf_keras.__version__
except Exception:
    tf_keras_version = None
print("TFPROBE " + json.dumps({
    "version": tf.__version__,
    "gpus": [d.name for d in tf.config.list_physical_devices("GPU")],
    "built_with_cuda": bool(info.get("is_cuda_build")),
    "cuda_version": info.get("cuda_version"),
    "tf_keras": tf_keras_version,
}))
"""
TF_PROBE_TIMEOUT_S = 180
TF_PROBE_CACHE = "~/.cache/tfctl/tf-probe.json"


def tf_probe(installed: dict[str, str], fresh: bool = False) -> dict[str, Any]:
    """What TensorFlow says of itself under this interpreter; `installed` maps the TensorFlow
    distribution found (e.g. `tensorflow-cpu`) to its version, or is empty."""
    if not installed:
        return {"importable": False, "error": "no TensorFlow distribution is installed"}
    key = _probe_key(installed)
    cache_path = os.path.expanduser(TF_PROBE_CACHE)
    cache = _read_cache(cache_path)
    if not fresh and key in cache:
        return dict(cache[key], cached=True)
    answer = _ask_tensorflow()
    answer["distribution"] = next(iter(installed))
    if answer.get("importable"):
        cache[key] = answer
        _write_cache(cache_path, cache)
    return dict(answer, cached=False)


def _probe_key(installed: dict[str, str]) -> str:
    executable = os.path.realpath(sys.executable)
    try:
        mtime = os.stat(executable).st_mtime_ns
    except OSError:
        mtime = 0
    dists = ",".join(f"{name}=={version}" for name, version in sorted(installed.items()))
    return f"{executable}|{mtime}|{dists}"


def _ask_tensorflow() -> dict[str, Any]:
    # Every GPU of the host, whatever mask the agent's own environment carries.
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    return ask_child_python(TF_PROBE_CODE, "TFPROBE", "tensorflow", TF_PROBE_TIMEOUT_S, env)


def ask_child_python(code: str, marker: str, module: str, timeout_s: float,
                     env: dict[str, str]) -> dict[str, Any]:
    """What `code`, run by a child of this interpreter with `env`, says of the framework it
    imports (`module`): the JSON after `marker` on a line of its output, or `importable: False`
    with why (the last line it wrote, its exit status, or its taking over `timeout_s`)."""
    import subprocess

    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                              text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"importable": False, "error": f"`import {module}` took over {timeout_s} s"}
    for line in done.stdout.splitlines():
        if line.startswith(marker + " "):
            return dict(json.loads(line[len(marker) + 1:]), importable=True)
    lines = [x for x in (done.stderr or done.stdout).strip().splitlines() if x.strip()]
    return {"importable": False,
            "error": lines[-1] if lines else f"exited {done.returncode} without a word"}


def _read_cache(path: str) -> dict[str, Any]:
    try:
        with open(path) as stream:
            data = json.load(stream)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cache(path: str, cache: dict[str, Any]) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as stream:
            json.dump(cache, stream)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: ask TensorFlow again next time
