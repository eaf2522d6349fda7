"""A job that, like between-graph code given `per_host`, uses only the first GPU of its mask.

It narrows CUDA_VISIBLE_DEVICES to its first entry and re-executes itself as the light job, so
the test-only nvidia-smi stand-in sees it on GPU 0 alone: the TITAN X ×4 story, in the lab.
"""

import os
import sys

mask = os.environ.get("CUDA_VISIBLE_DEVICES", "")
if "," in mask:
    os.environ["CUDA_VISIBLE_DEVICES"] = mask.split(",")[0]
    os.execv(sys.executable, [sys.executable, *sys.argv])
import runpy  # noqa: E402

sys.argv[0] = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lightjob.py")
runpy.run_path(sys.argv[0], run_name="__main__")
