"""A torch_xla training loop whose eval accuracy goes through `xm.mesh_reduce`, 2 epochs.

Idiom: pytorch/xla's test/test_train_mp_mnist.py: `pl.MpDeviceLoader` for train and test,
`xm.optimizer_step(optimizer)`, and after each eval pass
`accuracy = 100.0 * correct.item() / total_samples` then
`accuracy = xm.mesh_reduce('test_accuracy', accuracy, np.mean)` (the reduction every replica
of a multi-core run takes part in; on one process it is a rendezvous of one). A small MLP on
synthetic MNIST-shaped data (no download). In the corpus because mesh_reduce's rendezvous
compiles its own internal graphs at the user's line in the first call only: epoch 2 compiles
nothing, so the truth is no recompile.
"""

from __future__ import annotations

import hook
import numpy as np
import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch.utils.data import DataLoader, TensorDataset

BATCH, TRAIN_BATCHES, TEST_BATCHES, EPOCHS = 16, 10, 2, 2


def fake_mnist(batches: int, seed: int) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(batches * BATCH, 784, generator=g)
    labels = torch.randint(0, 10, (batches * BATCH,), generator=g)
    return DataLoader(TensorDataset(images, labels), batch_size=BATCH, drop_last=True)


def main() -> None:
    hook.start("xla")
    torch.manual_seed(1)
    device = torch_xla.device()
    model = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    train_loader = pl.MpDeviceLoader(fake_mnist(TRAIN_BATCHES, 0), device)
    test_loader = pl.MpDeviceLoader(fake_mnist(TEST_BATCHES, 1), device)

    def train_loop_fn(epoch: int) -> None:
        model.train()
        for step, (data, target) in enumerate(train_loader):  # corpus: train-loop
            hook.mark(f"train:e{epoch}:i{step}")
            optimizer.zero_grad()
            loss = loss_fn(model(data), target)
            loss.backward()
            xm.optimizer_step(optimizer)  # corpus: optimizer-step

    def test_loop_fn(epoch: int) -> float:
        model.eval()
        correct, total_samples = 0, 0
        with torch.no_grad():
            for step, (data, target) in enumerate(test_loader):  # corpus: eval-loop
                hook.mark(f"eval:e{epoch}:i{step}")
                pred = model(data).argmax(1, keepdim=True)
                correct += pred.eq(target.view_as(pred)).sum()
                total_samples += data.size(0)
        accuracy = 100.0 * correct.item() / total_samples  # corpus: accuracy-item
        hook.mark(f"mesh-reduce:e{epoch}")
        return xm.mesh_reduce("test_accuracy", accuracy, np.mean)  # corpus: mesh-reduce

    for epoch in range(1, EPOCHS + 1):
        train_loop_fn(epoch)
        hook.mark(f"train-end:e{epoch}")
        accuracy = test_loop_fn(epoch)
        hook.mark(f"eval-end:e{epoch}")
        print(f"epoch {epoch} accuracy {accuracy:.2f}%")
    hook.finish(iterations={"train": EPOCHS * TRAIN_BATCHES, "eval": EPOCHS * TEST_BATCHES})


if __name__ == "__main__":
    main()
