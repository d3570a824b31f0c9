"""A torchvision classification model trained on torch_xla, f32, in pytorch/xla's ResNet idiom.

Idiom: pytorch/xla's `examples/train_resnet_base.py` and `test/test_train_mp_imagenet.py`
(`torchvision.models.resnet18(num_classes=...)` built with random weights, `.to(device)`,
SGD with momentum and weight decay, `nn.CrossEntropyLoss`, `xm.optimizer_step(optimizer)`,
`torch_xla.sync()` per batch, the loss logged every few steps with `xm.add_step_closure`)
on a small synthetic batch (4 images of 3x32x32, 10 classes). The question the truth answers:
does anything in a stock torchvision model fall back to the CPU or recompile in the loop?
"""

from __future__ import annotations

import hook
import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm
import torchvision

ITERATIONS, BATCH, SIZE, CLASSES, LOG_EVERY = 6, 4, 32, 10, 3


def _log(step: int, loss: torch.Tensor) -> None:
    print(f"step {step} loss {loss.item():.4f}")


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    model = torchvision.models.resnet18(num_classes=CLASSES).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for step in range(ITERATIONS):  # corpus: loop
        hook.mark(f"train:i{step}")
        data = torch.randn(BATCH, 3, SIZE, SIZE).to(device)
        target = torch.randint(0, CLASSES, (BATCH,)).to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(data), target)  # corpus: model-call
        loss.backward()
        xm.optimizer_step(optimizer)
        if step % LOG_EVERY == 0:
            xm.add_step_closure(_log, args=(step, loss))
        torch_xla.sync()  # corpus: sync
    hook.finish(iterations=ITERATIONS)


if __name__ == "__main__":
    main()
