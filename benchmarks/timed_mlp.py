"""A short-step torch_xla program for benchmarks/overhead.py: an MLP 256-256-256, batch 32.

Its step (forward, backward, SGD, `torch_xla.sync()`, then a wait for the device) takes
about 2 ms on the CPU, where a profiler's fixed cost per step shows. Same options and
output as timed_steps.py:

    timed_mlp.py OUT.json [--steps N] [--alternate]
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm
from alternate import cost_now, xla_hook_switch

WARM = 10  # steps before the alternation (compiles), left out of both lists


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--alternate", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device()
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(32, 256).to(device)
    y = torch.randn(32, 256).to(device)

    times, hook_on = [], []
    switch = xla_hook_switch() if args.alternate else None
    before_loop = cost_now() if args.alternate else None
    for i in range(args.steps):
        if switch is not None:
            on = i < WARM or (i // 2) % 2 == 0
            switch[0]._run_step_closures = switch[1] if on else switch[2]
            hook_on.append(None if i < WARM else on)
        start = time.perf_counter()
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        torch_xla.sync()
        xm.wait_device_ops()  # a step's time includes its device work
        times.append(time.perf_counter() - start)

    if switch is not None:
        switch[0]._run_step_closures = switch[1]
        times = {
            key: [t for t, on in zip(times, hook_on, strict=True) if on is want]
            for key, want in (("on", True), ("off", False))
        }
        times["before_loop"] = before_loop
    with open(args.out, "w") as handle:
        json.dump(times, handle)


if __name__ == "__main__":
    main()
