"""Flax's Gemma example model trained as its example trains it (google/flax `examples/gemma`:
`train.py` over `transformer.py` and `modules.py`). The model is the example's own code,
imported from a flax snapshot's `examples/gemma` folder named by --gemma (not in this
repository): `TransformerConfig.from_version_name("gemma3_270m", num_embed=35008, dtype=...)`
as `train_and_evaluate` builds it (the lm1b vocabulary's size, bf16 activations over f32
weights: its config's `use_bfloat16`), `nnx.Optimizer` with optax's AdamW (b1 0.9, b2 0.98,
eps 1e-9, weight decay 0.1, the rsqrt schedule's warm-up), and an `nnx.jit` step in the form of
its `nnx_train_step` (a causal mask from the input mask, the weighted cross entropy, one
`nnx.value_and_grad`, `optimizer.update`). One chip: no mesh, `ShardingConfig.no_sharding()`.
Synthetic tokens, no download, no metrics writer.

    gemma_train.py --gemma DIR [--batch 16] [--seq 1024] [--steps 30] [--dtype bf16|f32]
                   [--layers N]

The example's config trains gemma3_270m at 16 sequences of 1024 tokens; --layers cuts the
model for a CPU try. Prints `step_ms <mean step time over the steps after the first 5>` (the
loop's own perf_counter, the last step's state ready).
"""

import argparse
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

parser = argparse.ArgumentParser()
parser.add_argument("--gemma", required=True, help="a flax snapshot's examples/gemma folder")
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--seq", type=int, default=1024)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
parser.add_argument("--layers", type=int, default=0, help="fewer layers (0: the model's 18)")
args = parser.parse_args()
sys.path.insert(0, args.gemma)

import transformer as transformer_lib  # noqa: E402  (the example's own module)
from gemma_config import VOCAB, gemma3_270m  # noqa: E402
from transformer_cfg import ShardingConfig  # noqa: E402

config = gemma3_270m(
    transformer_lib,
    ShardingConfig,
    jnp.bfloat16 if args.dtype == "bf16" else jnp.float32,
    args.layers,
)
model = transformer_lib.Transformer(config, rngs=nnx.Rngs(params=0, dropout=0))
schedule = optax.join_schedules(
    [optax.linear_schedule(0.0, 0.0016, 1000), lambda step: 0.0016 * (1000 / (step + 1000)) ** 0.5],
    [1000],
)
optimizer = nnx.Optimizer(
    model, tx=optax.adamw(schedule, b1=0.9, b2=0.98, eps=1e-9, weight_decay=0.1), wrt=nnx.Param
)


def weighted_cross_entropy(logits, targets, weights):
    """The example's compute_weighted_cross_entropy without label smoothing."""
    soft_targets = jax.nn.one_hot(targets, logits.shape[-1])
    loss = -jnp.sum(soft_targets * nnx.log_softmax(logits), axis=-1)
    loss = loss * weights
    return loss.sum(axis=1) * len(loss) / weights.sum()


@nnx.jit
def train_step(model, optimizer, rngs, batch):
    inputs, targets = batch["inputs"], batch["targets"]
    input_mask = inputs > 0
    weights = input_mask.astype(jnp.float32)
    attention_mask = transformer_lib.make_causal_attn_mask(input_mask)

    def loss_fn(model, rngs):
        positions = transformer_lib.build_positions_from_mask(input_mask)
        logits, _ = model(inputs, positions, None, attention_mask, rngs=rngs)
        return weighted_cross_entropy(logits, targets, weights).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model, rngs.fork())
    optimizer.update(model, grads)
    return loss


rng = np.random.default_rng(0)
tokens = rng.integers(1, VOCAB, size=(4, args.batch, args.seq + 1), dtype=np.int32)
batches = [{"inputs": t[:, :-1], "targets": t[:, 1:]} for t in tokens]
rngs = nnx.Rngs(dropout=1)
WARM = 5
loss = None
for i in range(args.steps):
    if i == WARM:
        jax.block_until_ready(loss)
        t0 = time.perf_counter()
    loss = train_step(model, optimizer, rngs, batches[i % len(batches)])
loss = float(loss)
elapsed = time.perf_counter() - t0
print(f"step_ms {1e3 * elapsed / (args.steps - WARM):.4f} loss {loss:.4f}")
