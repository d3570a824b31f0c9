"""N tiny torch_xla steps, then torch_xla's own counters written to a JSON file (for comparison).

usage: steps.py N OUT.json [exit CODE | raise | sigkill | late]
("late": 0.15 s steps; a counter first moves at step 12, another one after the last step)
"""

import json
import os
import signal
import sys
import time

import torch
import torch_xla
import torch_xla.debug.metrics as met

n, out = int(sys.argv[1]), sys.argv[2]
ending = sys.argv[3:]
device = torch_xla.device()
w = torch.randn(8, 8, device=device)
for step in range(n):
    w = torch.tanh(w @ w) + step  # same graph every step; the Python int is a device constant
    torch_xla.sync()
    if ending[:1] == ["raise"] and step == 2:
        raise RuntimeError("boom in step 2")
    if ending[:1] == ["late"] and step == 12:
        torch_xla._XLAC._xla_increment_counter("TpuscopeLate", 3)
    if ending[:1] == ["late"]:
        time.sleep(0.15)  # full reads come at most every 2 s (collect/xla/counters.py): one lands before the end
if ending[:1] == ["late"]:
    torch_xla._XLAC._xla_increment_counter("TpuscopeAfterLoop", 2)

counters = {name: met.counter_value(name) for name in met.counter_names()}
metrics = {name: met.metric_data(name)[:2] for name in met.metric_names()}
with open(out, "w") as handle:
    json.dump({"counters": counters, "metrics": metrics}, handle)

if ending[:1] == ["exit"]:
    sys.exit(int(ending[1]))
if ending[:1] == ["sigkill"]:
    time.sleep(3)  # longer than the 2 s flush interval
    os.kill(os.getpid(), signal.SIGKILL)
