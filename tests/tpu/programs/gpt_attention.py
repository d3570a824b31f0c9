"""A GPT trained in plain JAX and optax, in the idiom of karpathy/nanoGPT's `model.py` as JAX
ports write it: parameters in a dict, pre-LayerNorm blocks of causal self-attention (one fused
qkv projection split into heads, `q @ k.T` scaled, a lower-triangular mask, softmax, `@ v`) and
a 4x GELU MLP, logits through the tied token embedding, AdamW (betas 0.9/0.95, weight decay
0.1) with the gradient clipped at 1.0, bf16 parameters. `--attn dpa` computes the attention
with `jax.nn.dot_product_attention(..., is_causal=True)` instead. Synthetic tokens.

    gpt_attention.py [--attn matmul|dpa] [--d-model 1024] [--heads 16] [--layers 4]
                     [--seq 512] [--batch 16] [--vocab 8192] [--steps 30]

head_dim = d_model / heads. Prints `step_ms <mean step time over the timed steps>`.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import optax

parser = argparse.ArgumentParser()
parser.add_argument("--attn", choices=("matmul", "dpa"), default="matmul")
parser.add_argument("--d-model", type=int, default=1024)
parser.add_argument("--heads", type=int, default=16)
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--seq", type=int, default=512)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--vocab", type=int, default=8192)
parser.add_argument("--steps", type=int, default=30)
args = parser.parse_args()
DTYPE = jnp.bfloat16
WARM = 5


def init_params(key):
    d, keys = args.d_model, iter(jax.random.split(key, 4 + 4 * args.layers))

    def dense(n_in, n_out):
        return (jax.random.normal(next(keys), (n_in, n_out)) * 0.02).astype(DTYPE)

    def norm():
        return {"scale": jnp.ones((d,), DTYPE), "bias": jnp.zeros((d,), DTYPE)}

    blocks = [
        {
            "ln_1": norm(),
            "c_attn": dense(d, 3 * d),
            "c_proj": dense(d, d),
            "ln_2": norm(),
            "c_fc": dense(d, 4 * d),
            "mlp_proj": dense(4 * d, d),
        }
        for _ in range(args.layers)
    ]
    return {
        "wte": dense(args.vocab, d),
        "wpe": dense(args.seq, d),
        "blocks": blocks,
        "ln_f": norm(),
    }


def layer_norm(p, x):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["bias"]


def causal_self_attention(p, x):
    B, T, C = x.shape
    nh, hs = args.heads, C // args.heads
    q, k, v = jnp.split(x @ p["c_attn"], 3, axis=-1)
    if args.attn == "dpa":
        q, k, v = (t.reshape(B, T, nh, hs) for t in (q, k, v))
        y = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        return y.reshape(B, T, C) @ p["c_proj"]
    q, k, v = (t.reshape(B, T, nh, hs).transpose(0, 2, 1, 3) for t in (q, k, v))
    att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / hs**0.5)
    mask = jnp.tril(jnp.ones((T, T), bool))
    att = jnp.where(mask, att, jnp.finfo(att.dtype).min)
    att = jax.nn.softmax(att.astype(jnp.float32), axis=-1).astype(DTYPE)
    y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    return y @ p["c_proj"]


def mlp(p, x):
    return jax.nn.gelu(x @ p["c_fc"]) @ p["mlp_proj"]


def forward(params, idx):
    x = params["wte"][idx] + params["wpe"][: idx.shape[1]]
    for block in params["blocks"]:
        x = x + causal_self_attention(block, layer_norm(block["ln_1"], x))
        x = x + mlp(block, layer_norm(block["ln_2"], x))
    return layer_norm(params["ln_f"], x) @ params["wte"].T


def loss_fn(params, idx, targets):
    logits = forward(params, idx).astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


optimizer = optax.chain(
    optax.clip_by_global_norm(1.0), optax.adamw(6e-4, b1=0.9, b2=0.95, weight_decay=0.1)
)


@jax.jit
def train_step(params, opt_state, idx, targets):
    loss, grads = jax.value_and_grad(loss_fn)(params, idx, targets)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def main():
    params = init_params(jax.random.PRNGKey(0))
    opt_state = optimizer.init(params)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (args.batch, args.seq + 1), 0, args.vocab)
    idx, targets = tokens[:, :-1], tokens[:, 1:]
    for step in range(args.steps):
        if step == WARM:
            jax.block_until_ready(params)
            start = time.perf_counter()
        params, opt_state, loss = train_step(params, opt_state, idx, targets)
    loss = float(loss)
    elapsed = time.perf_counter() - start
    head_dim = args.d_model // args.heads
    print(f"step_ms {1e3 * elapsed / (args.steps - WARM):.4f} head_dim {head_dim} loss {loss:.4f}")


if __name__ == "__main__":
    main()
