"""tpuscope.profile() around a recompiling torch_xla loop (one block per process: torch_xla reads
its debug settings once).

usage: profile_alerts.py STORE [alerts]
"""

import sys
import time

import torch
import torch_xla

import tpuscope

device = torch_xla.device()
with tpuscope.profile(store=sys.argv[1], name="block", alerts=sys.argv[2:] == ["alerts"]):
    for n in [8, 8] + list(range(9, 19)) + [18] * 20:  # a new size every step: more than a bounded set
        x = torch.ones(n, device=device) * 3
        torch_xla.sync()  # profile: sync
        time.sleep(0.2)
    print("LAST", flush=True)
