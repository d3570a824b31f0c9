"""12-iteration torch_xla training loops, one per step idiom users write, one after another.

usage: idioms.py IDIOM[,IDIOM...] OUT.json [--iters N] [--tail] [--generate N]

IDIOM: sync, mark_step, optimizer_step (barrier=True), loader_optimizer_step
(MpDeviceLoader + xm.optimizer_step without barrier: the loader's next() syncs),
compile_fn (torch_xla.compile(fn) per iteration), compile_ctx (`with torch_xla.compile():`),
loader (MpDeviceLoader + xm.mark_step()), loader_read (the same, then an `.item()` of a
new graph after the sync), loader_compile (MpDeviceLoader + torch_xla.compile),
step_trace (xp.StepTrace), loader_step_trace, eager (eager_mode(True) + torch_xla.sync()),
eager_mark_step (eager_mode(True) + xm.mark_step()).

--tail: after the loops (and their last sync), an eval that ends in `.item()`, a CPU
fallback and a `.cpu()` read, with no sync after it: the "end" step.
--generate N: after the loops, N calls of a tiny random GPT-2's `model.generate(...)` on
the device, each but the last followed by `torch_xla.sync()` (host reads and fallbacks
inside transformers, to be located at the marked generate line below); the last one
has a longer prompt, so it compiles, and ends the program without a sync.

OUT.json gets, per idiom, the wall-clock window of its loop and torch_xla's own counters
after every iteration's boundary, for comparison.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.debug.profiler as xp
from torch_xla.distributed.parallel_loader import MpDeviceLoader

parser = argparse.ArgumentParser()
parser.add_argument("idiom")
parser.add_argument("out")
parser.add_argument("--iters", type=int, default=12)
parser.add_argument("--tail", action="store_true")
parser.add_argument("--generate", type=int, default=0)
args = parser.parse_args()
WATCHED = ("UncachedCompile", "CachedCompile", "ExecuteComputation")

device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batches = [(torch.randn(8, 16), torch.randn(8, 4)) for _ in range(args.iters)]
xm.mark_step()  # setup: the model's parameters on the device


def train(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def counters() -> dict[str, int]:
    return {name: met.counter_value(name) or 0 for name in WATCHED}


def loop(idiom: str, seen: list[dict[str, int]]) -> None:
    """One idiom's loop; `seen` gets torch_xla's counters after each iteration."""
    if idiom.startswith("loader"):
        loader = MpDeviceLoader(torch.utils.data.DataLoader(batches, batch_size=None), device)
        compiled = torch_xla.compile(train)
        for i, (x, y) in enumerate(loader):
            if idiom in ("loader", "loader_read"):
                train(x, y)
                xm.mark_step()
                if idiom == "loader_read":  # belongs to the next step (the loader's sync gives way)
                    print("accuracy", (model(x).argmax(1) == y.argmax(1)).float().mean().item())
            elif idiom == "loader_compile":
                compiled(x, y)
            elif idiom == "loader_optimizer_step":
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                xm.optimizer_step(opt)
            elif idiom == "loader_step_trace":
                with xp.StepTrace("train", step_num=i):
                    train(x, y)
            seen.append(counters())
        return
    compiled = torch_xla.compile(train)
    for i, (x, y) in enumerate(batches):
        x, y = x.to(device), y.to(device)
        if idiom in ("sync", "eager"):
            train(x, y)
            torch_xla.sync()
        elif idiom in ("mark_step", "eager_mark_step"):
            train(x, y)
            xm.mark_step()
        elif idiom == "optimizer_step":
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            xm.optimizer_step(opt, barrier=True)
        elif idiom == "compile_fn":
            compiled(x, y)
        elif idiom == "compile_ctx":
            with torch_xla.compile():
                train(x, y)
        elif idiom == "step_trace":
            with xp.StepTrace("train", step_num=i):
                train(x, y)
        else:
            raise SystemExit(f"unknown idiom {idiom}")
        seen.append(counters())


def tail() -> None:
    """Work after the last sync that never syncs: an eval read with .item(), a fallback, a .cpu()."""
    with torch.no_grad():
        x = torch.randn(8, 16, device=device)
        print("eval loss", torch.nn.functional.mse_loss(model(x), torch.zeros(8, 4, device=device)).item())
        print("nonzero", x[x > 0].shape)  # aten::nonzero falls back to the CPU
        print("cpu", model(x).sum(dim=0).cpu().shape)


def generate(calls: int) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    lm = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=100)).to(device).eval()
    for call in range(calls):
        last = call == calls - 1  # a longer prompt (new graphs), and no sync after it
        ids = torch.tensor([[1, 2, 3, 4, 5, 6] if last else [1, 2, 3, 4]], device=device)
        out = lm.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)  # GENERATE-LINE
        if not last:
            torch_xla.sync()
    print("generated", out.shape)


report: dict[str, dict] = {}
for idiom in args.idiom.split(","):
    torch_xla.experimental.eager_mode(idiom.startswith("eager"))
    seen = [counters()]
    start = time.time_ns()
    loop(idiom, seen)
    report[idiom] = {"start_ns": start, "end_ns": time.time_ns(), "counters": seen}
torch_xla.experimental.eager_mode(False)
if args.tail:
    tail()
if args.generate:
    generate(args.generate)
with open(args.out, "w") as handle:
    json.dump(report, handle)
