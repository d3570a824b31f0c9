"""A program whose work is one jitted call, dispatched and never waited for (purejaxrl's shape
without its callback): a setup of SETUP_S seconds first, then the call; JAX's exit waits for the
device. `wait`: block on the result and print the call's time (the bare twin's clock)."""

import sys
import time

import jax
import jax.numpy as jnp

SETUP_S = 2.5
time.sleep(SETUP_S)  # the program's setup: data, environments


def train(x):
    return jax.lax.fori_loop(0, 1500, lambda i, x: jnp.tanh(x @ x.T), x)


began = time.perf_counter()
out = jax.jit(train)(jnp.ones((512, 512)))
if len(sys.argv) > 1 and sys.argv[1] == "wait":
    out.block_until_ready()
    print(f"call_s {time.perf_counter() - began:.3f}")
