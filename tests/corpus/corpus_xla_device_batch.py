"""A loop whose batch is made on the device, at a size that changes once.

Idiom: PyTorch/XLA's "make the data on the device" pattern (pytorch/xla's examples and
benchmarks build synthetic batches with `torch.randn(..., device=device)` so no host copy
enters the step), in a regression loop whose batch size grows from 16 to 24 at iteration 10,
as a schedule or a curriculum does; SGD, `torch_xla.sync()` per iteration, 40 iterations. In
the corpus because the size is inside the graph: each graph's inputs (the parameters) have the
same shapes before and after, and only its outputs (the batch it made) show the new size.
"""

from __future__ import annotations

import hook
import torch
import torch.nn as nn
import torch_xla

ITERATIONS, GROW_AT, FEATURES = 40, 10, 32


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(ITERATIONS):  # corpus: train-loop
        hook.mark(f"train:i{step}")
        n = 16 if step < GROW_AT else 24
        x = torch.randn(n, FEATURES, device=device)  # corpus: device-batch
        loss = model(x).pow(2).mean()  # corpus: model-call
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch_xla.sync()  # corpus: sync
    hook.mark("after-loop")
    print(f"last batch {x.shape[0]}")
    hook.finish(iterations=ITERATIONS, grow_at=GROW_AT)


if __name__ == "__main__":
    main()
