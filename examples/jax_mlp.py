"""Train an MLP with Adam in plain JAX (no Flax, no optax), its parameters made outside `jit`.

The init runs op by op: every `jax.random.normal`, division and cast outside `jit` compiles
on its own (on a TPU v5e, 0.5-2.5 s each), and the jitted step compiles at the first call.
Under tpuscope the `compile_time` card weighs those compiles against the run, splits the
step's from the init's at their lines, and names the fixes: a persistent compilation cache
(the next run loads instead of compiling), a jitted init, an ahead-of-time compiled step:

    tpuscope run python examples/jax_mlp.py
    JAX_COMPILATION_CACHE_DIR=/tmp/jax-cache tpuscope run python examples/jax_mlp.py   # twice
    tpuscope run python examples/jax_mlp.py --jit-init      # one compiled init

Needs only JAX (benchmarks/compile_cache.py runs it on a bare TPU machine).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp


def init(key: jax.Array, sizes: list[int]) -> list[dict[str, jax.Array]]:
    """He-initialised layers; run eagerly unless --jit-init."""
    params = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:], strict=True):
        key, sub = jax.random.split(key)
        weight = jax.random.normal(sub, (d_in, d_out), jnp.float32) / jnp.sqrt(d_in / 2.0)
        params.append({"w": weight.astype(jnp.bfloat16), "b": jnp.zeros((d_out,), jnp.bfloat16)})
    return params


def loss_fn(params: list[dict[str, jax.Array]], x: jax.Array, y: jax.Array) -> jax.Array:
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    out = x @ params[-1]["w"] + params[-1]["b"]
    return jnp.mean((out.astype(jnp.float32) - y) ** 2)


@jax.jit
def train_step(params, opt, x, y, lr=1e-3, b1=0.9, b2=0.999):
    """One Adam step (bias correction left out: a few steps of a benchmark)."""
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    m = jax.tree_util.tree_map(
        lambda m, g: b1 * m + (1 - b1) * g.astype(jnp.float32), opt[0], grads
    )
    v = jax.tree_util.tree_map(
        lambda v, g: b2 * v + (1 - b2) * jnp.square(g.astype(jnp.float32)), opt[1], grads
    )
    params = jax.tree_util.tree_map(
        lambda p, m, v: (p - lr * m / (jnp.sqrt(v) + 1e-8)).astype(p.dtype), params, m, v
    )
    return params, (m, v), loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=1, help="hidden layers")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--jit-init", action="store_true", help="one compiled init (the fix)")
    args = parser.parse_args()

    sizes = [args.dim] + [args.hidden] * args.layers + [args.dim]
    make = jax.jit(init, static_argnums=1) if args.jit_init else init
    params = make(jax.random.key(0), tuple(sizes) if args.jit_init else sizes)
    zeros = jax.tree_util.tree_map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
    opt = (zeros, zeros)
    x = jax.random.normal(jax.random.key(1), (args.batch, args.dim), jnp.bfloat16)
    y = jnp.zeros((args.batch, args.dim), jnp.float32)
    losses = []
    for _ in range(args.steps):
        params, opt, loss = train_step(params, opt, x, y)
        losses.append(loss)
    print(f"loss {float(losses[0]):.4f} -> {float(losses[-1]):.4f} over {args.steps} steps")


if __name__ == "__main__":
    main()
