"""A dispatch-bound jitted step: a 256x256 bf16 layer trained by SGD, the loop never blocking
(`w = step(w, x)`), as a small model's training loop runs; the result is read once at the end.

    tiny_step.py [--steps 3000] [--block] [--size 256] [--lean]

--block waits for every step's loss (`float(loss)` each step, as a loop that logs every step).
--lean: the step is one layer's update and returns only the weights (`w = step(w, x)`, no
gradient, no loss): fewer buffers, the shortest dispatch (about 120 us on the v5e's host).
Prints `step_us <mean step time over the timed steps>`.
"""

import argparse
import time

import jax
import jax.numpy as jnp

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3000)
parser.add_argument("--block", action="store_true")
parser.add_argument("--lean", action="store_true")
parser.add_argument("--size", type=int, default=256, help="the layer's width and the batch")
args = parser.parse_args()


@jax.jit
def step(w, x):
    def loss_fn(w):
        return jnp.mean(jnp.tanh(x @ w).astype(jnp.float32) ** 2)

    loss, g = jax.value_and_grad(loss_fn)(w)
    return w - 0.01 * g.astype(w.dtype), loss


@jax.jit
def lean_step(w, x):
    return w - 0.01 * jnp.tanh(x @ w)


n = args.size
w = (jax.random.normal(jax.random.PRNGKey(0), (n, n)) * 0.05).astype(jnp.bfloat16)
x = jax.random.normal(jax.random.PRNGKey(1), (n, n)).astype(jnp.bfloat16)
WARM = 100
for i in range(args.steps):
    if i == WARM:
        jax.block_until_ready(w)
        t0 = time.perf_counter()
    if args.lean:
        w = lean_step(w, x)
        continue
    w, loss = step(w, x)
    if args.block:
        float(loss)
jax.block_until_ready(w)
elapsed = time.perf_counter() - t0
if args.lean:
    loss = jnp.mean(w.astype(jnp.float32) ** 2)
print(f"step_us {1e6 * elapsed / (args.steps - WARM):.2f} loss {float(loss):.5f}")
