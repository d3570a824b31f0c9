"""The transformer used by the bundled workloads, with attention written out.

Attention is spelled as plain matmuls (not nn.MultiheadAttention or SDPA) so the
head_dim is visible in the matmul shapes every backend records: the TensorCore
detector sees `[.., S, 64] x [.., 64, S]` and can say head_dim 64 half-fills a
128-wide MXU.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, d_model: int, heads: int, max_seq: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        causal = torch.full((max_seq, max_seq), float("-inf")).triu(1)
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        weights = torch.softmax(scores + self.causal[:seq, :seq], dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(batch, seq, width))


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, max_seq: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Attention(d_model, heads, max_seq)
        self.ff = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.ff(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, max_seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, heads, max_seq) for _ in range(layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(self.embed(tokens))))
