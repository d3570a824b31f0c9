"""A small torch_xla training loop for the live alerts (tests/test_alerts.py).

usage: alerts.py MODE [HOLD_S]
  clean      setup graph, step 0, step 1 (SGD creates its momentum: a new graph), cached steps,
             an eval pass after the loop: first compiles only, no alert may appear
  recompile  the same, but step 5 gets a short batch (4 rows instead of 8): one recompile
  fallback   the same as clean, with a boolean mask (`aten::nonzero`, on the CPU) in every step
  storm N    a tiny graph whose length grows every step: N recompiles
After the problem's step it prints MARK, then keeps stepping (cached) for HOLD_S seconds
(default 8) and prints LAST as its last line.
"""

import sys
import time

import torch
import torch_xla

mode = sys.argv[1]
hold = float(sys.argv[3] if mode == "storm" and len(sys.argv) > 3 else
             sys.argv[2] if mode != "storm" and len(sys.argv) > 2 else 8)
device = torch_xla.device()

if mode == "storm":
    count = int(sys.argv[2])
    for n in range(8, 8 + count + 1):
        x = torch.ones(n, device=device) * 2 + 1  # a new length every step: a new graph
        torch_xla.sync()  # alerts: storm-sync
    print("MARK", flush=True)
    end = time.monotonic() + hold
    while time.monotonic() < end:
        x = torch.ones(8, device=device) * 2 + 1  # cached
        torch_xla.sync()
        time.sleep(0.2)
    print("LAST", flush=True)
    sys.exit(0)

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
ticks = torch.arange(16.0, device=device)
torch_xla.sync()  # setup graph


def train_step(rows: int) -> None:
    x = torch.randn(rows, 16).to(device)  # a batch from the host, as a data loader gives it
    y = torch.randn(rows, 4).to(device)
    loss = ((model(x) - y) ** 2).mean()
    if mode == "fallback":
        loss = loss + ticks[ticks > 7].sum() * 0  # boolean mask: aten::nonzero runs on the CPU
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    torch_xla.sync()  # alerts: step-sync


step = 0
for step in range(7):
    train_step(4 if mode == "recompile" and step == 5 else 8)
    if step == 5:
        print("MARK", flush=True)
end = time.monotonic() + hold
while time.monotonic() < end:
    step += 1
    train_step(8)
    time.sleep(0.2)
with torch.no_grad():
    model(torch.randn(8, 16, device=device)).sum()
    torch_xla.sync()  # eval after the loop: a first compile of its own graph
print("LAST", flush=True)
