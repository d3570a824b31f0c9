"""A torch_xla loop whose input shape changes late: batch 4 for steps 0-19, 3 from step 20, 5
from step 23. Writes, per step, whether torch_xla captured Python frames for that step's IR
(`_get_ir_debug()` as the step starts), and torch_xla's own compile count, to OUT.json.

usage: late_shapes.py OUT.json
"""

import json
import sys

import torch
import torch_xla
import torch_xla.debug.metrics as met

STEPS, BATCHES = 36, {0: 4, 20: 3, 23: 5}
device = torch_xla.device()
weight = torch.randn(16, 8, device=device)
frames, batch = [], 4
for step in range(STEPS):
    batch = BATCHES.get(step, batch)
    frames.append(torch_xla._XLAC._get_ir_debug())
    x = torch.randn(batch, 8).to(device)
    weight = weight + 0.01 * torch.tanh(weight @ (x.T @ x))  # a matmul of batch rows
    torch_xla.sync()
with open(sys.argv[1], "w") as handle:
    json.dump({"frames": frames, "compiles": met.counter_value("UncachedCompile")}, handle)
