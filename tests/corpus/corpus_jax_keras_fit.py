"""Keras 3 on the JAX backend: `model.compile` then `model.fit`, the loop Keras owns.

Idiom: keras.io's "Simple MNIST convnet" example and Keras 3's getting-started guide: a
`keras.Sequential` of `keras.Input`, Conv2D / MaxPooling2D / Flatten / Dropout / Dense layers,
`model.compile(loss="sparse_categorical_crossentropy", optimizer="adam", metrics=["accuracy"])`,
`model.fit(x_train, y_train, batch_size=..., epochs=...)` on NumPy arrays, then
`model.evaluate(x_test, y_test, verbose=0)` and the score printed; KERAS_BACKEND=jax set before
Keras is imported, as Keras's docs say. Synthetic MNIST-shaped data: 168 training samples in
batches of 32, 2 epochs: each epoch is 5 full batches and a last one of 8, which Keras keeps
(its data adapter has no drop_last): 12 train iterations. Keras's jitted `train_step` compiles
at the first batch and again for the short batch of epoch 1 (epoch 2 hits the cache): the
program's one recompile, the one every `fit` whose sample count is not a multiple of the batch
size has. A per-batch callback marks the iterations for the truth (hook.py); it does nothing
unless CORPUS_TRUTH is set.
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"

import hook  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras_marks import MarkBatches  # noqa: E402

SAMPLES, BATCH, EPOCHS, TEST_SAMPLES = 168, 32, 2, 64


def build_model() -> keras.Model:
    return keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(8, kernel_size=(3, 3), activation="relu"),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Conv2D(16, kernel_size=(3, 3), activation="relu"),
        keras.layers.MaxPooling2D(pool_size=(2, 2)),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(10, activation="softmax"),
    ])


def main() -> None:
    hook.start("jax")
    rng = np.random.default_rng(0)
    x_train = rng.random((SAMPLES, 28, 28, 1), dtype=np.float32)
    y_train = rng.integers(0, 10, SAMPLES)
    x_test = rng.random((TEST_SAMPLES, 28, 28, 1), dtype=np.float32)
    y_test = rng.integers(0, 10, TEST_SAMPLES)
    keras.utils.set_random_seed(0)
    model = build_model()
    model.compile(loss="sparse_categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
    marks = MarkBatches()
    model.fit(x_train, y_train, batch_size=BATCH, epochs=EPOCHS, verbose=0, callbacks=[marks])  # corpus: fit
    score = model.evaluate(x_test, y_test, verbose=0)  # corpus: evaluate
    print(f"test loss {score[0]:.4f} test accuracy {score[1]:.4f}")
    hook.finish(iterations=marks.iterations)


if __name__ == "__main__":
    main()
