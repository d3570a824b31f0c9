"""A short run (3 training iterations) with trailing work after its loop: a final eval.

Idiom: the lazy-tensor loop of pytorch/xla's README and tests (`loss.backward()`,
`optimizer.step()`, `xm.mark_step()` at the end of each iteration), then, after the loop, the
evaluation users put at the end of a script: `model.eval()`, `model(X_test)` under
`torch.no_grad()` and `.item()` of the accuracy. In the corpus because such programs end with
graphs compiled for the first time after the last step (the eval forward, the accuracy): first
compiles of a different graph, never recompiles; and 3 iterations leave no step to judge
after a 2-step warm-up except one.
"""

from __future__ import annotations

import hook
import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm

ITERATIONS, BATCH = 3, 32


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    model = nn.Sequential(nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 128)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x_train, y_train = torch.randn(BATCH, 128).to(device), torch.randint(0, 128, (BATCH,)).to(device)
    for step in range(ITERATIONS):  # corpus: train-loop
        hook.mark(f"train:i{step}")
        optimizer.zero_grad()
        loss = loss_fn(model(x_train), y_train)  # corpus: model-call
        loss.backward()
        optimizer.step()
        xm.mark_step()  # corpus: sync
    hook.mark("after-loop")
    model.eval()
    x_test, y_test = torch.randn(64, 128).to(device), torch.randint(0, 128, (64,)).to(device)
    with torch.no_grad():
        logits = model(x_test)  # corpus: final-eval
    accuracy = (logits.argmax(1) == y_test).float().mean().item()  # corpus: final-item
    print(f"final loss {loss.item():.4f} accuracy {accuracy:.4f}")
    hook.finish(iterations=ITERATIONS)


if __name__ == "__main__":
    main()
