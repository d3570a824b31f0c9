"""A Vision Transformer trained with Flax linen and optax, in the idiom of
google-research/vision_transformer `vit_jax/models_vit.py` and `vit_jax/train.py`: the image cut
into 16x16 patches by a strided `nn.Conv`, a class token, learned position embeddings, pre-
LayerNorm encoder blocks of `nn.MultiHeadDotProductAttention` and a GELU MLP, a zero-initialised
head on the class token; SGD with momentum and global-norm clipping, softmax cross-entropy.
As upstream, the model computes in the parameters' float32 by default (`--dtype bf16`: Flax's
`dtype=` over float32 parameters). Synthetic images, no download.

    vit_train.py [--hidden 768] [--heads 12] [--layers 4] [--image 224] [--patch 16]
                 [--batch 64] [--dtype f32|bf16] [--steps 30] [--trace DIR]

ViT-B/16's width and heads (head_dim 64, 197 tokens); head_dim = hidden / heads. Prints
`step_ms <mean step time over the timed steps>`.
"""

import argparse
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

parser = argparse.ArgumentParser()
parser.add_argument("--hidden", type=int, default=768)
parser.add_argument("--heads", type=int, default=12)
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--image", type=int, default=224)
parser.add_argument("--patch", type=int, default=16)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--classes", type=int, default=1000)
parser.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
parser.add_argument("--steps", type=int, default=30)
parser.add_argument(
    "--trace", default="", help="a bare jax.profiler trace of 3 steps after the timed ones"
)
args = parser.parse_args()
DTYPE = jnp.bfloat16 if args.dtype == "bf16" else jnp.float32


class MlpBlock(nn.Module):
    mlp_dim: int

    @nn.compact
    def __call__(self, x):
        y = nn.Dense(self.mlp_dim, dtype=DTYPE)(x)
        y = nn.gelu(y)
        return nn.Dense(x.shape[-1], dtype=DTYPE)(y)


class Encoder1DBlock(nn.Module):
    heads: int
    mlp_dim: int

    @nn.compact
    def __call__(self, x):
        y = nn.LayerNorm(dtype=DTYPE)(x)
        y = nn.MultiHeadDotProductAttention(num_heads=self.heads, dtype=DTYPE)(y, y)
        x = x + y
        y = nn.LayerNorm(dtype=DTYPE)(x)
        return x + MlpBlock(self.mlp_dim)(y)


class VisionTransformer(nn.Module):
    hidden: int
    heads: int
    layers: int
    patch: int
    classes: int

    @nn.compact
    def __call__(self, images):
        p = self.patch
        x = nn.Conv(
            self.hidden, (p, p), strides=(p, p), padding="VALID", dtype=DTYPE, name="embedding"
        )(images)
        n, h, w, c = x.shape
        x = x.reshape(n, h * w, c)
        cls = self.param("cls", nn.initializers.zeros, (1, 1, c))
        x = jnp.concatenate([jnp.tile(cls, (n, 1, 1)).astype(x.dtype), x], axis=1)
        pos = self.param("posembed", nn.initializers.normal(0.02), (1, x.shape[1], c))
        x = x + pos.astype(x.dtype)
        for _ in range(self.layers):
            x = Encoder1DBlock(self.heads, 4 * self.hidden)(x)
        x = nn.LayerNorm(dtype=DTYPE, name="encoder_norm")(x)
        return nn.Dense(self.classes, kernel_init=nn.initializers.zeros, name="head")(x[:, 0])


model = VisionTransformer(args.hidden, args.heads, args.layers, args.patch, args.classes)
images = jax.random.normal(jax.random.PRNGKey(1), (args.batch, args.image, args.image, 3))
labels = jax.random.randint(jax.random.PRNGKey(2), (args.batch,), 0, args.classes)
params = model.init(jax.random.PRNGKey(0), images[:1])
tx = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.03, momentum=0.9))
opt_state = tx.init(params)


@jax.jit
def train_step(params, opt_state, images, labels):
    def loss_fn(p):
        logits = model.apply(p, images)
        return optax.softmax_cross_entropy(logits, jax.nn.one_hot(labels, args.classes)).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


WARM = 5
for i in range(args.steps):
    if i == WARM:
        jax.block_until_ready(params)
        t0 = time.perf_counter()
    params, opt_state, loss = train_step(params, opt_state, images, labels)
loss = float(loss)
elapsed = time.perf_counter() - t0
if args.trace:  # after the timed loop, so its one-off does not enter step_ms
    jax.profiler.start_trace(args.trace)
    for _ in range(3):
        params, opt_state, _ = train_step(params, opt_state, images, labels)
    jax.block_until_ready(params)
    jax.profiler.stop_trace()
head_dim = args.hidden // args.heads
print(
    f"step_ms {1e3 * elapsed / (args.steps - WARM):.4f} head_dim {head_dim} dtype {args.dtype} loss {loss:.4f}"
)
