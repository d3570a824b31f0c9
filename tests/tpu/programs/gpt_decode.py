"""Greedy decoding with a KV cache, in plain JAX: the GPT of gpt_attention.py (nanoGPT's blocks)
served one token at a time, as cached samplers write it (flax's lm1b `decode=True` cache and
gemma's sampler: a fixed-size cache per layer, the new token's keys and values written at its
position with `jax.lax.dynamic_update_slice`, attention over the whole cache masked past the
position, the cache donated to the next step). Random bf16 weights; the prompt is one token.

    gpt_decode.py [--d-model 1024] [--heads 16] [--layers 4] [--cache 2048] [--batch 16]
                  [--vocab 8192] [--tokens 200] [--layout bhtd|bthd|btf] [--auto-layout]
                  [--trace DIR]

--layout: the cache's axes. bhtd (batch, heads, time, head_dim) is nanoGPT's `q @ k.T` layout;
bthd (batch, time, heads, head_dim) is flax's `decode=True` cache and gemma's, attended with
their einsums; btf (batch, time, heads x head_dim) keeps the heads merged in the cache, its
last axis the model width, and splits them for the same einsums. --auto-layout: the caches kept in the layout the compiler picks for them (Layout.AUTO).
--trace: a bare jax.profiler trace of 3 tokens after the timed ones.

head_dim = d_model / heads. Prints `step_ms <mean time per generated token over the timed ones>`.
"""

import argparse
import time

import jax
import jax.numpy as jnp
from jax.experimental.layout import Format, Layout

parser = argparse.ArgumentParser()
parser.add_argument("--d-model", type=int, default=1024)
parser.add_argument("--heads", type=int, default=16)
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--cache", type=int, default=2048)
parser.add_argument("--batch", type=int, default=16)
parser.add_argument("--vocab", type=int, default=8192)
parser.add_argument("--tokens", type=int, default=200)
parser.add_argument("--layout", default="bhtd", choices=["bhtd", "bthd", "btf"])
parser.add_argument("--auto-layout", action="store_true", help="the caches in the compiler's layout")
parser.add_argument("--trace", default="", help="a bare jax.profiler trace of 3 tokens after the timed ones")
args = parser.parse_args()
DTYPE = jnp.bfloat16
WARM = 10


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
    return {"wte": dense(args.vocab, d), "wpe": dense(args.cache, d), "blocks": blocks, "ln_f": norm()}


def layer_norm(p, x):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["bias"]


def cached_attention(p, x, cache, pos):
    """One new token's attention over the cache: (B, 1, C) in, its layer's cache updated."""
    B, _, C = x.shape
    nh, hs = args.heads, C // args.heads
    q, k, v = (t.reshape(B, 1, nh, hs) for t in jnp.split(x @ p["c_attn"], 3, -1))
    if args.layout != "bhtd":  # flax's and gemma's cache: (batch, time, heads, head_dim)
        start = (0, pos, 0, 0) if args.layout == "bthd" else (0, pos, 0)
        shape = (B, 1, nh, hs) if args.layout == "bthd" else (B, 1, C)
        k_cache = jax.lax.dynamic_update_slice(cache["k"], k.reshape(shape), start)
        v_cache = jax.lax.dynamic_update_slice(cache["v"], v.reshape(shape), start)
        keys, values = (c.reshape(B, args.cache, nh, hs) for c in (k_cache, v_cache))
        att = jnp.einsum("bqhd,bkhd->bhqk", q, keys) * (1.0 / hs**0.5)
        att = jnp.where(jnp.arange(args.cache) <= pos, att, jnp.finfo(att.dtype).min)
        att = jax.nn.softmax(att.astype(jnp.float32), axis=-1).astype(DTYPE)
        y = jnp.einsum("bhqk,bkhd->bqhd", att, values).reshape(B, 1, C)
        return y @ p["c_proj"], {"k": k_cache, "v": v_cache}
    q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
    k_cache = jax.lax.dynamic_update_slice(cache["k"], k, (0, 0, pos, 0))
    v_cache = jax.lax.dynamic_update_slice(cache["v"], v, (0, 0, pos, 0))
    att = (q @ k_cache.transpose(0, 1, 3, 2)) * (1.0 / hs**0.5)  # (B, nh, 1, cache)
    att = jnp.where(jnp.arange(args.cache) <= pos, att, jnp.finfo(att.dtype).min)
    att = jax.nn.softmax(att.astype(jnp.float32), axis=-1).astype(DTYPE)
    y = (att @ v_cache).transpose(0, 2, 1, 3).reshape(B, 1, C)
    return y @ p["c_proj"], {"k": k_cache, "v": v_cache}


def decode_step(params, caches, token, pos):
    x = params["wte"][token] + params["wpe"][pos][None, None]
    new_caches = []
    for block, cache in zip(params["blocks"], caches, strict=True):
        y, cache = cached_attention(block, layer_norm(block["ln_1"], x), cache, pos)
        x = x + y
        h = layer_norm(block["ln_2"], x)
        x = x + jax.nn.gelu(h @ block["c_fc"]) @ block["mlp_proj"]
        new_caches.append(cache)
    logits = layer_norm(params["ln_f"], x) @ params["wte"].T
    return jnp.argmax(logits[:, -1], axis=-1)[:, None], new_caches


def compiled_step(params, caches, token):
    """The step and the caches to call it with. --auto-layout: the compiler picks the caches'
    layout (jax.experimental.layout's Layout.AUTO, compiled ahead of the loop), and the caches
    are put in it once, so no call converts them (JAX's "Device-local array layout control")."""
    if not args.auto_layout:
        return jax.jit(decode_step, donate_argnums=(1,)), caches
    auto = Format(Layout.AUTO)
    step = jax.jit(
        decode_step, donate_argnums=(1,), in_shardings=(None, auto, None, None), out_shardings=(None, auto)
    ).lower(params, caches, token, 0).compile()
    return step, jax.device_put(caches, step.input_formats[0][1])


def main():
    params = init_params(jax.random.PRNGKey(0))
    head_dim = args.d_model // args.heads
    shape = (args.batch, args.heads, args.cache, head_dim)
    if args.layout == "bthd":
        shape = (args.batch, args.cache, args.heads, head_dim)
    elif args.layout == "btf":
        shape = (args.batch, args.cache, args.d_model)
    caches = [{"k": jnp.zeros(shape, DTYPE), "v": jnp.zeros(shape, DTYPE)} for _ in range(args.layers)]
    token = jnp.zeros((args.batch, 1), jnp.int32)
    step, caches = compiled_step(params, caches, token)
    for pos in range(args.tokens):
        if pos == WARM:
            jax.block_until_ready(token)
            start = time.perf_counter()
        token, caches = step(params, caches, token, pos)
    jax.block_until_ready(token)
    elapsed = time.perf_counter() - start
    if args.trace:  # after the timed tokens, so the profiler's start and stop are not timed
        jax.profiler.start_trace(args.trace)
        for pos in range(args.tokens, args.tokens + 3):
            token, caches = step(params, caches, token, pos)
        jax.block_until_ready(token)
        jax.profiler.stop_trace()
    print(f"step_ms {1e3 * elapsed / (args.tokens - WARM):.4f} head_dim {head_dim} last {int(token[0, 0])}")


if __name__ == "__main__":
    main()
