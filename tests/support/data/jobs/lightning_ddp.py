"""A PyTorch Lightning script written for two nodes (DDP on the CPU), as a user writes it for
`torchrun --nnodes=2`: nothing in it knows tfctl. Lightning reads torchrun's variables
(RANK, GROUP_RANK, LOCAL_RANK, LOCAL_WORLD_SIZE: its TorchElasticEnvironment), checks
`num_nodes × devices == WORLD_SIZE`, and its DDP strategy joins the gloo group. Rank 0 prints
`RESULT {...}` with the world size and whether every rank ends with the same weights.
"""

from __future__ import annotations

import json
import os
import sys

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset


class Linear(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch: list[torch.Tensor], _index: int) -> torch.Tensor:
        (x,) = batch
        return torch.nn.functional.mse_loss(self.layer(x), x.sum(dim=1, keepdim=True))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8))
    model = Linear()
    trainer = pl.Trainer(strategy="ddp", num_nodes=2, accelerator="cpu", devices=1,
                         max_epochs=1, max_steps=4, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, DataLoader(data, batch_size=8))
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    total = weights.clone()
    dist.all_reduce(total)
    world = dist.get_world_size()
    if trainer.global_rank == 0:
        print("RESULT " + json.dumps({"world_size": world, "global_rank": trainer.global_rank,
                                      "same_weights": bool(torch.allclose(total, weights * world,
                                                                          atol=1e-4))}),
              flush=True)
    dist.barrier()


if __name__ == "__main__":
    main()
    # Leave without the interpreter's teardown, which gloo's threads may abort
    # (pytorch/pytorch#179291): the exit status says how the training went.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
