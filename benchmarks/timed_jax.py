"""A short-step JAX program for benchmarks/overhead.py: a jitted MLP training step (256-256-256,
batch 32) that blocks on its result every step, well under a millisecond on the CPU.

    timed_jax.py OUT.json [--steps N] [--alternate] [--async] [--state]

--async: the loop never blocks (`params, loss = step(params, x, y)`), as a training loop that
logs rarely runs: on a TPU such a step is dispatch-bound (the host's dispatch is the step), so
the host's per-step work is all there is to measure. One time can then not be taken per step
without blocking; each entry of OUT.json is the mean step of a window of WINDOW steps (host
clock), and --alternate switches the hook every two windows.

--state: the step returns only its state, a flax `TrainState` (`state.apply_gradients(...)`, as
flax's examples/mnist `update_model` and the NNX toy examples' train steps do): no loss, no tuple,
so the array whose readiness times the step is found through JAX's pytree registry
(collect/jax/probe.py), not handed to a thread each step.

--alternate (under `tpuscope run` only): after 10 steps, tpuscope's hooks on the program's
path (the wrapper around the jitted function, which opens and closes steps and hands the
outputs to the readiness thread, and the ones around `jax.block_until_ready` and the array's
`block_until_ready` method it calls, which count the wait as a host sync) are switched off and
on every two steps, so both kinds of step run side by side in one process; OUT.json then holds
{"on": [...], "off": [...], "before_loop": {...}}: the session's cost figures (flush CPU, hooked
steps) when the timed loop began, so that flushes done before it (the compile rows of the
setup, a one-off like the compile hooks, which the cost keeps apart) are not counted per step. JAX's monitoring listeners stay registered throughout (JAX fires
none on a cached call). The method is switched outside the timed region, by setting the
class attribute back to what JAX defined (tpuscope's wrapper keeps it as __wrapped__).
"""

import argparse
import json
import time

import jax
import jax.numpy as jnp
from alternate import cost_now

WARM = 10
WINDOW = 20  # steps per timed window with --async


def make_step():
    def loss_fn(params, x, y):
        h = jax.nn.relu(x @ params["w1"] + params["b1"])
        return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)

    def train_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - 1e-3 * g, params, grads), loss

    def state_step(state, x, y):
        grads = jax.grad(loss_fn)(state.params, x, y)
        return state.apply_gradients(grads=grads)

    return jax.jit(train_step), jax.jit(state_step)


def first_state(params):
    """The parameters as a flax TrainState under SGD (flax and optax: the test extras)."""
    import optax
    from flax.training import train_state

    return train_state.TrainState.create(apply_fn=None, params=params, tx=optax.sgd(1e-3))


def call(step, carry, x, y, state):
    """One step: (the carry for the next, what a blocking loop waits on)."""
    if state:
        carry = step(carry, x, y)
        return carry, carry
    params, loss = step(carry, x, y)
    return params, loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--alternate", action="store_true")
    parser.add_argument("--async", dest="no_block", action="store_true")
    parser.add_argument("--state", action="store_true")
    args = parser.parse_args()

    key = jax.random.PRNGKey(0)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    params = {
        "w1": jax.random.normal(k1, (256, 256)) * 0.05,
        "b1": jnp.zeros(256),
        "w2": jax.random.normal(k2, (256, 256)) * 0.05,
        "b2": jnp.zeros(256),
    }
    x, y = jax.random.normal(k3, (32, 256)), jax.random.normal(k4, (32, 256))
    step = make_step()[1 if args.state else 0]
    carry = first_state(params) if args.state else params
    hooked = (step, jax.block_until_ready)
    bare = (getattr(step, "__wrapped__", step), _original(jax.block_until_ready))
    methods = _block_methods()
    times, hook_on = [], []
    before_loop = cost_now() if args.alternate else None
    if args.no_block:
        times, hook_on = _windows(hooked[0], bare[0], carry, x, y, args)
    for i in range(0 if args.no_block else args.steps):
        on = not args.alternate or i < WARM or (i // 2) % 2 == 0
        fn, block = hooked if on else bare
        if args.alternate and i >= WARM and i % 2 == 0:
            methods(on)
        hook_on.append(None if i < WARM else on)
        start = time.perf_counter()
        carry, wait = call(fn, carry, x, y, args.state)
        block(wait)
        times.append(time.perf_counter() - start)
    if args.alternate:
        times = {
            key: [t for t, on in zip(times, hook_on, strict=True) if on is want]
            for key, want in (("on", True), ("off", False))
        }
        times["before_loop"] = before_loop
    with open(args.out, "w") as handle:
        json.dump(times, handle)


def _windows(hooked, bare, carry, x, y, args):
    """--async: the mean step time of each window of WINDOW calls that never block, with
    whether the hook was on (None in the warm-up)."""
    times, hook_on = [], []
    for k in range(args.steps // WINDOW):
        on = not args.alternate or k < WARM or (k // 2) % 2 == 0
        step = hooked if on else bare
        hook_on.append(None if k < WARM else on)
        start = time.perf_counter()
        for _ in range(WINDOW):
            carry, _ = call(step, carry, x, y, args.state)
        times.append((time.perf_counter() - start) / WINDOW)
    jax.block_until_ready(carry)
    return times, hook_on


def _original(fn):
    """What JAX defined (tpuscope's wrappers keep it as __wrapped__)."""
    return getattr(fn, "__wrapped__", fn)


def _block_methods():
    """A switch between the array class's block_until_ready as it is now (hooked under
    tpuscope run) and as JAX defined it."""
    from jax._src.array import ArrayImpl

    hooked = ArrayImpl.__dict__["block_until_ready"]
    bare = _original(hooked)

    def switch(on):
        ArrayImpl.block_until_ready = hooked if on else bare

    return switch


if __name__ == "__main__":
    main()
