"""A `torch.compile(backend="openxla")` training step fed an epoch whose last batch is short.

Idiom: pytorch/xla's docs/source/perf/dynamo.md training example (`torch.compile(train_model,
backend="openxla")` around zero_grad, forward, loss, `backward()`, `optimizer.step()`) over a
dataset cut into batches the way a `DataLoader` without `drop_last` cuts it: 200 samples in
batches of 16, so the 13th batch has 8. One epoch, no `mark_step()`. In the corpus because the
short batch recompiles the compiled function's graphs, forward and backward: AOT autograd
compiles the backward graph when autograd's engine first runs it, on the engine's own thread,
so torch_xla's record of that compile names no user frame. One root cause, one card: at the
forward's line, counting both graphs. The forward's line is where torch_xla's record puts it:
dynamo breaks the graph at `zero_grad` and compiles the rest (forward and loss) from the frame
it resumes there, whose line is the break's.
"""

from __future__ import annotations

import hook
import torch
import torch.nn as nn
import torch_xla

SAMPLES, BATCH, FEATURES, CLASSES = 200, 16, 32, 10


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()

    def train_model(data: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(True)  # corpus: region
        loss = loss_fn(model(data), target)
        loss.backward()
        optimizer.step()
        return loss

    compiled = torch.compile(train_model, backend="openxla")
    features, labels = torch.randn(SAMPLES, FEATURES), torch.randint(0, CLASSES, (SAMPLES,))
    starts = range(0, SAMPLES, BATCH)
    for step, start in enumerate(starts):  # corpus: train-loop
        hook.mark(f"train:i{step}")
        data = features[start:start + BATCH].to(device)
        target = labels[start:start + BATCH].to(device)
        loss = compiled(data, target)  # corpus: compiled-call
    hook.mark("after-loop")
    print(f"last batch {data.shape[0]} loss {loss.item():.4f}")
    hook.finish(iterations=len(starts))


if __name__ == "__main__":
    main()
