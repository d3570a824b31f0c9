"""A BERT-style text classifier fine-tuned with Flax linen and optax, in the idiom of
huggingface/transformers `examples/flax/text-classification/run_flax_glue.py` (a post-LayerNorm
encoder: word + position embeddings, blocks of `nn.MultiHeadDotProductAttention` under a padding
mask from `nn.make_attention_mask` and a GELU MLP, a tanh pooler on the [CLS] token and a 2-way
head; dropout 0.1; AdamW with a linear warm-up then decay and no weight decay on biases and
LayerNorm scales; a `TrainState` whose jitted `train_step` returns the new state and the loss),
computing in `dtype=jnp.bfloat16` over float32 parameters. Synthetic sentences, no download.

    text_classify.py [--pad dynamic|max|bucket] [--max-len 128] [--bucket 64] [--batch 32]
                     [--steps 60] [--d-model 512] [--heads 4] [--layers 4] [--vocab 8192]
                     [--seed 0]

The data set is fixed: `steps * batch` sentences drawn once by a seeded numpy generator, their
lengths from a clipped lognormal (median 28 tokens, a few reaching --max-len), their tokens
random ids after a [CLS] id, the label whether more of a sentence's tokens lie in the lower half
of the vocabulary. It is read in order, one epoch, the same examples in the same order whatever
--pad says. Each batch is collated as it is read (token ids and an attention mask, padded with
id 0 and mask 0):
  --pad dynamic  to the longest sentence in the batch, as transformers' DataCollatorWithPadding
                 does and as code carried over to JAX keeps doing: each new batch length is a
                 new input shape, and `jax.jit` compiles `train_step` again;
  --pad max      every batch to --max-len (run_flax_glue.py's choice for TPU): one shape;
  --pad bucket   the batch's longest rounded up to a multiple of --bucket (capped at --max-len):
                 a few shapes.
head_dim = d_model / heads (128 by default: the full width of the v5e MXU).

Timing: ONE warm-up step runs before the timed loop, at the first batch's shape, on a copy of the
initial state (its result is dropped, so the loop still trains from the initial state over every
batch, and --pad max compiles nothing inside the loop). The timed region is the whole loop, every
step, collation and every compile the loop meets included, up to a `jax.block_until_ready` of
the final state; nothing in the loop blocks. So loop_s(dynamic) - loop_s(max) is the cost of
dynamic padding in full: its extra compiles (shapes - 1 of them) plus what its shorter batches
save. Prints one line:
    loop_s <wall s of the loop> steps <N> shapes <distinct batch lengths> step_ms <loop_s / N>
    pad_frac <padding tokens / all tokens fed> loss <final loss>
"""

import argparse
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import traverse_util
from flax.training import train_state

parser = argparse.ArgumentParser()
parser.add_argument("--pad", default="dynamic", choices=["dynamic", "max", "bucket"])
parser.add_argument("--max-len", type=int, default=128)
parser.add_argument("--bucket", type=int, default=64, help="--pad bucket: round lengths up to this")
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--d-model", type=int, default=512)
parser.add_argument("--heads", type=int, default=4)
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--vocab", type=int, default=8192)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
DTYPE = jnp.bfloat16
PAD_ID, CLS_ID = 0, 1
NUM_LABELS = 2


class BertLayer(nn.Module):
    heads: int
    mlp_dim: int
    dropout: float = 0.1

    @nn.compact
    def __call__(self, x, mask, deterministic):
        y = nn.MultiHeadDotProductAttention(
            num_heads=self.heads, dtype=DTYPE, dropout_rate=self.dropout
        )(x, x, mask=mask, deterministic=deterministic)
        y = nn.Dropout(self.dropout)(y, deterministic=deterministic)
        x = nn.LayerNorm(epsilon=1e-12, dtype=DTYPE)(x + y)
        y = nn.Dense(self.mlp_dim, dtype=DTYPE)(x)
        y = nn.gelu(y)
        y = nn.Dense(x.shape[-1], dtype=DTYPE)(y)
        y = nn.Dropout(self.dropout)(y, deterministic=deterministic)
        return nn.LayerNorm(epsilon=1e-12, dtype=DTYPE)(x + y)


class BertClassifier(nn.Module):
    vocab: int
    d_model: int
    heads: int
    layers: int
    max_len: int
    dropout: float = 0.1

    @nn.compact
    def __call__(self, input_ids, attention_mask, deterministic=True):
        x = nn.Embed(self.vocab, self.d_model, name="word_embeddings")(input_ids)
        positions = jnp.arange(input_ids.shape[1])[None, :]
        x = x + nn.Embed(self.max_len, self.d_model, name="position_embeddings")(positions)
        x = nn.LayerNorm(epsilon=1e-12, dtype=DTYPE)(x.astype(DTYPE))
        x = nn.Dropout(self.dropout)(x, deterministic=deterministic)
        mask = nn.make_attention_mask(attention_mask > 0, attention_mask > 0)
        for i in range(self.layers):
            x = BertLayer(self.heads, 4 * self.d_model, self.dropout, name=f"layer_{i}")(
                x, mask, deterministic
            )
        pooled = nn.tanh(nn.Dense(self.d_model, dtype=DTYPE, name="pooler")(x[:, 0]))
        pooled = nn.Dropout(self.dropout)(pooled, deterministic=deterministic)
        logits = nn.Dense(NUM_LABELS, dtype=DTYPE, name="classifier")(pooled)
        return logits.astype(jnp.float32)


def make_dataset(n, rng):
    """n sentences: [CLS] then random ids, lengths from a clipped lognormal; a bag-of-words label."""
    lengths = np.clip(np.rint(rng.lognormal(np.log(28.0), 0.6, size=n)), 4, args.max_len)
    lengths = lengths.astype(np.int32)
    ids = rng.integers(2, args.vocab, size=(n, args.max_len), dtype=np.int32)
    ids[:, 0] = CLS_ID
    mask = (np.arange(args.max_len)[None, :] < lengths[:, None]).astype(np.int32)
    ids = np.where(mask > 0, ids, PAD_ID)
    low = ((ids[:, 1:] >= 2) & (ids[:, 1:] < args.vocab // 2)).sum(axis=1)
    labels = (2 * low > lengths - 1).astype(np.int32)
    return ids, mask, labels


def padded_length(longest):
    if args.pad == "max":
        return args.max_len
    if args.pad == "bucket":
        return min(args.max_len, -(-longest // args.bucket) * args.bucket)
    return longest


def batches(ids, mask, labels):
    """The data set in order, each batch cut to its padded length (a collator's work)."""
    for start in range(0, len(labels) - args.batch + 1, args.batch):
        sl = slice(start, start + args.batch)
        length = padded_length(int(mask[sl].sum(axis=1).max()))
        yield {
            "input_ids": ids[sl, :length],
            "attention_mask": mask[sl, :length],
            "labels": labels[sl],
        }


def linear_warmup_decay(base_lr, total_steps, warmup_steps):
    warmup = optax.linear_schedule(0.0, base_lr, warmup_steps)
    decay = optax.linear_schedule(base_lr, 0.0, max(1, total_steps - warmup_steps))
    return optax.join_schedules([warmup, decay], boundaries=[warmup_steps])


def decay_mask(params):
    """Weight decay on the kernels and embeddings, not on biases or LayerNorm scales."""
    flat = traverse_util.flatten_dict(params)
    return traverse_util.unflatten_dict({path: path[-1] not in ("bias", "scale") for path in flat})


np_rng = np.random.default_rng(args.seed)
ids, mask, labels = make_dataset(args.steps * args.batch, np_rng)
model = BertClassifier(args.vocab, args.d_model, args.heads, args.layers, args.max_len)
init_key, dropout_key = jax.random.split(jax.random.PRNGKey(args.seed))
params = jax.jit(model.init)(init_key, ids[:1, :8], mask[:1, :8])["params"]
tx = optax.adamw(
    linear_warmup_decay(1e-4, args.steps, max(1, args.steps // 10)),
    b1=0.9,
    b2=0.999,
    eps=1e-6,
    weight_decay=0.01,
    mask=decay_mask,
)
state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)


def train_step(state, batch):
    rng = jax.random.fold_in(dropout_key, state.step)

    def loss_fn(params):
        logits = state.apply_fn(
            {"params": params},
            batch["input_ids"],
            batch["attention_mask"],
            deterministic=False,
            rngs={"dropout": rng},
        )
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


train_step = jax.jit(train_step, donate_argnums=(0,))

# The warm-up: one step at the first batch's shape, on a copy of the state, its result dropped.
first = next(batches(ids, mask, labels))
jax.block_until_ready(train_step(jax.tree.map(jnp.copy, state), first))

lengths_seen = set()
fed = real = 0
t0 = time.perf_counter()
for batch in batches(ids, mask, labels):
    lengths_seen.add(batch["input_ids"].shape[1])
    fed += batch["attention_mask"].size
    real += int(batch["attention_mask"].sum())
    state, loss = train_step(state, batch)
jax.block_until_ready(state)
loop_s = time.perf_counter() - t0
loss = float(loss)
print(
    f"loop_s {loop_s:.4f} steps {args.steps} shapes {len(lengths_seen)}"
    f" step_ms {1e3 * loop_s / args.steps:.4f} pad_frac {1 - real / fed:.4f} loss {loss:.4f}"
)
