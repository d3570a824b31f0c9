"""Two tpuscope.profile() blocks in one process, each compiling graphs of its own; prints each
run's id. torch_xla reads PT_XLA_DEBUG once, at its first compile, and writes that one file
for the rest of the process: the second block must read it too.

usage: two_profiles.py STORE
"""

import sys

import torch
import torch_xla

import tpuscope

device = torch_xla.device()
for name, sizes in (("first", (4, 5)), ("second", (6, 7))):
    with tpuscope.profile(store=sys.argv[1], name=name, warmup=0) as run:
        for n in sizes:
            total = (torch.ones(n, 3, device=device) * 2 + 1).sum()  # kept: synced, so compiled
            torch_xla.sync()  # two_profiles: sync
    print("RUN", run.run_id, total.item(), flush=True)
