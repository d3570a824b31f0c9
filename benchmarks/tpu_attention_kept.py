"""What attention keeps of its device time at head_dim 128 against 64, the model width held.

    python3 benchmarks/tpu_attention_kept.py [--reps 20] > kept.jsonl

The head_dim card (analyze/op_time) takes the narrow head's attention ops to keep head_dim/128
of their time at head_dim 128 with half the heads. This measures that share, both sides in one
process: plain XLA attention (einsum, causal mask, f32 softmax) and
`jax.nn.dot_product_attention`, forward and forward+backward, at several (batch, heads, seq),
each jitted, run twice, then timed over --reps calls to its result ready. One JSON line per case
(milliseconds a call at head_dim 64 and 128, and kept = their ratio). On the CPU it runs one
small shape, to try the script.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

SHAPES = [(16, 16, 512), (16, 16, 511), (16, 16, 256), (64, 16, 128), (4, 16, 1024)]
SHAPES += [(2, 16, 2048), (8, 32, 512), (16, 8, 512)]  # (batch, heads at head_dim 64, seq)


def plain(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """Attention as nanoGPT and Flax write it, in (batch, heads, seq, head_dim)."""
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
    t = q.shape[2]
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, jnp.finfo(s.dtype).min)
    p = jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(q.dtype)
    return jnp.einsum("bhqk,bhkd->bhqd", p, v)


def dpa(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """jax.nn.dot_product_attention, which takes (batch, seq, heads, head_dim)."""
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    return jax.nn.dot_product_attention(q, k, v, is_causal=True).transpose(0, 2, 1, 3)


def seconds_per_call(fn: Callable, args: tuple, reps: int) -> float:
    for _ in range(2):  # compile, then one warm call
        jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    for _ in range(reps):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / reps


def one_case(attention: Callable, train: bool, shape: tuple[int, ...], reps: int) -> float:
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q, k, v = (jax.random.normal(key, shape, jnp.bfloat16) for key in keys)
    if train:

        def loss(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
            return jnp.sum(attention(q, k, v).astype(jnp.float32) ** 2)

        fn = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    else:
        fn = jax.jit(attention)
    return seconds_per_call(fn, (q, k, v), reps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    shapes = SHAPES if jax.default_backend() != "cpu" else [(2, 4, 64)]
    device = jax.devices()[0].device_kind
    for name, attention in (("plain", plain), ("dpa", dpa)):
        for train in (True, False):
            for b, h, t in shapes:
                t64 = one_case(attention, train, (b, h, t, 64), args.reps)
                t128 = one_case(attention, train, (b, h // 2, t, 128), args.reps)
                row = dict(impl=name, train=train, b=b, h=h, t=t, t64_ms=round(t64 * 1e3, 4))
                row |= dict(t128_ms=round(t128 * 1e3, 4), kept=round(t128 / t64, 3))
                print(json.dumps(row | {"device": device, "jax": jax.__version__}), flush=True)


if __name__ == "__main__":
    main()
