"""N torch_xla steps of SECONDS each, for the object-store tests.

usage: store_steps.py N SECONDS [exit CODE | hold PIDFILE]
"hold": after the N steps, write this process's pid to PIDFILE and sleep (to be SIGKILLed).
"""

import os
import sys
import time

import torch
import torch_xla

n, seconds, ending = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
device = torch_xla.device()
w = torch.randn(8, 8, device=device)
for step in range(n):
    w = torch.tanh(w @ w) + step
    torch_xla.sync()
    time.sleep(seconds)
print(f"ran {n} steps", flush=True)
if ending[:1] == ["hold"]:
    with open(ending[1] + ".tmp", "w") as handle:
        handle.write(str(os.getpid()))
    os.replace(ending[1] + ".tmp", ending[1])
    time.sleep(120)
if ending[:1] == ["exit"]:
    sys.exit(int(ending[1]))
