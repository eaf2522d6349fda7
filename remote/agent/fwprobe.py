"""The agent's question to PyTorch and JAX themselves: their version, the GPUs they see, torch's
distributed backends, JAX's default backend.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, no tfctl imports. As for
TensorFlow (tfprobe.py), `import torch` or `import jax` costs seconds and hundreds of MB, so the
answer is asked of a child process of the host's python once and kept in
`~/.cache/tfctl/framework-probe.json`, keyed by the framework, the interpreter's real path, its
mtime and the installed distributions' versions: `tfctl check` asks again only after one of
them changed. The child sees every GPU of the host and takes no GPU memory
(XLA_PYTHON_CLIENT_PREALLOCATE=false: JAX would take 75% of each GPU at start).
"""

from __future__ import annotations

import os
from typing import Any

from tfctl.remote.agent.tfprobe import (
    _probe_key,
    _read_cache,
    _write_cache,
    ask_child_python,
)

FW_DISTRIBUTIONS = ("torch", "jax", "jaxlib", "keras")
"""The distributions whose versions a probe that asks about a framework reports."""
FW_WANTS = {"torch": ("torch",), "jax": ("jax", "jaxlib")}
"""What must be installed before a framework is asked of itself."""
FW_PROBE_CODE = {
    "torch": r"""
import json
import torch
import torch.distributed as dist
backends = [b for b in ("gloo", "nccl", "mpi")
            if dist.is_available() and getattr(dist, "is_%s_available" % b)()]
gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
    if torch.cuda.is_available() else []
print("FWPROBE " + json.dumps({"version": torch.__version__, "cuda": torch.version.cuda,
                               "gpus": gpus, "backends": backends}))
""",
    "jax": r"""
import json
import jax
try:
    gpus = [str(d) for d in jax.devices("gpu")]
except RuntimeError:  # no GPU backend: a CPU-only jaxlib, or no driver
    gpus = []
print("FWPROBE " + json.dumps({"version": jax.__version__, "backend": jax.default_backend(),
                               "gpus": gpus}))
""",
}
FW_PROBE_TIMEOUT_S = 180
FW_PROBE_CACHE = "~/.cache/tfctl/framework-probe.json"


def installed_versions(distributions: tuple[str, ...]) -> dict[str, str]:
    """Each of `distributions` installed for this interpreter → its version, in their order
    (read from the packages' metadata: nothing is imported)."""
    from importlib import metadata

    found = {}
    for dist in distributions:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return found


def fw_probe(name: str, versions: dict[str, str], fresh: bool = False) -> dict[str, Any]:
    """What framework `name` (torch, jax) says of itself under this interpreter."""
    missing = [d for d in FW_WANTS.get(name, (name,)) if d not in versions]
    if name not in FW_PROBE_CODE or missing:
        return {"importable": False, "error": f"{', '.join(missing) or name} is not installed"}
    key = f"{name}|{_probe_key(versions)}"
    cache_path = os.path.expanduser(FW_PROBE_CACHE)
    cache = _read_cache(cache_path)
    if not fresh and key in cache:
        return dict(cache[key], cached=True)
    answer = _fw_ask(name)
    if answer.get("importable"):
        cache[key] = answer
        _write_cache(cache_path, cache)
    return dict(answer, cached=False)


def _fw_ask(name: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env.update(XLA_PYTHON_CLIENT_PREALLOCATE="false", TF_CPP_MIN_LOG_LEVEL="3")
    return ask_child_python(FW_PROBE_CODE[name], "FWPROBE", name, FW_PROBE_TIMEOUT_S, env)
