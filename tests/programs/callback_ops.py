"""A whole training run in one jitted call (purejaxrl's shape: `lax.scan` over the updates) whose
debug callback reads its arguments with JAX ops, as purejaxrl's ppo.py does with its DEBUG
config: a boolean mask on jax.Arrays, each op dispatched (and compiled) on its own.

    python callback_ops.py UPDATES [numpy]

`numpy`: the callback's arguments made numpy arrays first (the fix)."""

import sys

import jax
import jax.numpy as jnp
import numpy as np

UPDATES = int(sys.argv[1]) if len(sys.argv) > 1 else 40
AS_NUMPY = len(sys.argv) > 2 and sys.argv[2] == "numpy"


def callback(info):
    if AS_NUMPY:
        info = jax.tree_util.tree_map(np.asarray, info)
    returns = info["returns"][info["done"]]  # CALLBACK_OPS_LINE
    for value in returns:
        print(f"episodic return={float(value):.3f}")


def train(key):
    def update(carry, key):
        w = carry
        x = jax.random.normal(key, (64, 16))
        loss, grad = jax.value_and_grad(lambda w: jnp.mean((jnp.tanh(x @ w) - 0.5) ** 2))(w)
        returns = jnp.tanh(x[:, 0]) + loss
        jax.debug.callback(callback, {"returns": returns, "done": x[:, 1] > 1.5})  # DEBUG_LINE
        return w - 0.1 * grad, loss

    w0 = jnp.zeros((16, 4))
    return jax.lax.scan(update, w0, jax.random.split(key, UPDATES))


out = jax.jit(train)(jax.random.key(0))
