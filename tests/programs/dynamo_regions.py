"""A torch.compile(backend="openxla") training step cut in two by a graph break, fed a short last
batch: AOT autograd compiles each region's forward, then (on autograd's engine thread, whose stack
names no user frame) each region's backward in reverse order. Each backward belongs at its own
region's line: region B's (the break's) first, then region A's (zero_grad's).

usage: dynamo_regions.py
"""

import torch
import torch.nn as nn
import torch_xla

device = torch_xla.device()
torch.manual_seed(0)
first, second = nn.Linear(32, 64).to(device), nn.Linear(64, 10).to(device)
optimizer = torch.optim.SGD([*first.parameters(), *second.parameters()], lr=0.1)


def step(x: torch.Tensor) -> torch.Tensor:
    optimizer.zero_grad(True)  # region A
    hidden = torch.relu(first(x))
    torch._dynamo.graph_break()  # region B
    out = second(hidden).pow(2).mean()
    out.backward()
    optimizer.step()
    return out


compiled = torch.compile(step, backend="openxla")
for start in range(0, 104, 16):  # 7 batches, the last of 8
    loss = compiled(torch.randn(min(16, 104 - start), 32).to(device))
print(f"loss {loss.item():.4f}")
