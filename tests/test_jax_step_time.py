"""A JAX step lasts until its outputs are ready, not until its async dispatch returned (real JAX, CPU)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
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


@pytest.mark.parametrize(("host_ms", "host_bound_first"), [(0, False), (3, True)])
def test_steps_after_a_drain_end_when_their_outputs_are_ready(
    tmp_path: Path, host_ms: int, host_bound_first: bool
) -> None:
    """Keras's `fit` on a TPU v5e (tests/tpu/programs/keras_xception.py): each epoch ends in a
    read of its logs (the device drains) and an eager op; then the host dispatches the next
    steps in a few ms each until the runtime's queue holds it back (about 2 steps in flight),
    and from there at the device's pace. Before, the first two steps of each epoch were timed
    at their dispatch (6.5-7.4 ms against 96 ms of device work) and the lane took the rest at
    the host's pace, the backlog spread over them (p50 109 ms, 1.16x): polled steps found
    ready within a few calls ended at their host ends, which counted as the device keeping
    pace, and the lane opened again at once after each epoch on the count kept from before it.
    Here the loop keeps 2 steps in flight by polling `is_ready()` (which no hook sees), with
    `host_ms` of its own work a step (`host_bound_first`: a first epoch whose host work is
    longer than the step, with an eager op every third step, so the lane opens, closes and
    opens again before the device-bound epochs): a step the
    program saw not ready at some time must not end before it (less LAG_NS: ready.py keeps a
    host's end for a device less far behind), and the steps take what the program timed."""
    from tpuscope.collect.jax.ready import LAG_NS

    def train(w: jax.Array, x: jax.Array) -> tuple:
        for _ in range(6):  # tens of ms of device work against tens of us of dispatch
            x = jnp.tanh(x @ w)
        return w - 1e-3 * x.T @ x, jnp.mean(x * x)

    epochs, per_epoch = 4, 13
    seen_running: dict[int, int] = {}  # loop call -> last time_ns its output was not ready
    epoch_s: list[float] = []
    with tpuscope.profile(store=tmp_path, name="drains", warmup=1, analyze_at_exit=False) as run:
        step = jax.jit(train)
        w, x = jnp.eye(512) * 0.5, jnp.full((512, 512), 0.01)
        jax.block_until_ready(step(w, x))  # compiled (step 0)
        call = 0
        for epoch in range(epochs):
            start, in_flight = time.perf_counter(), []
            pause_s = 0.15 if host_bound_first and epoch == 0 else host_ms / 1e3
            for _ in range(per_epoch):
                w, loss = step(w, x)
                time.sleep(pause_s)
                if pause_s > 0.1 and call % 3 == 2:  # the lane left and taken again
                    jax.lax.convert_element_type(loss, jnp.bfloat16)
                in_flight.append((call, loss))
                call += 1
                if len(in_flight) > 2:  # the runtime's queue: 2 steps in flight at most
                    earlier, out = in_flight.pop(0)
                    while not out.is_ready():
                        seen_running[earlier] = time.time_ns()
                        time.sleep(0.0002)
            float(loss)  # the epoch's logs read: the device drains
            jax.lax.convert_element_type(loss, jnp.bfloat16)  # an eager op (Keras's, here too)
            epoch_s.append(time.perf_counter() - start)
    recorded = tpuscope.load_run(run.path)
    if host_bound_first:
        (proc,) = recorded.meta["processes"]
        assert proc["jax_step_paths"]["lane"] > 0, proc["jax_step_paths"]
    loop = recorded.steps.iloc[1 : 1 + epochs * per_epoch]  # step 0 holds the compiling call
    assert len(loop) == epochs * per_epoch
    assert seen_running, "the loop never ran ahead of the device: nothing to prove"
    ends = loop["end_ns"].to_numpy()
    early = {k: (t - int(ends[k])) / 1e6 for k, t in seen_running.items() if ends[k] < t - LAG_NS}
    assert not early, f"steps ended before the program saw them running (ms): {early}"
    later = loop.iloc[per_epoch:]  # after the first epoch's drain
    own_s = sum(epoch_s[1:]) / ((epochs - 1) * per_epoch)
    p50 = float(np.median(later["wall_ns"])) / 1e9
    assert 0.6 * own_s < p50 < 1.5 * own_s, (p50, own_s)
