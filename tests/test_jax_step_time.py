"""A JAX step lasts until its outputs are ready, not until its async dispatch returned (real JAX, CPU)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import tpuscope  # noqa: E402

STEPS = 10


def test_step_wall_time_covers_the_steps_compute(tmp_path: Path) -> None:
    """A loop that never blocks: dispatch returns at once, yet each step must take about
    what the same step takes when blocked on (measured in-process after the loop)."""
    with tpuscope.profile(store=tmp_path, name="jax-step-time", warmup=1) as run:
        @jax.jit
        def step(x, w):
            for _ in range(3):
                x = jnp.tanh(x @ w)
            return x

        w = jnp.full((512, 512), 1 / 512)
        x = step(jnp.ones((512, 512)), w).block_until_ready()  # compiled
        dispatch = time.perf_counter()
        for _ in range(STEPS):
            x = step(x, w)  # never blocks
        dispatch = time.perf_counter() - dispatch
        x.block_until_ready()
        blocking = []
        for _ in range(3):
            start = time.perf_counter()
            x = step(x, w).block_until_ready()
            blocking.append(time.perf_counter() - start)
    compute_ns = statistics.median(blocking) * 1e9
    steps = tpuscope.load_run(run.path).steps
    loop = steps.iloc[1:1 + STEPS]  # step 0 holds the first (compiling) call
    assert dispatch * 1e9 / STEPS < compute_ns / 3, "the loop did not run ahead of the device"
    assert loop.wall_ns.median() >= 0.6 * compute_ns, (list(loop.wall_ns), compute_ns)
    # steps tile the run: each starts where the previous one ended
    assert (steps.start_ns.iloc[1:].to_numpy() >= steps.end_ns.iloc[:-1].to_numpy()).all()
    assert (steps.wall_ns >= 0).all()
