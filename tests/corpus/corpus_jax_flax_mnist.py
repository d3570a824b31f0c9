"""Flax NNX + optax MNIST-style training, in the style of the Flax MNIST examples.

Idiom: google/flax examples/mnist (a small CNN, a jitted train step taking a batch, an epoch
loop over shuffled batches, a test-set accuracy after each epoch) written with `flax.nnx` as
in Flax's NNX MNIST tutorial (`nnx.Optimizer(model, optax.adamw(...), wrt=nnx.Param)`,
`@nnx.jit def train_step(model, optimizer, batch)`), and the un-jitted `accuracy()` of JAX's
examples/mnist_classifier.py, computed with eager jnp ops; after the loop, one more
`model(images)` call to predict. Synthetic MNIST-shaped data. In the corpus because tpuscope
diffed first compiles of different code against each other (the eager primitives of
`accuracy()`, the model call after the loop): a correct tool finds no recompile.
"""

from __future__ import annotations

import hook
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

BATCH, TRAIN_BATCHES, EPOCHS = 32, 6, 2


class CNN(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.conv1 = nnx.Conv(1, 8, kernel_size=(3, 3), rngs=rngs)
        self.conv2 = nnx.Conv(8, 16, kernel_size=(3, 3), rngs=rngs)
        self.linear1 = nnx.Linear(7 * 7 * 16, 64, rngs=rngs)
        self.linear2 = nnx.Linear(64, 10, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = nnx.avg_pool(nnx.relu(self.conv1(x)), window_shape=(2, 2), strides=(2, 2))
        x = nnx.avg_pool(nnx.relu(self.conv2(x)), window_shape=(2, 2), strides=(2, 2))
        x = x.reshape(x.shape[0], -1)
        return self.linear2(nnx.relu(self.linear1(x)))


def loss_fn(model: CNN, batch: dict[str, jax.Array]) -> jax.Array:
    logits = model(batch["image"])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()


@nnx.jit
def train_step(model: CNN, optimizer: nnx.Optimizer, batch: dict[str, jax.Array]) -> jax.Array:
    loss, grads = nnx.value_and_grad(loss_fn)(model, batch)
    optimizer.update(model, grads)
    return loss


def accuracy(model: CNN, images: jax.Array, labels: jax.Array) -> float:
    predicted = jnp.argmax(model(images), axis=1)  # corpus: accuracy-model-call
    return float(jnp.mean(predicted == labels))


def main() -> None:
    hook.start("jax")
    rng = np.random.default_rng(0)
    train_images = rng.standard_normal((TRAIN_BATCHES * BATCH, 28, 28, 1), dtype=np.float32)
    train_labels = rng.integers(0, 10, TRAIN_BATCHES * BATCH).astype(np.int32)
    test_images = jnp.asarray(rng.standard_normal((64, 28, 28, 1), dtype=np.float32))
    test_labels = jnp.asarray(rng.integers(0, 10, 64).astype(np.int32))
    model = CNN(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    step = 0
    for epoch in range(1, EPOCHS + 1):
        perm = rng.permutation(TRAIN_BATCHES * BATCH)
        for i in range(TRAIN_BATCHES):  # corpus: train-loop
            hook.mark(f"train:e{epoch}:i{i}")
            idx = perm[i * BATCH:(i + 1) * BATCH]
            batch = {"image": jnp.asarray(train_images[idx]), "label": jnp.asarray(train_labels[idx])}
            loss = train_step(model, optimizer, batch)  # corpus: step-call
            step += 1
        hook.mark(f"eval:e{epoch}")
        acc = accuracy(model, test_images, test_labels)  # corpus: accuracy-call
        print(f"epoch {epoch} loss {float(loss):.4f} test accuracy {acc:.4f}")
    hook.mark("after-loop")
    predictions = model(test_images[:8]).argmax(axis=1)  # corpus: after-loop-call
    print(f"predictions {predictions.tolist()}")
    hook.finish(iterations=step)


if __name__ == "__main__":
    main()
