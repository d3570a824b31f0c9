"""The program benchmarks/overhead.py runs: the bundled example's model, timing its own steps.

The training step is the one of examples/train_transformer.py (same model, same
sizes); the same file runs bare and under `tpuscope run`, so the step times it
writes include exactly what tpuscope adds at each step boundary.
usage: timed_steps.py OUT.json [--steps N]
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch_xla

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from train_transformer import TinyLM  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=60)
args = parser.parse_args()

torch.manual_seed(0)
device = torch_xla.device()
vocab, batch, seq = 512, 8, 64
model = TinyLM(vocab, d_model=128, heads=2, layers=2).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
loss_fn = nn.CrossEntropyLoss()
tokens = torch.randint(0, vocab, (batch, seq + 1)).to(device)
inputs, targets = tokens[:, :-1], tokens[:, 1:]

times = []
for _ in range(args.steps):
    start = time.perf_counter()
    opt.zero_grad()
    loss = loss_fn(model(inputs).reshape(-1, vocab), targets.reshape(-1))
    loss.backward()
    opt.step()
    torch_xla.sync(wait=True)  # wait, so a step's time includes its device work
    times.append(time.perf_counter() - start)

with open(args.out, "w") as handle:
    json.dump(times, handle)
