"""A jitted JAX loop that takes its own jax.profiler trace of steps 4-5 (`--own-trace DIR`),
as a program that profiles itself does; prints its loss."""

import sys

import jax
import jax.numpy as jnp


@jax.jit
def step(w, x):
    return w - 0.01 * jnp.tanh(x @ w), jnp.mean(w)


own = sys.argv[sys.argv.index("--own-trace") + 1] if "--own-trace" in sys.argv else None
w, x = jnp.ones((64, 64)) * 0.1, jnp.ones((64, 64))
for i in range(10):
    if own and i == 4:
        jax.profiler.start_trace(own)
    w, loss = step(w, x)
    if own and i == 5:
        jax.block_until_ready(w)
        jax.profiler.stop_trace()
print(f"loss {float(loss):.6f}")
