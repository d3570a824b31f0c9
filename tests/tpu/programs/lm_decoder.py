"""A decoder-only language model trained with Flax linen and optax, in the idiom of
google/flax `examples/lm1b` (token + learned position embeddings, pre-LayerNorm decoder blocks
of `nn.MultiHeadDotProductAttention` with a causal mask and an MLP block, logits through the
embedding's `attend`, `dtype=jnp.bfloat16` computation over float32 parameters, a jitted
`train_step` that returns the new state and the loss). Synthetic tokens, no download.

    lm_decoder.py [--d-model 1024] [--heads 16] [--layers 4] [--seq 512] [--batch 16]
                  [--vocab 8192] [--steps 30] [--trace DIR] [--scan] [--remat]

head_dim = d_model / heads. --scan stacks the blocks with `nn.scan` (one block's parameters
with a leading layer axis, the loop over layers an XLA while loop: MaxText's and t5x's
`scan_layers`); --remat wraps each block in `nn.remat` (its activations recomputed in the
backward pass, as those codebases do to fit long sequences). Prints `step_ms <mean step time over the timed steps>`.
"""

import argparse
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

parser = argparse.ArgumentParser()
parser.add_argument("--d-model", type=int, default=1024)
parser.add_argument("--heads", type=int, default=16)
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--seq", type=int, default=512)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--vocab", type=int, default=8192)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--scan", action="store_true", help="the layers as one nn.scan")
parser.add_argument("--remat", action="store_true", help="each block under nn.remat")
parser.add_argument("--trace", default="", help="a bare jax.profiler trace of 3 steps after the timed ones")
args = parser.parse_args()
DTYPE = jnp.bfloat16


class MlpBlock(nn.Module):
    mlp_dim: int

    @nn.compact
    def __call__(self, x):
        y = nn.Dense(self.mlp_dim, dtype=DTYPE)(x)
        y = nn.gelu(y)
        return nn.Dense(x.shape[-1], dtype=DTYPE)(y)


class DecoderBlock(nn.Module):
    heads: int
    mlp_dim: int

    @nn.compact
    def __call__(self, x, mask):
        y = nn.LayerNorm(dtype=DTYPE)(x)
        y = nn.MultiHeadDotProductAttention(num_heads=self.heads, dtype=DTYPE)(y, y, mask=mask)
        x = x + y
        y = nn.LayerNorm(dtype=DTYPE)(x)
        return x + MlpBlock(self.mlp_dim)(y)


Block = nn.remat(DecoderBlock) if args.remat else DecoderBlock


class ScannedBlock(nn.Module):
    """One block as nn.scan's body: (carry, mask) -> (carry, nothing)."""

    heads: int
    mlp_dim: int

    @nn.compact
    def __call__(self, x, mask):
        return Block(self.heads, self.mlp_dim)(x, mask), None


class TransformerLM(nn.Module):
    vocab: int
    d_model: int
    heads: int
    layers: int
    max_len: int

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(self.vocab, self.d_model)
        x = embed(tokens).astype(DTYPE)
        pos = self.param("pos_embedding", nn.initializers.normal(0.02), (1, self.max_len, self.d_model))
        x = x + pos[:, : tokens.shape[1]].astype(DTYPE)
        mask = nn.make_causal_mask(tokens)
        if args.scan:
            stack = nn.scan(
                ScannedBlock,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                in_axes=nn.broadcast,
                length=self.layers,
            )
            x, _ = stack(self.heads, 4 * self.d_model)(x, mask)
        else:
            for _ in range(self.layers):
                x = Block(self.heads, 4 * self.d_model)(x, mask)
        x = nn.LayerNorm(dtype=DTYPE)(x)
        return embed.attend(x.astype(jnp.float32))


model = TransformerLM(args.vocab, args.d_model, args.heads, args.layers, args.seq)
tokens = jax.random.randint(jax.random.PRNGKey(1), (args.batch, args.seq), 0, args.vocab)
params = model.init(jax.random.PRNGKey(0), tokens)
tx = optax.adamw(3e-4)
opt_state = tx.init(params)


@jax.jit
def train_step(params, opt_state, tokens):
    def loss_fn(p):
        logits = model.apply(p, tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


WARM = 5
for i in range(args.steps):
    if i == WARM:
        jax.block_until_ready(params)
        t0 = time.perf_counter()
    params, opt_state, loss = train_step(params, opt_state, tokens)
loss = float(loss)
elapsed = time.perf_counter() - t0
if args.trace:  # after the timed loop, so its one-off does not enter step_ms
    jax.profiler.start_trace(args.trace)
    for _ in range(3):
        params, opt_state, _ = train_step(params, opt_state, tokens)
    jax.block_until_ready(params)
    jax.profiler.stop_trace()
print(f"step_ms {1e3 * elapsed / (args.steps - WARM):.4f} head_dim {args.d_model // args.heads} loss {loss:.4f}")
