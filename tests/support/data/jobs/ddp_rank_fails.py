"""A torch job of ranks whose rank FAIL_RANK exits 3 once the group has met (after one gloo
all-reduce) (tests/testbed/test_frameworks.py). Without FAILED_ONCE the others then idle
without a collective that would tell them: only tfctl can end the group. With FAILED_ONCE (a
file) the rank fails only while that file is missing, and makes it; the others all-reduce, so
they fail with it, and a group restarted whole then all-reduces to its end. FAIL_AFTER_S: how
long the failing rank waits after the all-reduce, so that it fails after `up` has returned
(a rank without a port counts as started once it has run 5 s: agent/state.py)."""

import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.all_reduce(torch.ones(1))
once = os.environ.get("FAILED_ONCE")
if dist.get_rank() == int(os.environ["FAIL_RANK"]) and not (once and os.path.exists(once)):
    if once:
        open(once, "w").close()
    time.sleep(float(os.environ.get("FAIL_AFTER_S", "0")))
    print(f"rank {dist.get_rank()} fails on purpose", flush=True)
    os._exit(3)  # at once: sys.exit would unwind gloo's threads, which may abort instead
if not once:
    time.sleep(600)
total = torch.ones(1)
for _ in range(10):
    time.sleep(0.3)
    dist.all_reduce(total)
print(f"rank {dist.get_rank()} all-reduced to {int(total.item())}", flush=True)
dist.destroy_process_group()
