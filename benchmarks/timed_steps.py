"""The program benchmarks/overhead.py runs: times its own steps and writes them to JSON.

The same file runs bare and under `tpuscope run`, so the step times it writes
include exactly what tpuscope adds at each step boundary.
usage: timed_steps.py OUT.json [--steps N]
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch_xla

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=60)
args = parser.parse_args()

torch.manual_seed(0)
device = torch_xla.device()
model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(64, 256, device=device)

times = []
for _ in range(args.steps):
    start = time.perf_counter()
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    torch_xla.sync(wait=True)  # wait, so a step's time includes its device work
    times.append(time.perf_counter() - start)

with open(args.out, "w") as handle:
    json.dump(times, handle)
