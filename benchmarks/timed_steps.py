"""The program benchmarks/overhead.py runs: the bundled example's model, timing its own steps.

The training step is the one of examples/train_transformer.py (same model, same
sizes); the same file runs bare and under `tpuscope run`, so the step times it
writes include exactly what tpuscope adds at each step boundary.
usage: timed_steps.py OUT.json [--steps N] [--alternate]

--alternate (under `tpuscope run` only): after 10 steps, tpuscope's step hook is switched
off and on every two steps (on, on, off, off, ...), so the program times both kinds of
step side by side in one process and the machine's drift cancels out; OUT.json then holds
{"on": [...], "off": [...]}.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch_xla

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from alternate import cost_now, xla_hook_switch  # noqa: E402
from train_transformer import TinyLM  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--alternate", action="store_true")
args = parser.parse_args()


WARM = 10  # steps before the alternation (compiles), left out of both lists


torch.manual_seed(0)
device = torch_xla.device()
vocab, batch, seq = 512, 8, 64
model = TinyLM(vocab, d_model=128, heads=2, layers=2).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
loss_fn = nn.CrossEntropyLoss()
tokens = torch.randint(0, vocab, (batch, seq + 1)).to(device)
inputs, targets = tokens[:, :-1], tokens[:, 1:]

times = []
switch = xla_hook_switch() if args.alternate else None
before_loop = cost_now() if args.alternate else None
hook_on = []
for i in range(args.steps):
    if switch is not None:
        xm, hooked, bare = switch
        on = i < WARM or (i // 2) % 2 == 0
        xm._run_step_closures = hooked if on else bare
        hook_on.append(None if i < WARM else on)
    start = time.perf_counter()
    opt.zero_grad()
    loss = loss_fn(model(inputs).reshape(-1, vocab), targets.reshape(-1))
    loss.backward()
    opt.step()
    torch_xla.sync(wait=True)  # wait, so a step's time includes its device work
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
