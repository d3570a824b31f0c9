"""Train a small Flax MLP classifier with optax on synthetic data (JAX; runs on the CPU).

The dataset size is not a multiple of the batch size, so the last batch of every
epoch is shorter and `jax.jit` traces and compiles `train_step` again for the new
shape. Under tpuscope the report names that retrace, the argument whose shape
changed and the line that called the step:

    tpuscope run python examples/jax_train.py
    tpuscope run python examples/jax_train.py --drop-last     # the fix: no retrace

Needs `pip install jax flax optax`.
"""

from __future__ import annotations

import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state


class MLP(nn.Module):
    """Two hidden layers: enough to make train_step a real forward/backward/update."""

    hidden: int
    classes: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.relu(nn.Dense(self.hidden)(x))
        x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.classes)(x)


@jax.jit
def train_step(state: train_state.TrainState, batch: dict[str, jax.Array]):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, batch["x"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def make_data(samples: int, dim: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Separable synthetic data: the label is the argmax of a fixed projection."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(samples, dim)).astype(np.float32)
    y = (x @ rng.normal(size=(dim, classes))).argmax(axis=1).astype(np.int32)
    return x, y


def batches(x: np.ndarray, y: np.ndarray, size: int, drop_last: bool):
    end = len(x) - len(x) % size if drop_last else len(x)
    for start in range(0, end, size):
        yield {"x": x[start : start + size], "y": y[start : start + size]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--drop-last", action="store_true", help="drop the short last batch (no retrace)")
    args = parser.parse_args()

    x, y = make_data(args.samples, args.dim, args.classes, args.seed)
    model = MLP(args.hidden, args.classes)
    # One compiled init instead of dozens of eagerly compiled initializer ops.
    params = jax.jit(model.init)(jax.random.key(args.seed), jnp.zeros((1, args.dim)))["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adamw(args.lr))

    history = []
    for _ in range(args.epochs):
        for batch in batches(x, y, args.batch, args.drop_last):
            state, loss = train_step(state, batch)
            history.append(loss)
    losses = jax.device_get(history)  # one host sync, after training
    per_epoch = np.array_split(np.asarray(losses), args.epochs)
    for epoch, values in enumerate(per_epoch):
        print(f"epoch {epoch}: mean loss {values.mean():.4f} over {len(values)} steps")


if __name__ == "__main__":
    main()
