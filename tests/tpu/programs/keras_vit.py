"""keras-io's Vision Transformer on JAX, in the idiom of
`examples/vision/image_classification_with_vision_transformer.py`: the data augmentation in the
model (Normalization adapted to the images, Resizing to 72x72, RandomFlip, RandomRotation
0.02, RandomZoom 0.2), 6x6 patches from `keras.ops.image.extract_patches` (144 a picture), a
patch encoder to width 256 with a learned position embedding, 8 pre-norm blocks of
`MultiHeadAttention(num_heads=4, key_dim=64)` and a GELU MLP (512, 256) with dropout 0.1, a
flatten, the 2048/1024 GELU head with dropout 0.5 and 100 logits; AdamW (1e-3, weight decay
1e-4), sparse categorical cross-entropy from logits, accuracy and top-5 accuracy, batches of
256, `validation_split=0.1` and the example's best-weights `ModelCheckpoint`, under Keras's
default float32 policy as the example runs (`--policy mixed_bfloat16`: the logits kept in
float32). Synthetic CIFAR-100-shaped images and labels stand in for `keras.datasets.cifar100`.
`--heads H --key-dim D`: the attention's heads and head_dim (the example's 4 x 64; 2 x 128 keeps
its query/key/value width of 256). `--jit-friendly` leaves RandomRotation and RandomZoom out of
the augmentation: Keras 3 marks both `supports_jit = False`, so with either `fit` runs the whole
model without jit (the twin is the model Keras jits, not the fix: that applies them to the
batches before `fit`).

    keras_vit.py [--policy float32|mixed_bfloat16] [--heads 4] [--key-dim 64] [--verbose auto]
                 [--samples 20000] [--epochs 3] [--batch 256] [--jit-friendly]

Prints `step_ms <mean time a batch of the epochs after the first>` (validation included).
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers, ops  # noqa: E402
from keras_epochs import EpochTimer  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--policy", default="float32", choices=["float32", "mixed_bfloat16"])
parser.add_argument("--heads", type=int, default=4)
parser.add_argument("--key-dim", type=int, default=64)
parser.add_argument("--samples", type=int, default=20000)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--verbose", default="auto")
parser.add_argument("--batch", type=int, default=256)
parser.add_argument("--jit-friendly", action="store_true")
args = parser.parse_args()
keras.mixed_precision.set_global_policy(args.policy)

IMAGE, PATCH, WIDTH, LAYERS, BATCH = 72, 6, 256, 8, args.batch
rng = np.random.default_rng(0)
x_train = rng.integers(0, 256, (args.samples, 32, 32, 3)).astype(np.uint8)
y_train = rng.integers(0, 100, (args.samples, 1))

no_jit = [
    layers.RandomRotation(factor=0.02),
    layers.RandomZoom(height_factor=0.2, width_factor=0.2),
]
augment = keras.Sequential(
    [
        layers.Normalization(),
        layers.Resizing(IMAGE, IMAGE),
        layers.RandomFlip("horizontal"),
        *([] if args.jit_friendly else no_jit),
    ],
    name="data_augmentation",
)
augment.layers[0].adapt(x_train)


class Patches(layers.Layer):
    def call(self, images):
        batch = ops.shape(images)[0]
        patches = ops.image.extract_patches(images, size=PATCH)
        return ops.reshape(patches, (batch, (IMAGE // PATCH) ** 2, PATCH * PATCH * 3))


class PatchEncoder(layers.Layer):
    def __init__(self, count, width):
        super().__init__()
        self.count = count
        self.projection = layers.Dense(width)
        self.position = layers.Embedding(input_dim=count, output_dim=width)

    def call(self, patch):
        positions = ops.expand_dims(ops.arange(0, self.count), axis=0)
        return self.projection(patch) + self.position(positions)


def mlp(x, units, dropout):
    for n in units:
        x = layers.Dense(n, activation=keras.activations.gelu)(x)
        x = layers.Dropout(dropout)(x)
    return x


def vit():
    inputs = keras.Input(shape=(32, 32, 3))
    encoded = PatchEncoder((IMAGE // PATCH) ** 2, WIDTH)(Patches()(augment(inputs)))
    for _ in range(LAYERS):
        x1 = layers.LayerNormalization(epsilon=1e-6)(encoded)
        attended = layers.MultiHeadAttention(args.heads, args.key_dim, dropout=0.1)(x1, x1)
        x2 = layers.Add()([attended, encoded])
        x3 = mlp(layers.LayerNormalization(epsilon=1e-6)(x2), [WIDTH * 2, WIDTH], 0.1)
        encoded = layers.Add()([x3, x2])
    x = layers.Dropout(0.5)(layers.Flatten()(layers.LayerNormalization(epsilon=1e-6)(encoded)))
    logits = layers.Dense(100, dtype="float32")(mlp(x, [2048, 1024], 0.5))
    return keras.Model(inputs, logits)


model = vit()
model.compile(
    optimizer=keras.optimizers.AdamW(learning_rate=1e-3, weight_decay=1e-4),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=[
        keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
        keras.metrics.SparseTopKCategoricalAccuracy(5, name="top-5-accuracy"),
    ],
)
checkpoint = keras.callbacks.ModelCheckpoint(
    "/tmp/keras_vit.weights.h5",
    monitor="val_accuracy",
    save_best_only=True,
    save_weights_only=True,
)
timer = EpochTimer()
model.fit(
    x_train,
    y_train,
    batch_size=BATCH,
    epochs=args.epochs,
    validation_split=0.1,
    verbose=args.verbose if args.verbose == "auto" else int(args.verbose),
    callbacks=[checkpoint, timer],
)
steps = -(-int(args.samples * 0.9) // BATCH)
print(f"jit_compile {model.jit_compile}")
if timer.times:
    print(
        f"step_ms {1e3 * sum(timer.times) / (len(timer.times) * steps):.4f} steps_per_epoch {steps}"
    )
