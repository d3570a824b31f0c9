"""A small causal transformer LM whose attention heads are 64 wide: a TensorCore-underuse example.

head_dim 64 is common (GPT-2, many ViTs), but a TPU's matrix unit is a 128x128
systolic array (256x256 on v6e and later): the attention matmuls q @ k^T (contracting
over head_dim) and weights @ v (producing head_dim columns) fill only half of it
(a quarter on v6e). Profile it and see `tensorcore_underuse` name the lines below:

    tpuscope run --deep python examples/transformer_head_dim64.py
    tpuscope run --deep --target v6e python examples/transformer_head_dim64.py --head-dim 128

Attention is written as plain matmuls so the head_dim is visible in the HLO every
backend records. Runs on the CPU with PJRT_DEVICE=CPU (tpuscope sets it when no TPU
is present).
"""

import argparse
import math

import torch
import torch.nn as nn
import torch_xla


class Attention(nn.Module):
    def __init__(self, d_model: int, head_dim: int, max_seq: int) -> None:
        super().__init__()
        self.heads, self.head_dim = d_model // head_dim, head_dim
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.register_buffer("causal", torch.full((max_seq, max_seq), float("-inf")).triu(1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        weights = torch.softmax(scores + self.causal[:seq, :seq], dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(batch, seq, width))


class Block(nn.Module):
    def __init__(self, d_model: int, head_dim: int, max_seq: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, head_dim, max_seq)
        self.ff = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ff(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d_model: int, head_dim: int, layers: int, max_seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, head_dim, max_seq) for _ in range(layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(self.embed(tokens))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=512)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch_xla.device()
    model = TinyLM(args.vocab, args.d_model, args.head_dim, args.layers, args.seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, args.vocab, (4, args.batch, args.seq + 1))
    for step in range(args.steps):
        batch = data[step % len(data)].to(device)
        logits = model(batch[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch_xla.sync()
    print(f"trained {args.steps} steps, head_dim {args.head_dim}, final loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
