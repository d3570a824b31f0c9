"""A training loop with the compile shapes of diffrax's neural ODE example, in plain JAX: a
learnt scale made as upstream makes it, `jnp.array(1.0)` (weakly typed: the first update returns
it strongly typed, so the step compiles again at step 1), a second phase on longer series (the
step compiled once more, at its first step), and the fitted model evaluated once after the loop
at another length by the jitted loss that made its first (a compile after the loop); a
held-out check at step 10, a jitted function first compiled inside the loop.

    python weak_phases.py STEPS_PER_PHASE [strong]

`strong`: the scale made with its dtype, `jnp.array(1.0, dtype=jnp.float32)` (the fix)."""

import sys

import jax
import jax.numpy as jnp

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
STRONG = len(sys.argv) > 2 and sys.argv[2] == "strong"


LEARNING_RATE = jnp.float32(0.05)  # strongly typed, as an optimizer's state is


def loss_of(params, series):
    fitted = params["scale"] * jnp.tanh(series @ params["w"])
    return jnp.mean((fitted - series) ** 2)


predict = jax.jit(loss_of)  # used to make the data and to evaluate the fitted model
evaluate = jax.jit(lambda params, series: loss_of(params, series))  # a held-out check


@jax.jit
def make_step(params, series):
    loss, grads = jax.value_and_grad(loss_of)(params, series)
    return loss, jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads)


scale = jnp.array(1.0, dtype=jnp.float32) if STRONG else jnp.array(1.0)  # SCALE_LINE
params = {"scale": scale, "w": jnp.eye(32) * 0.5}
key = jax.random.PRNGKey(0)
print(f"initial loss {float(predict(params, jax.random.normal(key, (64, 160, 32)))):.5f}")
for length in (16, 160):  # 10% of each series, then all of it
    series = jax.random.normal(key, (64, length, 32))
    for step in range(STEPS):
        loss, params = make_step(params, series)  # STEP_LINE
        if step % 10 == 0:
            print(f"length {length} step {step} loss {float(loss):.5f}")
        if step == 10 and length == 16:  # a held-out check, first compiled in the loop
            print(f"held-out loss {float(evaluate(params, series[:8])):.5f}")
print(f"fitted loss {float(predict(params, jax.random.normal(key, (1, 100, 32)))):.5f}")  # AFTER_LINE
