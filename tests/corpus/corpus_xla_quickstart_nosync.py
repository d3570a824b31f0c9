"""PyTorch's "Quickstart" training loop moved to torch_xla by changing the device alone.

Idiom: pytorch/tutorials `beginner_source/basics/quickstart_tutorial.py`: `NeuralNetwork`
(Flatten, Linear-ReLU-Linear-ReLU-Linear), `train(dataloader, model, loss_fn, optimizer)` with
`loss.backward()`, `optimizer.step()`, `optimizer.zero_grad()` and `loss.item()` every few
batches, `test()` summing `(pred.argmax(1) == y).type(torch.float).sum().item()` per batch, and
`for t in range(epochs): train(...); test(...)`, with `device = torch_xla.device()` as a user
porting it writes. In the corpus because the loop never syncs: its device work runs only at the
value reads, nothing materialises the parameters, so each read compiles a new graph holding
every step since the start, and tpuscope must find the loop's steps from its optimizer steps
(collect/xla/steps.py). Synthetic FashionMNIST-shaped data, a smaller model, no download.
"""

from __future__ import annotations

import hook
import torch
import torch_xla
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

EPOCHS, BATCHES, TEST_BATCHES, BATCH, LOG_EVERY = 2, 5, 1, 16, 5


class NeuralNetwork(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(28 * 28, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_relu_stack(self.flatten(x))


def train(dataloader, model, loss_fn, optimizer, device, epoch) -> None:
    model.train()
    for batch, (X, y) in enumerate(dataloader):  # corpus: train-loop
        hook.mark(f"train:e{epoch}:i{batch}")
        X, y = X.to(device), y.to(device)
        pred = model(X)
        loss = loss_fn(pred, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if batch % LOG_EVERY == 0:
            loss = loss.item()  # corpus: log-read
            print(f"loss: {loss:>7f}  [{(batch + 1) * len(X):>5d}/{len(dataloader.dataset):>5d}]")


def test(dataloader, model, loss_fn, device, epoch) -> None:
    hook.mark(f"test:e{epoch}")
    model.eval()
    correct = 0.0
    with torch.no_grad():
        for X, y in dataloader:
            X, y = X.to(device), y.to(device)
            pred = model(X)
            correct += (pred.argmax(1) == y).type(torch.float).sum().item()  # corpus: test-read
    print(f"Accuracy: {100 * correct / len(dataloader.dataset):>0.1f}%")


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    data = TensorDataset(torch.randn(BATCHES * BATCH, 1, 28, 28), torch.randint(0, 10, (BATCHES * BATCH,)))
    held_out = TensorDataset(torch.randn(TEST_BATCHES * BATCH, 1, 28, 28), torch.randint(0, 10, (TEST_BATCHES * BATCH,)))
    train_dataloader = DataLoader(data, batch_size=BATCH)
    test_dataloader = DataLoader(held_out, batch_size=BATCH)
    model = NeuralNetwork().to(device)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for t in range(EPOCHS):
        print(f"Epoch {t + 1}")
        train(train_dataloader, model, loss_fn, optimizer, device, t)
        test(test_dataloader, model, loss_fn, device, t)
    hook.finish(iterations=EPOCHS * BATCHES)


if __name__ == "__main__":
    main()
