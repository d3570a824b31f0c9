"""A few tiny torch_xla steps with a CPU fallback each (`x[mask]` -> aten::nonzero), then an ending.

usage: gate.py STEPS [exit CODE | sigterm]
(for `tpuscope run --fail-on`: a finding, and the program's own exit status or death by a signal)
"""

import os
import signal
import sys

import torch
import torch_xla

steps, ending = int(sys.argv[1]), sys.argv[2:]
device = torch_xla.device()
x = torch.randn(16, device=device)
for _ in range(steps):
    x = x[x > -10].sum() + torch.randn(16, device=device)  # boolean mask: runs on the CPU
    torch_xla.sync()

if ending[:1] == ["exit"]:
    sys.exit(int(ending[1]))
if ending[:1] == ["sigterm"]:
    # SIGTERM ends the process at once (tpuscope keeps its default action): only rows already
    # flushed (every 2 s) are kept, so wait for the steps' rows to be on disk first, as a
    # program that runs longer than a flush would have them.
    import time
    from pathlib import Path

    run_dir, deadline = Path(os.environ.get("TPUSCOPE_RUN_DIR", ".")), time.monotonic() + 60
    while not list(run_dir.glob("steps/part-*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGTERM)
