"""A `torch.library` custom op with a CPU kernel only, called in a model's forward on torch_xla.

Idiom: PyTorch's "Python custom operators" tutorial: a function written with NumPy wrapped as
`@torch.library.custom_op("<ns>::name", mutates_args=(), device_types="cpu")`, given a fake
(meta) implementation with `register_fake` and a backward with `register_autograd`, then used
inside `nn.Module.forward` like any torch op. Trained here with the lazy loop of pytorch/xla's
README (`loss.backward()`, `optimizer.step()`, `torch_xla.sync()`). The op has a kernel for the
CPU only: on an XLA tensor torch_xla's fallback copies its input to the host, runs it there and
sends the result back (the truth's `executed_fallback_ops()` names it, `corpus_ops::numpy_tanh`);
its backward is plain torch ops, lowered.
"""

from __future__ import annotations

import hook
import numpy as np
import torch
import torch.nn as nn
import torch_xla

ITERATIONS, BATCH, FEATURES = 6, 32, 64


@torch.library.custom_op("corpus_ops::numpy_tanh", mutates_args=(), device_types="cpu")
def numpy_tanh(x: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.tanh(x.numpy()))


@numpy_tanh.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    ctx.save_for_backward(output)


def _backward(ctx, grad):  # type: ignore[no-untyped-def]
    (out,) = ctx.saved_tensors
    return grad * (1 - out * out)


numpy_tanh.register_autograd(_backward, setup_context=_setup_context)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(numpy_tanh(self.fc1(x)))  # corpus: custom-op


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(ITERATIONS):  # corpus: loop
        hook.mark(f"train:i{step}")
        x = torch.randn(BATCH, FEATURES).to(device)
        y = torch.randint(0, 10, (BATCH,)).to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)  # corpus: model-call
        loss.backward()
        optimizer.step()
        torch_xla.sync()  # corpus: sync
    hook.mark("after-loop")
    print(f"final loss {loss.item():.4f}")
    hook.finish(iterations=ITERATIONS)


if __name__ == "__main__":
    main()
