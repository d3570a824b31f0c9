"""Two spawned worker processes, each running torch_xla steps: one run, three processes."""

import multiprocessing as mp
import sys


def work(rank: int, steps: int) -> None:
    import torch
    import torch_xla

    device = torch_xla.device()
    x = torch.ones(4, 4, device=device) * rank
    for _ in range(steps):
        x = x @ x.T / 4 + 1
        torch_xla.sync()


if __name__ == "__main__":
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=work, args=(rank, steps)) for rank in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    sys.exit(max(p.exitcode for p in procs))
