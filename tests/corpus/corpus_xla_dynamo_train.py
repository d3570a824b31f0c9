"""A training step compiled by `torch.compile(..., backend="openxla")`, called once per iteration.

Idiom: pytorch/xla's test/dynamo/test_dynamo.py (DynamoTrainingOptimizerTest.test_resnet18) and
docs/source/perf/dynamo.md: `train_model(model, data, target, optimizer)` does `zero_grad`,
forward, loss, `backward()` and `optimizer.step()` and returns the prediction;
`dynamo_train_model = torch.compile(train_model, backend="openxla")`, then
`for data, target in loader: dynamo_train_model(model, data, target, optimizer)` with no
`mark_step()` anywhere: after dynamo traced the function, each call runs its cached XLA graphs
(`_run_cached_graph`) and never passes a step boundary. A small CNN on synthetic device data (the
test's `xu.SampleGenerator`), SGD with weight decay, 12 iterations, one `.item()` of the last
loss after the loop. In the corpus because each call of the compiled function is one iteration:
12 calls must be 12 steps.
"""

from __future__ import annotations

import hook
import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.utils.utils as xu

BATCH, ITERATIONS = 8, 12


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.head = nn.Linear(16 * 16 * 16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(torch.relu(self.conv(x)), 1))


def train_model(model: nn.Module, data: torch.Tensor, target: torch.Tensor,
                optimizer: torch.optim.Optimizer) -> torch.Tensor:
    loss_fn = nn.CrossEntropyLoss()
    optimizer.zero_grad(True)
    pred = model(data)
    loss = loss_fn(pred, target)
    loss.backward()
    optimizer.step()
    return loss


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    loader = xu.SampleGenerator(data=(torch.randn(BATCH, 3, 16, 16, device=device),
                                      torch.zeros(BATCH, dtype=torch.int64, device=device)),
                                sample_count=ITERATIONS)
    model = SmallCNN().to(device)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-2)
    torch_xla.sync()  # materialise the fake data, as the test does
    xm.wait_device_ops()
    dynamo_train_model = torch.compile(train_model, backend="openxla")
    for step, (data, target) in enumerate(loader):  # corpus: train-loop
        hook.mark(f"train:i{step}")
        loss = dynamo_train_model(model, data, target, optimizer)  # corpus: compiled-call
    hook.mark("after-loop")
    print(f"last loss {loss.item():.4f}")  # corpus: final-item
    if hook.enabled():
        from torch._dynamo.utils import counters

        hook.finish(iterations=ITERATIONS, dynamo_stats=dict(counters["stats"]))
    else:
        hook.finish(iterations=ITERATIONS)


if __name__ == "__main__":
    main()
