"""A torch_xla loop that runs until told to stop, for the dashboard's live-run test.

usage: live.py FOLDER
Steps every 0.25 s until FOLDER/stop exists (at most 180 s). One step after FOLDER/recompile
appears gets a short batch: a recompile that the test watches appear.
"""

import sys
import time
from pathlib import Path

import torch
import torch_xla

folder = Path(sys.argv[1])
device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Linear(16, 4).to(device)
short_done = False
deadline = time.monotonic() + 180
while not (folder / "stop").exists() and time.monotonic() < deadline:
    rows = 8
    if not short_done and (folder / "recompile").exists():
        rows, short_done = 4, True
    x = torch.randn(rows, 16).to(device)
    (model(x) ** 2).mean().backward()
    torch_xla.sync()
    time.sleep(0.25)
print("stopped", flush=True)
