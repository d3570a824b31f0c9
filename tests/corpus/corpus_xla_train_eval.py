"""A ResNet trained and evaluated each epoch, every iteration ending in `xm.mark_step()`.

Idiom: the per-epoch train/eval loop of pytorch/xla's `test/test_train_mp_imagenet.py` and of
PyTorch's ImageNet example, written as users port it to torch_xla without a loader of its own:
`model.train()`, then for each batch `optimizer.zero_grad()`, forward, `loss.backward()`,
`optimizer.step()`, `xm.mark_step()`; `model.eval()` and `torch.no_grad()` for the evaluation
batches, each again ended by `xm.mark_step()`. A small ResNet (torchvision's BasicBlock layout:
conv-bn-relu-conv-bn plus the identity, two blocks, global average pool; written out here,
torchvision is not installed on every machine), SGD with momentum, 2 epochs of 4 train and 2
eval batches of 8 images 3x16x16. In the corpus because every iteration is a step, whether it
trains or not: 12 iterations, 12 steps (`xm.mark_step` is wrapped by typing_extensions'
`@deprecated` in torch_xla 2.9, so the frame above torch_xla's is that wrapper, not the user's).
"""

from __future__ import annotations

import hook
import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm

EPOCHS, TRAIN, EVAL, BATCH, CLASSES = 2, 4, 2, 8, 10


class BasicBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(out)))


class ResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.layer = nn.Sequential(BasicBlock(16), BasicBlock(16))
        self.fc = nn.Linear(16, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = nn.functional.adaptive_avg_pool2d(self.layer(self.stem(x)), 1)
        return self.fc(torch.flatten(pooled, 1))


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    model = ResNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(EPOCHS):
        model.train()
        for i in range(TRAIN):  # corpus: train-loop
            hook.mark(f"train:e{epoch}i{i}")
            data = torch.randn(BATCH, 3, 16, 16).to(device)
            target = torch.randint(0, CLASSES, (BATCH,)).to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(data), target)
            loss.backward()
            optimizer.step()
            xm.mark_step()  # corpus: train-sync
        model.eval()
        with torch.no_grad():
            for i in range(EVAL):  # corpus: eval-loop
                hook.mark(f"eval:e{epoch}i{i}")
                output = model(torch.randn(BATCH, 3, 16, 16).to(device))
                xm.mark_step()  # corpus: eval-sync
        print(f"epoch {epoch} done")
    hook.mark("after-loop")
    print(f"last output {tuple(output.shape)}")
    hook.finish(iterations=EPOCHS * (TRAIN + EVAL))


if __name__ == "__main__":
    main()
