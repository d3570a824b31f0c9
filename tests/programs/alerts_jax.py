"""A small JAX training loop for the live alerts (tests/test_alerts.py).

usage: alerts_jax.py MODE [HOLD_S]
  clean      a jitted train step over batches of 32, its first compile only: no alert
  recompile  step 5 gets a short batch of 8 (a retrace of train_step)
After step 5 it prints MARK, keeps stepping (cached) for HOLD_S seconds (default 8), prints LAST.
"""

import sys
import time

import jax
import jax.numpy as jnp

mode = sys.argv[1]
hold = float(sys.argv[2]) if len(sys.argv) > 2 else 8.0
key = jax.random.PRNGKey(0)
params = {"w": jax.random.normal(key, (16, 4)), "b": jnp.zeros(4)}


@jax.jit
def train_step(params, batch):
    def loss(p):
        return jnp.mean((batch["x"] @ p["w"] + p["b"] - batch["y"]) ** 2)

    grads = jax.grad(loss)(params)
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)


def batch(rows: int) -> dict:
    return {"x": jnp.ones((rows, 16)), "y": jnp.zeros((rows, 4))}


batches = {rows: batch(rows) for rows in (32, 8)}
for step in range(7):
    params = train_step(params, batches[8 if mode == "recompile" and step == 5 else 32])
    jax.block_until_ready(params)
    if step == 5:
        print("MARK", flush=True)
end = time.monotonic() + hold
while time.monotonic() < end:
    params = train_step(params, batches[32])
    jax.block_until_ready(params)
    time.sleep(0.2)
print("LAST", flush=True)
