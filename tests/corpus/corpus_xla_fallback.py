"""A text classifier built on `nn.EmbeddingBag`, trained on torch_xla: a genuine CPU fallback.

Idiom: PyTorch's text-classification tutorial model (`nn.EmbeddingBag(vocab, dim)` over a flat
tensor of token ids with `offsets` marking where each text starts, then `nn.Linear` to the
classes; SGD, `clip_grad_norm_`), moved to the XLA device with the lazy-tensor loop of
pytorch/xla's README (`xm.optimizer_step(optimizer, barrier=True)`). On torch_xla 2.9 the
embedding-bag forward has no XLA lowering and runs on the host every step (see the truth's
`executed_fallback_ops()`). Batches are fixed-size, so the graphs are static.
"""

from __future__ import annotations

import hook
import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm

VOCAB, EMBED, CLASSES, BATCH, TOKENS_PER_TEXT, ITERATIONS = 1000, 64, 4, 16, 12, 8


class TextClassificationModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.EmbeddingBag(VOCAB, EMBED, sparse=False)
        self.fc = nn.Linear(EMBED, CLASSES)

    def forward(self, text: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.fc(self.embedding(text, offsets))  # corpus: embedding-call


def main() -> None:
    hook.start("xla")
    torch.manual_seed(0)
    device = torch_xla.device()
    model = TextClassificationModel().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=5.0)
    criterion = nn.CrossEntropyLoss()
    offsets = (torch.arange(BATCH) * TOKENS_PER_TEXT).to(device)
    model.train()
    for step in range(ITERATIONS):  # corpus: train-loop
        hook.mark(f"train:i{step}")
        text = torch.randint(0, VOCAB, (BATCH * TOKENS_PER_TEXT,)).to(device)
        label = torch.randint(0, CLASSES, (BATCH,)).to(device)
        optimizer.zero_grad()
        predicted_label = model(text, offsets)  # corpus: model-call
        loss = criterion(predicted_label, label)
        loss.backward()  # corpus: backward
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        xm.optimizer_step(optimizer, barrier=True)  # corpus: sync
        if step % 4 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    hook.finish(iterations=ITERATIONS)


if __name__ == "__main__":
    main()
