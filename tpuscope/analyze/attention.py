"""Attention in a graph's matmuls, known by its shape, not by its name: a pair of batched matmuls
with the same batch (batch x heads) and rows, scores [S,D]@[D,T] and values [S,T]@[T,D], i.e.
one's (N, K) is the other's (K, N). Flax's einsum, `jax.nn.dot_product_attention`, Keras's
MultiHeadAttention and a hand-written `q @ k.T` all lower to it, on the CPU as dots and on a TPU
as convolutions (hlo_rows reads both into batch, M, N, K). An attention kernel (a Pallas
splash or flash attention, which Keras's MultiHeadAttention takes on a TPU) is one custom call
named so, its queries its first array operand."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tpuscope.analyze.shapes import parse_shape

KERNEL_NAME = re.compile(r"(?:mha|flash|attention)", re.I)
_FLOATS = ("bf16", "f16", "f32", "f8e4m3fn", "f8e5m2")


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


def narrow_kernels(top: pd.DataFrame, edge: int) -> dict[tuple[str, str], int]:
    """{(module, op): head_dim} of the attention kernels (top-level custom calls named as one)
    whose queries' last dim is narrower than the edge: a kernel pads each head to the MXU."""
    calls = top[top["opcode"] == "custom-call"]
    calls = calls[calls["name"].astype(str).str.contains(KERNEL_NAME)]
    if calls.empty:
        return {}
    shapes = dict(zip(zip(top["module"], top["name"], strict=True), top["shape"], strict=True))
    found = {}
    for row in calls.itertuples():
        arrays = [parse_shape(str(shapes.get((row.module, name), ""))) for name in row.operands]
        queries = [a for a in arrays if a and a.dtype in _FLOATS and len(a.dims) >= 3]
        d = queries[0].dims[-1] if queries else None
        if d is not None and d < edge:
            found[(row.module, row.name)] = int(d)
    return found


def computed_in_f32(matmuls: pd.DataFrame) -> bool:
    """Whether the attention computes in f32, the model's choice (most of its matmul FLOPs
    take f32 operands), not a library's f32 inside a bf16 attention
    (`jax.nn.dot_product_attention` takes its scores' gradient in f32)."""
    f32 = (matmuls["lhs_dtype"] == "f32") | (matmuls["rhs_dtype"] == "f32")
    flops = matmuls["flops"].fillna(0).astype(float)
    return bool(flops.sum() > 0 and flops[f32].sum() >= flops.sum() / 2)
