"""torch_xla.launch and torch.multiprocessing.spawn in one program (tests/test_faults.py).

usage: launch_spawn.py STEPS
Two mp.spawn workers (torch only: they only have to say their rank, and a torch_xla import
costs seconds each) print their index; then torch_xla.launch runs its worker
(one process on the CPU), which halfway through appends a malformed "Number of Graph Inputs"
line to its own PT_XLA_DEBUG file, as a damaged or foreign log would have. Each worker prints
"worker KIND INDEX ORDINAL". The main process never touches the XLA device: torch_xla.launch
refuses to run if the runtime was started before it.
"""

import os
import sys

import torch.multiprocessing as mp


def steps(count: int, poison_at: int = -1) -> None:
    import torch
    import torch_xla

    device = torch_xla.device()
    x = torch.ones(4, 4, device=device)
    for step in range(count):
        x = x @ x.T / 4 + 1
        if step == poison_at and os.environ.get("PT_XLA_DEBUG_FILE"):
            with open(os.environ["PT_XLA_DEBUG_FILE"], "a") as handle:
                handle.write("Compilation Analysis: ================================================\n"
                             "Compilation Analysis: Number of Graph Inputs: many\n"
                             "Compilation Analysis: Post Compilation Analysis: Graph input size: 1.2.3 GB\n")
        torch_xla.sync()


def spawned(index: int, count: int) -> None:
    print("worker spawn", index, flush=True)


def launched(index: int, count: int) -> None:
    import torch_xla.runtime as xr

    steps(count, poison_at=count // 2)
    print("worker launch", index, xr.global_ordinal(), flush=True)


if __name__ == "__main__":
    count = int(sys.argv[1])
    mp.spawn(spawned, args=(count,), nprocs=2)
    import torch_xla

    torch_xla.launch(launched, args=(count,))
