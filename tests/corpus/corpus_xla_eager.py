"""A training loop under torch_xla strict eager (`torch_xla.experimental.eager_mode(True)`).

Idiom: pytorch/xla's examples/eager/train_decoder_only_eager.py turns eager mode on at the top of
the program and then trains as usual; here the step is not wrapped in `torch_xla.compile`, so
every op runs as its own XLA computation ("Strict" eager, op by op). A small MLP classifier
over `pl.MpDeviceLoader`, AdamW, 8 iterations, `torch_xla.sync()` at the end of each step as the
eager examples do. In the corpus because tpuscope missed strict eager: the truth is the number
of executions per step (ExecuteComputation, EagerOpExecuteTime samples).
"""

from __future__ import annotations

import hook
import torch
import torch.nn as nn
import torch_xla
import torch_xla.distributed.parallel_loader as pl
from torch.utils.data import DataLoader, TensorDataset

BATCH, ITERATIONS = 16, 8

torch_xla.experimental.eager_mode(True)  # corpus: eager-on


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    features = torch.randn(ITERATIONS * BATCH, 128)
    labels = torch.randint(0, 16, (ITERATIONS * BATCH,))
    loader = pl.MpDeviceLoader(DataLoader(TensorDataset(features, labels), batch_size=BATCH), device)
    model = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 16)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for step, (x, y) in enumerate(loader):  # corpus: train-loop
        hook.mark(f"train:i{step}")
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)  # corpus: model-call
        loss.backward()
        optimizer.step()
        torch_xla.sync()
        if step % 4 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    hook.finish(iterations=ITERATIONS)


if __name__ == "__main__":
    main()
