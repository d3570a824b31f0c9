"""One host of a simulated pod: the same torch_xla steps on every host, with rank-dependent
mistakes a pod user makes. The rank comes from RANK (as torchrun and most launchers set it).

usage: pod.py STEPS [slow=R] [extra=R] [item=R] [hang=R:STEP] [barrier=DIR:N]
  slow=R      rank R sleeps 60 ms in each step (a straggler: time outside XLA)
  extra=R     rank R compiles its own graph at steps 4 and 6, with another shape each time
  item=R      rank R reads the loss with .item() in every step (rank-0-style logging)
  hang=R:S    rank R stops in step S until it is killed (a lost host)
  barrier=D:N before step 2 every host waits for N hosts (files in folder D): the hosts of a
              real pod run their steps side by side, held together by collectives
"""

import os
import sys
import time
from pathlib import Path

import torch
import torch_xla

steps = int(sys.argv[1])
opts = dict(a.split("=", 1) for a in sys.argv[2:])
rank = int(os.environ.get("RANK", "0"))
hang = opts.get("hang", "-1:-1").split(":")
device = torch_xla.device()
w = torch.randn(16, 16, device=device) / 4


def barrier(spec: str) -> None:
    folder, count = spec.rsplit(":", 1)
    Path(folder, str(rank)).touch()
    deadline = time.monotonic() + 120
    while len(list(Path(folder).iterdir())) < int(count) and time.monotonic() < deadline:
        time.sleep(0.02)


for step in range(steps):
    if step == 2 and "barrier" in opts:
        barrier(opts["barrier"])
    w = torch.tanh(w @ w) + 0.5
    loss = w.mean()
    if str(rank) == opts.get("item"):
        logged = loss.item()  # POD_ITEM_LINE
    if str(rank) == opts.get("extra") and step in (4, 6):
        side = (w[: step + 2] * 2).sum()
        torch_xla.sync()  # POD_EXTRA_LINE
    if str(rank) == opts.get("slow"):
        time.sleep(0.06)
    if str(rank) == hang[0] and step == int(hang[1]):
        time.sleep(120)  # killed here
    torch_xla.sync()
print(f"rank {rank} done")
