"""A JAX step lasts until its outputs are ready, not until its async dispatch returned (real JAX, CPU)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import tpuscope  # noqa: E402

STEPS = 10


def test_step_wall_time_covers_the_steps_compute(tmp_path: Path) -> None:
    """A loop that never blocks: dispatch returns at once, yet each step must last until its
    outputs are ready. Proved by timestamps, not by durations (which load stretches unevenly:
    a median step wall of 8.6 ms against 15.8 ms of blocked compute measured after the loop
    once failed): right after the loop each step's output is asked whether it is ready; a
    step whose output was not ready at that moment must end after it."""
    with tpuscope.profile(store=tmp_path, name="jax-step-time", warmup=1) as run:

        @jax.jit
        def step(x, w):
            for _ in range(3):
                x = jnp.tanh(x @ w)
            return x

        w = jnp.full((512, 512), 1 / 512)
        x = step(jnp.ones((512, 512)), w).block_until_ready()  # compiled
        outputs = []
        for _ in range(STEPS):
            x = step(x, w)  # never blocks
            outputs.append(x)
        probed_ns = (
            time.time_ns()
        )  # before asking: an output not ready then was not ready at probed_ns
        not_ready = [i for i, out in enumerate(outputs) if not out.is_ready()]
        x.block_until_ready()
    steps = tpuscope.load_run(run.path).steps
    loop = steps.iloc[1 : 1 + STEPS]  # step 0 holds the first (compiling) call
    assert len(loop) == STEPS
    assert not_ready, "the loop did not run ahead of the device: nothing to prove"
    assert STEPS - 1 in not_ready  # the last output is the last to be ready
    ends = loop.end_ns.to_numpy()
    assert all(ends[i] > probed_ns for i in not_ready), (not_ready, list(ends - probed_ns))
    # steps tile the run: each starts where the previous one ended
    assert (steps.start_ns.iloc[1:].to_numpy() >= steps.end_ns.iloc[:-1].to_numpy()).all()
    assert (steps.wall_ns >= 0).all()
