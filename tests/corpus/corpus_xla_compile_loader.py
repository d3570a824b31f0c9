"""A `torch_xla.compile`-wrapped train step over `pl.MpDeviceLoader`, exactly 12 iterations.

Idiom: pytorch/xla's examples/train_decoder_only_base.py and examples/train_resnet_base.py:
`self.compiled_step_fn = torch_xla.compile(self.step_fn, full_graph=True, name=...)`, the loop
`for step, (data, target) in enumerate(itertools.islice(loader, num_steps))`, Adam, and an
`xm.add_step_closure` logging the loss every few steps. A tiny decoder (embedding, one
`nn.TransformerEncoderLayer` with a causal mask, a vocab head) on synthetic tokens. In the corpus
because tpuscope counted 16-18 steps for such 12-iteration loops: the step count must be 12.
"""

from __future__ import annotations

import itertools

import hook
import torch
import torch.nn as nn
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
from torch.utils.data import DataLoader, TensorDataset

VOCAB, SEQ, BATCH, NUM_STEPS, DATASET_BATCHES = 256, 32, 8, 12, 20


class TinyDecoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 128)
        self.block = nn.TransformerEncoderLayer(128, nhead=2, dim_feedforward=256, batch_first=True)
        self.head = nn.Linear(128, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.embed(tokens), src_mask=self.mask, is_causal=True))


class Trainer:
    def __init__(self) -> None:
        torch.manual_seed(0)
        tokens = torch.randint(0, VOCAB, (DATASET_BATCHES * BATCH, SEQ + 1))
        data = DataLoader(TensorDataset(tokens[:, :-1], tokens[:, 1:]), batch_size=BATCH)
        self.device = torch_xla.device()
        self.train_device_loader = pl.MpDeviceLoader(data, self.device)
        self.model = TinyDecoder().to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.loss_fn = nn.CrossEntropyLoss()
        self.compiled_step_fn = torch_xla.compile(self.step_fn, full_graph=True, name="decoder_step_fn")

    def step_fn(self, data: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad()
        logits = self.model(data)
        loss = self.loss_fn(logits.view(-1, VOCAB), target.reshape(-1))
        loss.backward()
        self.optimizer.step()
        return loss

    def _train_update(self, step: int, loss: torch.Tensor) -> None:
        print(f"step {step} loss {loss.item():.4f}")

    def train_loop_fn(self) -> None:
        self.model.train()
        loader = itertools.islice(self.train_device_loader, NUM_STEPS)
        for step, (data, target) in enumerate(loader):  # corpus: train-loop
            hook.mark(f"train:i{step}")
            loss = self.compiled_step_fn(data, target)  # corpus: step-call
            if step % 4 == 0:
                xm.add_step_closure(self._train_update, args=(step, loss))
        xm.wait_device_ops()


def main() -> None:
    hook.start("xla")
    Trainer().train_loop_fn()
    hook.finish(iterations=NUM_STEPS)


if __name__ == "__main__":
    main()
