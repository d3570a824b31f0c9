"""A Transformer text classifier trained with Keras 3 `model.fit` on JAX, in the idiom of
keras-io `examples/nlp/text_classification_with_transformer.py` (a `TokenAndPositionEmbedding`
layer, `TransformerBlock` layers of `layers.MultiHeadAttention` + a Dense feed-forward with
dropout and LayerNormalization, GlobalAveragePooling1D, a softmax head, `adam` and sparse
categorical cross-entropy), at a TPU's size and under the `mixed_bfloat16` policy (`--policy
float32`: Keras's default, which keras-io's example keeps). Synthetic tokens; the sample count is
not a multiple of the batch, so each epoch ends on a ragged batch.

    keras_transformer.py [--embed 1024] [--heads 16] [--blocks 4] [--maxlen 512]
                         [--batch 16] [--vocab 8192] [--samples 325] [--epochs 3]
                         [--policy mixed_bfloat16|float32]

key_dim = embed / heads. Prints `step_ms <mean step time of the epochs after the first>`.
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers  # noqa: E402
from keras_epochs import EpochTimer  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--embed", type=int, default=1024)
parser.add_argument("--heads", type=int, default=16)
parser.add_argument("--blocks", type=int, default=4)
parser.add_argument("--maxlen", type=int, default=512)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--vocab", type=int, default=8192)
parser.add_argument("--samples", type=int, default=325)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--policy", default="mixed_bfloat16", choices=["mixed_bfloat16", "float32"])
args = parser.parse_args()
keras.mixed_precision.set_global_policy(args.policy)


class TransformerBlock(layers.Layer):
    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
        super().__init__()
        self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim // num_heads)
        self.ffn = keras.Sequential(
            [layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)]
        )
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs):
        attn_output = self.att(inputs, inputs)
        attn_output = self.dropout1(attn_output)
        out1 = self.layernorm1(inputs + attn_output)
        ffn_output = self.ffn(out1)
        ffn_output = self.dropout2(ffn_output)
        return self.layernorm2(out1 + ffn_output)


class TokenAndPositionEmbedding(layers.Layer):
    def __init__(self, maxlen, vocab_size, embed_dim):
        super().__init__()
        self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

    def call(self, x):
        maxlen = keras.ops.shape(x)[-1]
        positions = keras.ops.arange(start=0, stop=maxlen, step=1)
        return self.token_emb(x) + self.pos_emb(positions)


inputs = layers.Input(shape=(args.maxlen,))
x = TokenAndPositionEmbedding(args.maxlen, args.vocab, args.embed)(inputs)
for _ in range(args.blocks):
    x = TransformerBlock(args.embed, args.heads, 4 * args.embed)(x)
x = layers.GlobalAveragePooling1D()(x)
x = layers.Dropout(0.1)(x)
outputs = layers.Dense(2, activation="softmax", dtype="float32")(x)
model = keras.Model(inputs=inputs, outputs=outputs)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])

rng = np.random.default_rng(0)
x_train = rng.integers(0, args.vocab, (args.samples, args.maxlen))
y_train = rng.integers(0, 2, (args.samples,))
timer = EpochTimer()
model.fit(
    x_train, y_train, batch_size=args.batch, epochs=args.epochs, verbose=0, callbacks=[timer]
)
steps = -(-args.samples // args.batch)
print(
    f"step_ms {1e3 * sum(timer.times) / (len(timer.times) * steps):.4f} key_dim {args.embed // args.heads} "
    f"steps_per_epoch {steps}"
)
