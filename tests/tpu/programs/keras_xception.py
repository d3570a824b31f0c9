"""An image classifier trained from scratch with Keras 3 `model.fit` on JAX, in the idiom of
keras-io `examples/vision/image_classification_from_scratch.py` (its small Xception: a
`Rescaling(1/255)` entry, a strided 3x3 convolution of 128 filters, three blocks of two
`SeparableConv2D` + `BatchNormalization` + ReLU with a max pool and a strided 1x1 residual
projection, 256/512/728 wide, a last 1024-wide `SeparableConv2D`, global average pooling,
dropout and one logit; Adam at 3e-4, binary cross-entropy from logits, batches of 128 images of
180x180), under Keras's default `float32` policy as the example runs it (`--policy
mixed_bfloat16`: the policy Keras's mixed-precision guide gives for TPUs, the logit kept in
float32). Synthetic images and labels stand in for the cats-vs-dogs files (no download, no
tf.data: the arrays go to `fit` as numpy); the sample count is not a multiple of the batch, so
each epoch ends on a ragged batch, as the example's 18,728 training images do.

    keras_xception.py [--policy float32|mixed_bfloat16] [--size 180] [--batch 128]
                      [--samples 1586] [--epochs 3]

Prints `step_ms <mean step time of the epochs after the first>` (each epoch ends in Keras's own
read of its logs, so an epoch's wall time holds its steps' device work).
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers  # noqa: E402
from keras_epochs import EpochTimer  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--policy", default="float32", choices=["float32", "mixed_bfloat16"])
parser.add_argument("--size", type=int, default=180)
parser.add_argument("--batch", type=int, default=128)
parser.add_argument("--samples", type=int, default=1586)
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()
keras.mixed_precision.set_global_policy(args.policy)


def separable_block(x, width):
    for _ in range(2):
        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(width, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)
    return layers.MaxPooling2D(3, strides=2, padding="same")(x)


def small_xception(size):
    inputs = keras.Input(shape=(size, size, 3))
    x = layers.Rescaling(1.0 / 255)(inputs)
    x = layers.Conv2D(128, 3, strides=2, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    shortcut = x
    for width in (256, 512, 728):
        x = separable_block(x, width)
        x = layers.add([x, layers.Conv2D(width, 1, strides=2, padding="same")(shortcut)])
        shortcut = x
    x = layers.SeparableConv2D(1024, 3, padding="same")(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(0.25)(x)
    return keras.Model(inputs, layers.Dense(1, dtype="float32")(x))


model = small_xception(args.size)
model.compile(
    optimizer=keras.optimizers.Adam(3e-4),
    loss=keras.losses.BinaryCrossentropy(from_logits=True),
    metrics=[keras.metrics.BinaryAccuracy(name="acc")],
)
rng = np.random.default_rng(0)
images = rng.integers(0, 256, (args.samples, args.size, args.size, 3)).astype(np.float32)
labels = rng.integers(0, 2, (args.samples, 1)).astype(np.float32)
timer = EpochTimer()
model.fit(
    images, labels, batch_size=args.batch, epochs=args.epochs, verbose=0, callbacks=[timer]
)
steps = -(-args.samples // args.batch)
print(f"step_ms {1e3 * sum(timer.times) / (len(timer.times) * steps):.4f} steps_per_epoch {steps}")
