"""Keras 3 on JAX with the data augmentation inside the model, where layers cannot be jitted.

Idiom: keras-io's `examples/vision/image_classification_with_vision_transformer.py` and
`mlp_image_classification.py` (read for this driver): a `keras.Sequential` augmentation of
`RandomFlip("horizontal")`, `RandomRotation` and `RandomZoom(height_factor=0.2,
width_factor=0.2)` called on the `keras.Input` of the model, so it runs inside `fit`, then a
small convnet; `model.compile(optimizer="adam", loss=SparseCategoricalCrossentropy(from_logits=
True), metrics=["accuracy"])`, `model.fit` on NumPy arrays. Keras 3 marks RandomRotation and
RandomZoom `supports_jit = False`, and with `jit_compile="auto"` (the default) a model with such a layer
is not jitted: `fit` runs every op of the model, its gradient and the optimizer one by one
(on a v5e keras-io's ViT so ran 34,119 ops in 10 batches, 14 s a batch; docs/tpu.md).
Synthetic CIFAR-shaped data: 160 samples in batches of 32, 2 epochs: 10 iterations, no short
batch. A per-batch callback marks the iterations for the truth (hook.py); it does nothing
unless CORPUS_TRUTH is set.
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"

import hook  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers  # noqa: E402
from keras_marks import MarkBatches  # noqa: E402

SAMPLES, BATCH, EPOCHS = 160, 32, 2


def build_model() -> keras.Model:
    augment = keras.Sequential(
        [
            layers.RandomFlip("horizontal"),
            layers.RandomRotation(factor=0.02),
            layers.RandomZoom(height_factor=0.2, width_factor=0.2),
        ],
        name="data_augmentation",
    )
    inputs = keras.Input(shape=(32, 32, 3))
    x = layers.Rescaling(1.0 / 255)(augment(inputs))
    x = layers.Conv2D(16, 3, activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    x = layers.Flatten()(x)
    return keras.Model(inputs, layers.Dense(10)(x))


def main() -> None:
    hook.start("jax")
    rng = np.random.default_rng(0)
    x_train = rng.integers(0, 256, (SAMPLES, 32, 32, 3)).astype(np.float32)
    y_train = rng.integers(0, 10, SAMPLES)
    keras.utils.set_random_seed(0)
    model = build_model()
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    marks = MarkBatches()
    history = model.fit(x_train, y_train, batch_size=BATCH, epochs=EPOCHS, verbose=0, callbacks=[marks])  # corpus: fit
    print(f"jit_compile {model.jit_compile} loss {history.history['loss'][-1]:.4f}")
    hook.finish(iterations=marks.iterations)


if __name__ == "__main__":
    main()
