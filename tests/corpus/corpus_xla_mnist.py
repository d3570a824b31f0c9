"""pytorch/xla MNIST training in the idiom of pytorch/xla's test/test_train_mp_mnist.py.

Idiom: `xm.broadcast_master_param(model)` after moving the model, `pl.MpDeviceLoader` over a
`DataLoader` for train and test, `xm.optimizer_step(optimizer)`, logging through
`xm.add_step_closure` every LOG_STEPS steps, an eval pass (`correct.item()`) after each epoch,
2 epochs. Synthetic MNIST-shaped data (no download). In the corpus as the clean program: setup,
first/second train step (SGD momentum state) and eval graphs compile in epoch 1; epoch 2
compiles nothing, so a correct tool finds nothing.
"""

from __future__ import annotations

import hook
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch.utils.data import DataLoader, TensorDataset

BATCH, TRAIN_BATCHES, TEST_BATCHES, EPOCHS, LOG_STEPS = 16, 6, 2, 2, 4


class MNIST(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.bn1 = nn.BatchNorm2d(10)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.bn2 = nn.BatchNorm2d(20)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn1(F.relu(F.max_pool2d(self.conv1(x), 2)))
        x = self.bn2(F.relu(F.max_pool2d(self.conv2(x), 2)))
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


def fake_mnist(batches: int, seed: int) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(batches * BATCH, 1, 28, 28, generator=g)
    labels = torch.randint(0, 10, (batches * BATCH,), generator=g)
    return DataLoader(TensorDataset(images, labels), batch_size=BATCH, drop_last=True)


def _train_update(epoch: int, step: int, loss: torch.Tensor) -> None:
    print(f"epoch {epoch} step {step} loss {loss.item():.4f}")


def main() -> None:
    hook.start("xla")
    torch.manual_seed(1)
    device = torch_xla.device()
    model = MNIST().to(device)
    xm.broadcast_master_param(model)  # corpus: broadcast
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    loss_fn = nn.NLLLoss()
    train_loader = pl.MpDeviceLoader(fake_mnist(TRAIN_BATCHES, 0), device)
    test_loader = pl.MpDeviceLoader(fake_mnist(TEST_BATCHES, 1), device)

    def train_loop_fn(epoch: int) -> None:
        model.train()
        for step, (data, target) in enumerate(train_loader):  # corpus: train-loop
            hook.mark(f"train:e{epoch}:i{step}")
            optimizer.zero_grad()
            loss = loss_fn(model(data), target)  # corpus: train-model-call
            loss.backward()
            xm.optimizer_step(optimizer)  # corpus: optimizer-step
            if step % LOG_STEPS == 0:
                xm.add_step_closure(_train_update, args=(epoch, step, loss))

    def test_loop_fn(epoch: int) -> float:
        model.eval()
        correct, total = 0, 0
        for step, (data, target) in enumerate(test_loader):  # corpus: eval-loop
            hook.mark(f"eval:e{epoch}:i{step}")
            pred = model(data).max(1, keepdim=True)[1]  # corpus: eval-model-call
            correct += pred.eq(target.view_as(pred)).sum()
            total += data.size(0)
        return 100.0 * correct.item() / total  # corpus: accuracy-item

    for epoch in range(1, EPOCHS + 1):
        train_loop_fn(epoch)
        hook.mark(f"train-end:e{epoch}")
        accuracy = test_loop_fn(epoch)
        hook.mark(f"eval-end:e{epoch}")
        print(f"epoch {epoch} accuracy {accuracy:.2f}%")
    hook.finish(iterations={"train": EPOCHS * TRAIN_BATCHES, "eval": EPOCHS * TEST_BATCHES})


if __name__ == "__main__":
    main()
