"""A small transformer trained with static shapes: the clean baseline.

Runs on whatever XLA device torch_xla finds (set PJRT_DEVICE=CPU to run without a
TPU; `tpuscope run` does that for you). Every step has the same shapes, so after
warm-up there should be no recompile, no fallback and no host sync.
"""

import argparse

import torch
import torch.nn as nn
import torch_xla


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, heads, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.ff(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, heads) for _ in range(layers)])
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(tokens)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--lr", type=float, default=3e-4)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device()
    model = TinyLM(args.vocab, args.d_model, args.heads, args.layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    data = torch.randint(0, args.vocab, (args.steps, args.batch, args.seq + 1))

    for step in range(args.steps):
        batch = data[step].to(device)
        inputs, targets = batch[:, :-1], batch[:, 1:]
        opt.zero_grad()
        logits = model(inputs)
        loss = loss_fn(logits.reshape(-1, args.vocab), targets.reshape(-1))
        loss.backward()
        opt.step()
        torch_xla.sync()
    print(f"trained {args.steps} steps, final loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
