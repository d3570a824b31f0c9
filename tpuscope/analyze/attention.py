"""Attention in a graph's matmuls, known by its shape, not by its name: a pair of batched matmuls
with the same batch (batch x heads) and rows, scores [S,D]@[D,T] and values [S,T]@[T,D], i.e.
one's (N, K) is the other's (K, N). Flax's einsum, `jax.nn.dot_product_attention`, Keras's
MultiHeadAttention and a hand-written `q @ k.T` all lower to it, on the CPU as dots and on a TPU
as convolutions (hlo_rows reads both into batch, M, N, K)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


def head_dims(costs: pd.DataFrame, edge: int) -> set[int]:
    """Attention head dims below the MXU edge. D is the K of the scores, the one whose output is
    square (self attention, S == T); without a square one, the smaller of the two."""
    batched = costs[costs["batch"] > 1]
    keys = set(zip(batched["batch"], batched["m"], batched["n"], batched["k"], strict=True))
    dims = set()
    for b, m, n, k in keys:
        if (b, m, k, n) not in keys or (
            n == k and m != n
        ):  # a square-weight matmul pairs with itself
            continue
        d = k if m == n else n if m == k else min(n, k)
        if d < edge:
            dims.add(int(d))
    return dims


def attention_mask(costs: pd.DataFrame, edge: int) -> np.ndarray:
    """The batched matmuls that contract over, or produce, a too-narrow head dim."""
    dims = list(head_dims(costs, edge))
    if not dims:
        return np.zeros(len(costs), bool)
    return (costs["batch"].to_numpy() > 1) & (np.isin(costs["k"], dims) | np.isin(costs["n"], dims))


@dataclass
class NarrowAttention:
    """A too-narrow head dim, the batched matmuls that carry it (in any orientation: the
    backward pass transposes them), and the element count of its score tensors."""

    head_dim: int
    matmuls: pd.DataFrame
    score_elements: int
    score_dims: tuple[int, int]  # S and T


def narrow_attention(dots: pd.DataFrame, edge: int) -> NarrowAttention | None:
    """The narrowest head dim under the edge with its matmuls, or None."""
    dims = head_dims(dots, edge)
    if not dims:
        return None
    d = min(dims)
    batched = dots[dots["batch"] > 1]
    carries = (batched[["m", "n", "k"]] == d).any(axis=1)
    scores = batched[(batched["k"] == d) & (batched["m"] != d) & (batched["n"] != d)]
    if scores.empty:
        return None
    first = scores.iloc[0]
    elements = int(first["batch"] * first["m"] * first["n"])
    return NarrowAttention(int(d), batched[carries], elements, (int(first["m"]), int(first["n"])))
