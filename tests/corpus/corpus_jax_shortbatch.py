"""JAX + optax training whose data loader keeps a short last batch (`drop_last=False` style).

Idiom: the training loops of JAX's examples (examples/mnist_classifier.py: a `data_stream()` of
`num_batches = num_complete_batches + bool(leftover)` batches, so the last one is short) and
Flax's examples (a jitted `train_step(params/state, batch)` with the batch a dict
`{'x': ..., 'y': ...}`), with optax.adam and an MLP as a params pytree. 200 samples in batches
of 32: 6 full batches and one of 8, 2 epochs. In the corpus as a genuine retrace: `train_step`
compiles once more at the first short batch (iteration 6), and the finding must name
`batch['x']` and the call line.
"""

from __future__ import annotations

from collections.abc import Iterator

import hook
import jax
import jax.numpy as jnp
import numpy as np
import optax

SAMPLES, BATCH, EPOCHS, FEATURES = 200, 32, 2, 64

optimizer = optax.adam(1e-3)


def init_params(key: jax.Array) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (FEATURES, 128)) * 0.05, "b1": jnp.zeros(128),
            "w2": jax.random.normal(k2, (128, 10)) * 0.05, "b2": jnp.zeros(10)}


def loss_fn(params: dict[str, jax.Array], batch: dict[str, jax.Array]) -> jax.Array:
    hidden = jax.nn.relu(batch["x"] @ params["w1"] + params["b1"])
    logits = hidden @ params["w2"] + params["b2"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()


@jax.jit
def train_step(params: dict[str, jax.Array], opt_state: optax.OptState,
               batch: dict[str, jax.Array]) -> tuple[dict[str, jax.Array], optax.OptState, jax.Array]:
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def data_stream(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> Iterator[dict[str, jax.Array]]:
    num_complete_batches, leftover = divmod(len(x), BATCH)
    num_batches = num_complete_batches + bool(leftover)
    perm = rng.permutation(len(x))
    for i in range(num_batches):
        idx = perm[i * BATCH:(i + 1) * BATCH]
        yield {"x": jnp.asarray(x[idx]), "y": jnp.asarray(y[idx])}


def main() -> None:
    hook.start("jax")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((SAMPLES, FEATURES), dtype=np.float32)
    y = rng.integers(0, 10, SAMPLES).astype(np.int32)
    params = init_params(jax.random.PRNGKey(0))
    opt_state = optimizer.init(params)
    step = 0
    for epoch in range(EPOCHS):
        for batch in data_stream(x, y, rng):  # corpus: train-loop
            hook.mark(f"train:i{step}")
            params, opt_state, loss = train_step(params, opt_state, batch)  # corpus: step-call
            if step % 4 == 0:
                print(f"epoch {epoch} step {step} loss {float(loss):.4f}")
            step += 1
    hook.finish(iterations=step)


if __name__ == "__main__":
    main()
