"""A tiny PyTorch DDP job written for `torchrun`: tfctl runs it unchanged with
`job.framework: torch` (examples/torch-ddp.yaml), or on one machine:

    torchrun --nproc-per-node=2 torch_ddp.py --steps 20

`init_process_group()` reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE from the environment
(its default `env://`); LOCAL_RANK picks the rank's GPU. NCCL on GPUs, gloo on CPUs. Each rank
trains a linear model on its own random batches; DDP all-reduces the gradients, so every rank
ends with the same weights, which the last all-reduce checks. Rank 0 prints `RESULT {...}`.
Needs only torch (`pip install torch`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=32)
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    dist.init_process_group("nccl" if gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = DistributedDataParallel(torch.nn.Linear(8, 1).to(device),
                                    device_ids=[local_rank] if gpu else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own batches
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch_size, 8, generator=data).to(device)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()  # the gradients are all-reduced across every rank here
        optimizer.step()
        if rank == 0 and step % 5 == 0:
            print(f"step {step} loss={loss.item():.4f} "
                  f"steps_per_sec={step / (time.monotonic() - started):.1f}", flush=True)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    total = weights.clone()
    dist.all_reduce(total)  # every rank holds the same weights: the sum is world × its own
    ranks = torch.tensor([float(rank)], device=device)
    dist.all_reduce(ranks)
    same = bool(torch.allclose(total, weights * world, atol=1e-4))
    if rank == 0:
        print("RESULT " + json.dumps({"world_size": world, "ranks_sum": int(ranks.item()),
                                      "same_weights": same, "loss": round(loss.item(), 4),
                                      "backend": dist.get_backend()}), flush=True)
    dist.barrier()  # every rank done with its collectives before any of them tears down
    dist.destroy_process_group()
    if not same:
        raise SystemExit(f"rank {rank}: the ranks' weights differ after all-reduce")


if __name__ == "__main__":
    main()
    # Leave without the interpreter's teardown: gloo's threads may still hold objects that
    # need the interpreter then, and abort the process (SIGABRT) after its work is done
    # (pytorch/pytorch#179291); a rank's exit status must say how its training went.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
