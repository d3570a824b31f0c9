"""An MLP trained with optax, in the idiom of jax-ml/jax `examples/mnist_classifier.py`
(parameters made by `jax.random` outside `jit`, a jitted `update`, a plain Python loop) with
optax's Adam, as Flax and optax's own examples train. Synthetic data, no download.

    mlp_train.py [--widths 1024,4096,4096,1024] [--batch 2048] [--dtype bf16|f32]
                 [--precision default|highest] [--steps 40] [--annotate] [--eager]
                 [--master-f32] [--host-data] [--callback print|pure|io] [--log-every N]
                 [--state]

Prints `step_ms <mean step time over the timed steps>` (steps after the first 10, timed from
the first call to the last result ready, as a user times a loop) and the step's FLOPs.
--annotate wraps each step in `jax.profiler.StepTraceAnnotation` (xprof's step markers).
--eager leaves `update` un-jitted (the step runs op by op, as when a user forgets `jax.jit`).
--master-f32 keeps the parameters (and Adam's state) in f32 and computes in --dtype, as Flax's
`dtype=` over `param_dtype=float32` does: the mixed-precision twin of an f32 program.
--host-data feeds each step a batch drawn on the host, as mnist_classifier.py's `data_stream`
does (a numpy permutation of a numpy training set, each batch indexed out of it and handed to
the jitted step as numpy arrays): the input-bound twin of the default, whose batch stays on
the device.
--callback calls the host from inside the jitted step, as JAX's external-callbacks guide shows:
`print` a `jax.debug.print` of the loss (left in a step after debugging), `pure` a numpy
function of the loss whose result scales the update (`jax.pure_callback`), `io` an ordered
`jax.experimental.io_callback` that logs the loss on the host.
--log-every N reads the loss on the host every N steps (`history.append(float(loss))`, as a
training loop keeps a loss curve; 1: every step, the host waiting for each step's result).
--state keeps the parameters and Adam's state in a flax `TrainState` and jits a step that
returns that state alone, donated (`donate_argnums=0`), as flax's examples/mnist `update_model`
and the NNX toy examples' `train_step` return theirs: no loss comes out of the step.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import io_callback

parser = argparse.ArgumentParser()
parser.add_argument("--widths", default="1024,4096,4096,1024")
parser.add_argument("--batch", type=int, default=2048)
parser.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
parser.add_argument("--precision", default="default", choices=["default", "highest"])
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--annotate", action="store_true")
parser.add_argument("--eager", action="store_true", help="no jax.jit on the step")
parser.add_argument("--master-f32", action="store_true", help="f32 parameters, compute in --dtype")
parser.add_argument("--host-data", action="store_true", help="numpy batches drawn each step")
parser.add_argument("--callback", default="", choices=["", "print", "pure", "io"])
parser.add_argument("--log-every", type=int, default=0, help="float(loss) every N steps (0: never)")
parser.add_argument("--state", action="store_true", help="a donated flax TrainState, returned alone")
parser.add_argument("--trace", default="", help="a jax.profiler trace into this folder")
parser.add_argument("--trace-from", type=int, default=10, help="first traced step (0: from start-up, compiles included)")
parser.add_argument("--trace-count", type=int, default=5)
args = parser.parse_args()
if args.trace and args.trace_from == 0:
    jax.profiler.start_trace(args.trace)

if args.precision == "highest":
    jax.config.update("jax_default_matmul_precision", "highest")
dtype = jnp.bfloat16 if args.dtype == "bf16" else jnp.float32
widths = [int(w) for w in args.widths.split(",")]
param_dtype = jnp.float32 if args.master_f32 else dtype


def init_params(key, sizes):
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
        key, wkey = jax.random.split(key)
        params.append((jax.random.normal(wkey, (n_in, n_out)).astype(param_dtype) / n_in**0.5,
                       jnp.zeros(n_out, param_dtype)))
    return params


def predict(params, x):
    params = jax.tree.map(lambda p: p.astype(dtype), params)
    x = x.astype(dtype)
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss_fn(params, x, y):
    return jnp.mean((predict(params, x).astype(jnp.float32) - y) ** 2)


optimizer = optax.adam(1e-3)


def host_loss_scale(loss):
    """A numpy function of the loss (a host-side schedule): 1 / (1 + loss / 1000)."""
    return np.float32(1.0 / (1.0 + float(loss) / 1000.0))


losses = []


def update(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    if args.callback == "print":
        jax.debug.print("loss {loss}", loss=loss)
    elif args.callback == "pure":
        scale = jax.pure_callback(host_loss_scale, jax.ShapeDtypeStruct((), jnp.float32), loss)
        grads = jax.tree.map(lambda g: g * scale.astype(g.dtype), grads)
    elif args.callback == "io":
        io_callback(losses.append, None, loss, ordered=True)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def update_state(state, x, y):
    return state.apply_gradients(grads=jax.grad(loss_fn)(state.params, x, y))


if not args.eager:
    update = jax.jit(update)
    update_state = jax.jit(update_state, donate_argnums=0)


params = init_params(jax.random.PRNGKey(0), widths)
opt_state = optimizer.init(params)
x = jax.random.normal(jax.random.PRNGKey(1), (args.batch, widths[0])).astype(dtype)
y = jax.random.normal(jax.random.PRNGKey(2), (args.batch, widths[-1]))


def data_stream(num_train=8 * args.batch):
    """Batches drawn on the host from a numpy training set, epoch after epoch."""
    rng = np.random.default_rng(0)
    images = rng.standard_normal((num_train, widths[0]), dtype=np.float32)
    labels = rng.standard_normal((num_train, widths[-1]), dtype=np.float32)
    while True:
        perm = rng.permutation(num_train)
        for i in range(num_train // args.batch):
            batch_idx = perm[i * args.batch : (i + 1) * args.batch]
            yield images[batch_idx], labels[batch_idx]


batches = data_stream() if args.host_data else None
if args.state:
    from flax.training import train_state

    state = train_state.TrainState.create(apply_fn=predict, params=params, tx=optimizer)
history = []
WARM = 10
for i in range(args.steps):
    if batches is not None:
        x, y = next(batches)
    if i == WARM:
        jax.block_until_ready(state if args.state else params)
        t0 = time.perf_counter()
    if args.trace and i == args.trace_from and i > 0:
        jax.profiler.start_trace(args.trace)
    if args.state:
        state = update_state(state, x, y)
    elif args.annotate:
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            params, opt_state, loss = update(params, opt_state, x, y)
    else:
        params, opt_state, loss = update(params, opt_state, x, y)
    if args.log_every and i % args.log_every == 0:
        history.append(float(loss))
    if args.trace and i == args.trace_from + args.trace_count - 1:
        jax.block_until_ready(params)
        jax.profiler.stop_trace()
if args.state:
    jax.block_until_ready(state)
    elapsed = time.perf_counter() - t0
    loss = float(jax.jit(loss_fn)(state.params, x, y))
else:
    loss = float(loss)
    elapsed = time.perf_counter() - t0
flops = 6 * args.batch * sum(a * b for a, b in zip(widths[:-1], widths[1:], strict=True))
print(f"step_ms {1e3 * elapsed / (args.steps - WARM):.4f} flops_per_step {flops} loss {loss:.4f}")
