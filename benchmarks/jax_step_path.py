"""Where tpuscope's JAX hooks spend their time on the program's critical path, measured inside
the profiled program (timed_jax's step, the hooks switched off and on every two steps as in
timed_jax --alternate):

    tpuscope run --quiet python benchmarks/jax_step_path.py [--steps 10000]

Stamps are taken just around JAX's own calls (the jitted executable and the array's C++
block_until_ready, reached through the hooks when they are on), so each step splits into:
pre-dispatch (the call until JAX dispatches), post-dispatch (JAX returned until the program
has the outputs), pre-block (the sync call until JAX waits) and post-block (JAX's wait
returned until the program goes on). With the hooks off the same stamps give the floor of each
piece. Work after the dispatch and before the wait runs while the computation does (on this
CPU backend it competes with it for the 2 cores); work before the dispatch and after the wait
is on the critical path whatever the device.
"""

from __future__ import annotations

import argparse
import statistics
from time import perf_counter_ns

import jax
import jax.numpy as jnp
from jax._src.array import ArrayImpl
from timed_jax import make_step

PIECES = ("pre-dispatch", "post-dispatch", "pre-block", "post-block")


def make_state() -> tuple:
    """timed_jax's parameters and batch."""
    k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(0), 4)
    params = {
        "w1": jax.random.normal(k1, (256, 256)) * 0.05,
        "b1": jnp.zeros(256),
        "w2": jax.random.normal(k2, (256, 256)) * 0.05,
        "b2": jnp.zeros(256),
    }
    return params, jax.random.normal(k3, (32, 256)), jax.random.normal(k4, (32, 256))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10000)
    steps = parser.parse_args().steps
    params, x, y = make_state()
    step = make_step()
    stamps = [0, 0, 0, 0]
    raw = step.__wrapped__  # under tpuscope run: the executable the hook's function calls

    def stamped(*args):
        stamps[0] = perf_counter_ns()
        out = raw(*args)
        stamps[1] = perf_counter_ns()
        return out

    step_cells = dict(zip(step.__code__.co_freevars, step.__closure__, strict=True))
    step_cells["jitted"].cell_contents = stamped  # the hook's function now calls the stamped one
    hooked_method = ArrayImpl.__dict__["block_until_ready"]
    cpp_method = hooked_method.__wrapped__

    def stamped_method(array):
        stamps[2] = perf_counter_ns()
        out = cpp_method(array)
        stamps[3] = perf_counter_ns()
        return out

    cells = dict(zip(hooked_method.__code__.co_freevars, hooked_method.__closure__, strict=True))
    cells["original"].cell_contents = stamped_method  # the hook now calls the stamped method
    modes = {
        True: (step, jax.block_until_ready, hooked_method),
        False: (stamped, jax.block_until_ready.__wrapped__, stamped_method),
    }
    times: dict[bool, list[list[int]]] = {on: [[] for _ in range(5)] for on in modes}
    for i in range(steps + 20):
        on = i < 20 or (i // 2) % 2 == 0
        fn, block, method = modes[on]
        if i % 2 == 0:
            ArrayImpl.block_until_ready = method
        start = perf_counter_ns()
        params, loss = fn(params, x, y)
        called = perf_counter_ns()
        block(loss)
        end = perf_counter_ns()
        if i >= 20:
            for piece, ns in zip(
                times[on],
                (
                    stamps[0] - start,
                    called - stamps[1],
                    stamps[2] - called,
                    end - stamps[3],
                    end - start,
                ),
                strict=True,
            ):
                piece.append(ns)
    ArrayImpl.block_until_ready = hooked_method
    for k, name in enumerate((*PIECES, "whole step")):
        on, off = statistics.median(times[True][k]) / 1e3, statistics.median(times[False][k]) / 1e3
        print(
            f"{name:14s} hooks on {on:7.2f} us   off {off:7.2f} us   difference {on - off:+6.2f} us"
        )


if __name__ == "__main__":
    main()
