"""A ResNet-18-style classifier trained in the idiom of google/flax `examples/imagenet`
(NHWC images, a 7x7 stride-2 stem and a 3x3 max-pool, basic blocks of two 3x3 convolutions with
batch norm and running statistics, global average pooling, SGD with Nesterov momentum, one
jitted `train_step`), written in plain JAX with `lax.conv_general_dilated` and optax so that it
needs no flax. Synthetic data, no download.

    cnn_train.py [--dtype bf16|f32] [--batch 128] [--size 224] [--blocks 2,2,2,2]
                 [--width 64] [--classes 1000] [--steps 30]

Prints `step_ms <mean step time over the timed steps>` (steps after the first 10, timed from the
first call to the last result ready, as a user times a loop) and the step's convolution FLOPs.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import optax
from jax import lax

parser = argparse.ArgumentParser()
parser.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
parser.add_argument("--batch", type=int, default=128)
parser.add_argument("--size", type=int, default=224)
parser.add_argument("--blocks", default="2,2,2,2")
parser.add_argument("--width", type=int, default=64)
parser.add_argument("--classes", type=int, default=1000)
parser.add_argument("--steps", type=int, default=30)
args = parser.parse_args()
dtype = jnp.bfloat16 if args.dtype == "bf16" else jnp.float32
DIMS = ("NHWC", "HWIO", "NHWC")
FLOPS = []  # 2 * MACs of each forward convolution and the dense head, filled at trace time


def conv_param(key, k, c_in, c_out):
    return jax.random.normal(key, (k, k, c_in, c_out), jnp.float32) * (2.0 / (k * k * c_in)) ** 0.5


def bn_param(c):
    return {"scale": jnp.ones(c), "bias": jnp.zeros(c)}, {"mean": jnp.zeros(c), "var": jnp.ones(c)}


def init(key):
    """Parameters (f32, as flax keeps them) and batch-norm running statistics."""
    keys = iter(jax.random.split(key, 64))
    params, stats = {"stem": conv_param(next(keys), 7, 3, args.width)}, {}
    params["stem_bn"], stats["stem_bn"] = bn_param(args.width)
    c_in = args.width
    for stage, n in enumerate(int(b) for b in args.blocks.split(",")):
        c_out = args.width * 2**stage
        for block in range(n):
            name = f"s{stage}b{block}"
            params[name + "c1"] = conv_param(next(keys), 3, c_in, c_out)
            params[name + "c2"] = conv_param(next(keys), 3, c_out, c_out)
            params[name + "n1"], stats[name + "n1"] = bn_param(c_out)
            params[name + "n2"], stats[name + "n2"] = bn_param(c_out)
            if c_in != c_out or (block == 0 and stage > 0):
                params[name + "proj"] = conv_param(next(keys), 1, c_in, c_out)
                params[name + "pn"], stats[name + "pn"] = bn_param(c_out)
            c_in = c_out
    params["head"] = jax.random.normal(next(keys), (c_in, args.classes)) * c_in**-0.5
    return params, stats


def conv(x, w, stride):
    FLOPS.append(2 * x.shape[0] * w.size * (x.shape[1] // stride) * (x.shape[2] // stride))
    return lax.conv_general_dilated(x, w.astype(dtype), (stride, stride), "SAME", dimension_numbers=DIMS)


def batch_norm(x, p, s, new_stats, name, train):
    if train:
        mean = jnp.mean(x.astype(jnp.float32), axis=(0, 1, 2))
        var = jnp.var(x.astype(jnp.float32), axis=(0, 1, 2))
        new_stats[name] = {"mean": 0.9 * s["mean"] + 0.1 * mean, "var": 0.9 * s["var"] + 0.1 * var}
    else:
        mean, var = s["mean"], s["var"]
    y = (x - mean.astype(dtype)) * lax.rsqrt(var + 1e-5).astype(dtype)
    return y * p["scale"].astype(dtype) + p["bias"].astype(dtype)


def forward(params, stats, x, train=True):
    new_stats = {}

    def bn(h, name):
        return batch_norm(h, params[name], stats[name], new_stats, name, train)

    x = jax.nn.relu(bn(conv(x, params["stem"], 2), "stem_bn"))
    x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    for stage, n in enumerate(int(b) for b in args.blocks.split(",")):
        for block in range(n):
            name, stride = f"s{stage}b{block}", 2 if stage > 0 and block == 0 else 1
            y = jax.nn.relu(bn(conv(x, params[name + "c1"], stride), name + "n1"))
            y = bn(conv(y, params[name + "c2"], 1), name + "n2")
            if name + "proj" in params:
                x = bn(conv(x, params[name + "proj"], stride), name + "pn")
            x = jax.nn.relu(x + y)
    x = jnp.mean(x, axis=(1, 2))
    FLOPS.append(2 * x.shape[0] * params["head"].size)
    return x @ params["head"].astype(dtype), new_stats


def loss_fn(params, stats, images, labels):
    logits, new_stats = forward(params, stats, images)
    one_hot = jax.nn.one_hot(labels, args.classes)
    loss = optax.softmax_cross_entropy(logits.astype(jnp.float32), one_hot).mean()
    return loss, new_stats


optimizer = optax.sgd(0.1, momentum=0.9, nesterov=True)


@jax.jit
def train_step(params, stats, opt_state, images, labels):
    (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, stats, images, labels)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), new_stats, opt_state, loss


params, stats = init(jax.random.PRNGKey(0))
opt_state = optimizer.init(params)
images = jax.random.normal(jax.random.PRNGKey(1), (args.batch, args.size, args.size, 3)).astype(dtype)
labels = jax.random.randint(jax.random.PRNGKey(2), (args.batch,), 0, args.classes)

WARM = 10
for i in range(args.steps):
    if i == WARM:
        jax.block_until_ready(params)
        t0 = time.perf_counter()
    params, stats, opt_state, loss = train_step(params, stats, opt_state, images, labels)
loss = float(loss)
elapsed = time.perf_counter() - t0
print(f"step_ms {1e3 * elapsed / (args.steps - WARM):.4f} flops_per_step {3 * sum(FLOPS)} loss {loss:.4f}")
