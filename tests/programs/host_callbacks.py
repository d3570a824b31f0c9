"""A jitted JAX training step that calls the host from inside, as JAX's external-callbacks
guide shows: a `jax.debug.print` of the loss (left in after debugging) and a numpy function of
the loss whose result scales the update (`jax.pure_callback`, computing with numpy for HOST_MS
of its thread's CPU, as a slow host function would). Prints each loss (the debug print), then
`step_ms <mean>` over the steps after the warm-up.

usage: host_callbacks.py [STEPS] [print|pure|both|none] [HOST_MS]
"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
which = sys.argv[2] if len(sys.argv) > 2 else "both"
host_s = float(sys.argv[3]) / 1e3 if len(sys.argv) > 3 else 0.003
table = np.random.default_rng(0).standard_normal((64, 64))


def host_scale(loss):
    """A host-side schedule of the loss, in numpy (busy for host_s of this thread's CPU)."""
    began, acc = time.thread_time(), table
    while time.thread_time() - began < host_s:
        acc = np.tanh(acc @ table) / 8
    return np.float32(1.0 / (1.0 + float(loss) + 0.0 * float(acc[0, 0])))


@jax.jit
def step(w, x):
    loss, grad = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
    if which in ("print", "both"):
        jax.debug.print("loss {}", loss)  # DEBUG_PRINT_LINE
    if which in ("pure", "both"):
        scale = jax.pure_callback(  # PURE_CALLBACK_LINE
            host_scale, jax.ShapeDtypeStruct((), jnp.float32), loss
        )
        grad = grad * scale
    return w - 0.01 * grad, loss


w = jnp.ones((256, 256)) / 256
x = jnp.ones((512, 256))
for i in range(steps):
    if i == 2:
        jax.block_until_ready(w)
        start = time.perf_counter()
    w, loss = step(w, x)
jax.block_until_ready(w)
print(f"step_ms {1e3 * (time.perf_counter() - start) / (steps - 2):.3f}")
