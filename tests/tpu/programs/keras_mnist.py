"""Keras's canonical first example on JAX, in the idiom of keras-io
`examples/vision/mnist_convnet.py`: a `Sequential` of two 3x3 convolutions (32 and 64
filters, ReLU) with 2x2 max pools, a flatten, dropout 0.5 and a 10-way softmax, trained by
`fit` with Adam, categorical cross-entropy and accuracy, batches of 128, `validation_split=0.1`,
Keras's progress bar on (the example's defaults). Synthetic images and one-hot labels of
MNIST's shape stand in for `keras.datasets.mnist` (no download). `--steps-per-execution N`:
Keras's own option to run N batches per call of its train function (`model.compile`).

    keras_mnist.py [--samples 60000] [--epochs 4] [--steps-per-execution 1] [--verbose auto]

Prints `step_ms <mean time a batch of the epochs after the first>` (Keras reads its logs at each
epoch's end, so an epoch's wall time holds its steps' device work; validation included).
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers  # noqa: E402
from keras_epochs import EpochTimer  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=60000)
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--steps-per-execution", type=int, default=1)
parser.add_argument("--verbose", default="auto")
args = parser.parse_args()
verbose = args.verbose if args.verbose == "auto" else int(args.verbose)

rng = np.random.default_rng(0)
x_train = rng.random((args.samples, 28, 28, 1), dtype=np.float32)
y_train = keras.utils.to_categorical(rng.integers(0, 10, args.samples), 10)
model = keras.Sequential(
    [
        keras.Input(shape=(28, 28, 1)),
        layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(10, activation="softmax"),
    ]
)
model.compile(
    loss="categorical_crossentropy",
    optimizer="adam",
    metrics=["accuracy"],
    steps_per_execution=args.steps_per_execution,
)
timer = EpochTimer()
model.fit(
    x_train,
    y_train,
    batch_size=128,
    epochs=args.epochs,
    validation_split=0.1,
    verbose=verbose,
    callbacks=[timer],
)
steps = -(-int(args.samples * 0.9) // 128)
if timer.times:  # the epochs after the first
    print(
        f"step_ms {1e3 * sum(timer.times) / (len(timer.times) * steps):.4f} steps_per_epoch {steps}"
    )
