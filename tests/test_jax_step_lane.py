"""The JAX step path's lane (lane.py: a plain call of the step function stamped in the function
the jit hook returns, the rows written by the flush thread or before the program's next other
event, steps.py `_lane_flush`) gives the rows the general
path gives, on a real jitted loop that goes in and out of it: waits and reads on the loss, calls of another jitted function, an eager
`jax.grad`, a new input shape that compiles, and steps that never wait."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

import tpuscope  # noqa: E402
from tpuscope.collect.jax.lane import Lane  # noqa: E402
from tpuscope.collect.jax.ready import StepClock  # noqa: E402
from tpuscope.collect.jax.steps import StepTracker  # noqa: E402

# what each table's rows must agree on (times and compile durations are the machine's)
COLUMNS = {
    "steps": ["step", "boundary", "compiles", "executions", "transfers_from_device"],
    "metrics": ["step", "name", "kind", "count"],
    "call_sites": ["step", "kind", "name", "location", "library_frame", "count"],
}


def loop() -> None:
    """A training loop with a bit of everything a real one does between plain steps."""

    def train(w: jax.Array, x: jax.Array, big: jax.Array) -> tuple:
        for _ in range(
            6
        ):  # a few ms of work: a step that nothing waits on is still running at the next call
            big = jnp.tanh(big @ big)
        return w - 0.01 * x.T @ (x @ w) + 0 * jnp.mean(big), jnp.mean((x @ w) ** 2)

    step = jax.jit(train)
    other = jax.jit(lambda w: jnp.linalg.norm(w))
    w, x, big = jnp.ones((16, 16)), jnp.ones((8, 16)), jnp.full((320, 320), 0.01)
    for i in range(60):
        if i == 30:
            x = jnp.ones((4, 16))  # a new shape: the step compiles again
        w, loss = step(w, x, big)
        if i % 10 == 3:
            other(w).block_until_ready()
        if i == 40:
            jax.grad(lambda v: jnp.sum(v * v))(x)  # eager: op by op
        if i % 7 == 5:
            continue  # no wait this step
        float(loss) if i % 2 else jax.block_until_ready(loss)


def tables(tmp_path: Path, name: str) -> dict:
    jax.clear_caches()  # both runs compile what they compile from scratch
    with tpuscope.profile(store=tmp_path, name=name, warmup=1, analyze_at_exit=False) as run:
        loop()
    recorded = tpuscope.load_run(run.path)
    return {
        table: getattr(recorded, table)[columns].reset_index(drop=True)
        for table, columns in COLUMNS.items()
    }


def test_lane_rows_are_the_general_paths_rows(tmp_path: Path, monkeypatch) -> None:
    written: list[int] = []  # stamps turned into rows at each of the lane's writes
    left: list[bool] = []  # each time something took the loop off the lane
    flush, leave = StepTracker._lane_flush, StepTracker._leave_lane

    def counted_flush(tracker: StepTracker, now_ns: int | None = None) -> None:
        written.append(tracker.lane.pending())
        flush(tracker, now_ns)

    def counted_leave(tracker: StepTracker) -> None:
        if tracker.lane.target is not None:
            left.append(True)
        leave(tracker)

    tables(tmp_path, "first")  # JAX's once-a-process metrics (its compilation cache's) go here
    monkeypatch.setattr(StepTracker, "_lane_flush", counted_flush)
    monkeypatch.setattr(StepTracker, "_leave_lane", counted_leave)
    lane = tables(tmp_path, "lane")
    assert sum(written) >= 15 and left, (written, left)  # in the lane, and out of it
    monkeypatch.setattr(StepClock, "settled_at", lambda clock, t_ns: False)
    written.clear()
    general = tables(tmp_path, "general")
    assert not sum(written)
    assert len(lane["steps"]) == 60 and lane["steps"]["compiles"].sum() >= 2
    assert lane["steps"]["transfers_from_device"].sum() == 26  # the float(loss) steps
    for table, rows in lane.items():
        assert rows.equals(general[table]), (
            table,
            rows.compare(general[table]) if rows.shape == general[table].shape else rows,
        )


def test_a_loop_that_never_waits_takes_the_lane(tmp_path: Path) -> None:
    """A dispatch-bound loop (a tiny step that nothing waits on, as on a TPU) has outputs in
    flight at every call: its steps are polled, then taken in the lane (lane.py), with no
    thread hand-off per step and a clock read every LANE_BATCH calls. Every call is a step,
    steps tile the run, and each starts where the program's own clock saw its call."""

    def train(w: jax.Array, x: jax.Array) -> tuple:
        loss, g = jax.value_and_grad(lambda v: jnp.mean(jnp.tanh(x @ v) ** 2))(w)
        return w - 0.01 * g, loss

    calls, own = 3000, []
    with tpuscope.profile(store=tmp_path, name="never-waits", warmup=1) as run:
        step = jax.jit(train)
        w, x = jnp.full((16, 16), 0.01), jnp.ones((16, 16))
        for _ in range(calls):
            own.append(time.time_ns())
            w, loss = step(w, x)
        w.block_until_ready()
    recorded = tpuscope.load_run(run.path)
    (proc,) = recorded.meta["processes"]
    paths = proc["jax_step_paths"]
    # (most: the CPU backend's device thread falls behind in bursts, more so on a loaded
    # machine, and those steps go to the helper thread)
    assert paths["lane"] > 0.5 * calls, paths
    steps = recorded.steps
    assert len(steps) == calls  # step 0 holds the compiling first call
    # Steps of no length come only from the helper thread finding several steps' outputs ready
    # at once (the device behind, as after the compile; main before the lane had 4.5% of these
    # steps so, on this loaded CPU). Polled and lane steps end at their host ends.
    steady = steps.iloc[calls // 2 :]
    assert (steady["wall_ns"] > 0).mean() > 0.97, steady[steady["wall_ns"] <= 0]
    assert (steps["start_ns"].to_numpy()[1:] == steps["end_ns"].to_numpy()[:-1]).all()
    # most lane steps spread between clock reads, and still where the calls were made
    assert paths["batched"] > 0.5 * paths["lane"], paths
    late = np.abs(steady["start_ns"].to_numpy() - np.asarray(own[calls // 2 :]))
    assert np.median(late) < 50_000, np.percentile(late, [50, 90, 99])


def test_a_loop_that_reads_its_loss_has_each_step_timed_by_its_own_call(tmp_path: Path) -> None:
    """A read marks the next call (lane.py): a loop that reads its loss every step stays in the
    lane, and every step starts at its own call's clock read, none spread over a batch."""

    def train(w: jax.Array, x: jax.Array) -> tuple:
        return w - 0.01 * x.T @ jnp.tanh(x @ w), jnp.mean(w)

    calls, own = 400, []
    with tpuscope.profile(store=tmp_path, name="reads", warmup=1, analyze_at_exit=False) as run:
        step = jax.jit(train)
        w, x = jnp.full((16, 16), 0.01), jnp.ones((16, 16))
        for _ in range(calls):
            own.append(time.time_ns())
            w, loss = step(w, x)
            float(loss)
    recorded = tpuscope.load_run(run.path)
    (proc,) = recorded.meta["processes"]
    paths = proc["jax_step_paths"]
    assert paths["lane"] > 0.5 * calls and paths["batched"] == 0, paths
    starts = recorded.steps["start_ns"].to_numpy()[1:]
    late = starts - np.asarray(own[1:])  # the clock read inside the call, after the program's
    assert len(starts) == calls - 1 and np.median(late) < 20_000, np.percentile(late, [0, 50, 99])
    assert (late > -20_000).all(), late.min()


def test_the_lane_spreads_the_calls_between_its_clock_reads() -> None:
    """`Lane.take`, as the jit hook's calls leave it: calls 1 and 17 read the clock (marks),
    the calls between them are spread evenly; the flush thread takes up to the last mark, an
    event every call so far, the open call's share ending at the event."""
    lane = Lane()
    lane.open(object(), ref_ns=1_000)  # the open step (call 0's) started at 1,000
    lane.calls = 20
    lane.marks.extend((1_100, 1))
    lane.marks.extend((2_700, 17))
    assert list(lane.take()) == list(range(1_100, 2_701, 100))
    assert (lane.taken, lane.pending(), lane.batched) == (17, 3, 15)
    assert list(lane.take(now_ns=3_100)) == [2_800, 2_900, 3_000]
    assert (lane.taken, lane.batched, len(lane.marks)) == (20, 18, 0)
    assert not lane.take() and not lane.take(now_ns=3_200)


def test_a_mark_the_device_had_not_caught_up_with_is_no_anchor() -> None:
    """A device a little slower than the host (lane.py PACE_DEPTH): the mark at call 17 found
    call 13 not done (its call stored negated): the flush thread writes up to the last anchor
    only, and the value read that ends the stretch shows a backlog (its 4 calls took 275 ns
    each against the stretch's 56, lane.py BACKLOG), so call 17's clock read, the host's pace,
    is no step's end: the calls between the last anchor and the read share the time evenly."""
    lane = Lane()
    lane.open(object(), ref_ns=1_000)
    lane.calls = 20
    lane.marks.extend((1_100, 1))
    lane.marks.extend((2_000, -17))  # the host's clock ran ahead of the device
    assert list(lane.take()) == [1_100]  # call 1's stamp; call 17 waits for an anchor
    assert (lane.taken, len(lane.marks)) == (1, 2)
    stamps = lane.take(now_ns=3_100)  # the read after call 20 returned at 3,100
    assert list(stamps) == list(range(1_200, 3_001, 100))  # 2..20: even, not 2,000 at 17
    assert (lane.taken, lane.batched, len(lane.marks)) == (20, 19, 0)


def test_a_device_a_few_calls_behind_that_keeps_pace_leaves_the_marks() -> None:
    """Late at marks 17 and 33, but the calls after them up to the next caught-up mark (49)
    ran at the host's pace: a latency, not a backlog (lane.py BACKLOG), so the host's clock
    reads stay the anchors, uneven as they are."""
    lane = Lane()
    lane.open(object(), ref_ns=0)
    lane.calls = 49
    for ns, call in ((100, 1), (1_000, -17), (3_400, -33), (5_000, 49)):
        lane.marks.extend((ns, call))
    stamps = lane.take()
    assert (stamps[16], stamps[32], stamps[48]) == (1_000, 3_400, 5_000)
    assert lane.batched == 45


def test_the_flush_thread_writes_the_stamps_while_the_loop_appends(
    tmp_path: Path, monkeypatch
) -> None:
    """The program's thread appends stamps without the lock while the flush thread turns them
    into rows (steps.py `lane_rows`): here a thread does that without pause all through a loop
    that never waits. No stamp is lost or written twice: every call is one step, numbered in
    order, and the steps tile the run."""
    trackers: list[StepTracker] = []
    batch = StepTracker.on_lane_batch

    def noted(tracker: StepTracker, outputs: object) -> None:
        if not trackers:
            trackers.append(tracker)
        batch(tracker, outputs)

    monkeypatch.setattr(StepTracker, "on_lane_batch", noted)
    done, taken = threading.Event(), [0]

    def take() -> None:
        while not done.is_set():
            if trackers:
                trackers[0].lane_rows()
                taken[0] += 1

    def train(w: jax.Array, x: jax.Array) -> tuple:
        return w - 0.01 * x.T @ jnp.tanh(x @ w), jnp.mean(w)

    calls = 2000
    with tpuscope.profile(store=tmp_path, name="taken", warmup=1, analyze_at_exit=False) as run:
        step = jax.jit(train)
        w, x = jnp.full((16, 16), 0.01), jnp.ones((16, 16))
        taker = threading.Thread(target=take, daemon=True)
        taker.start()
        for _ in range(calls):
            w, _ = step(w, x)
        w.block_until_ready()
        done.set()
        taker.join()
    steps = tpuscope.load_run(run.path).steps
    (proc,) = tpuscope.load_run(run.path).meta["processes"]
    assert proc["jax_step_paths"]["lane"] > 0.5 * calls and taken[0] > 10, (proc, taken)
    assert len(steps) == calls
    assert (steps["step"].to_numpy() == range(calls)).all()
    assert (steps["start_ns"].to_numpy()[1:] == steps["end_ns"].to_numpy()[:-1]).all()


def test_a_hooked_jitted_function_is_used_as_the_jitted_one(tmp_path: Path) -> None:
    """What `jax.jit` returns under tpuscope (a function, jit_hook.py `_lane_call`) answers
    as the jitted function does: its name, `__wrapped__`, `lower`/`eval_shape`/`_cache_size`,
    a method of a class, keyword arguments and static arguments, and the same results."""
    with tpuscope.profile(store=tmp_path, name="face", warmup=1, analyze_at_exit=False):

        def scaled(x: jax.Array, k: int = 2) -> jax.Array:
            """Scales x."""
            return x * k

        step = jax.jit(scaled, static_argnames="k")

        class Model:
            def __init__(self, k: float) -> None:
                self.k = k

            def __hash__(self) -> int:
                return hash(self.k)

            def __eq__(self, other: object) -> bool:
                return isinstance(other, Model) and other.k == self.k

            apply = jax.jit(lambda self, x: x * self.k, static_argnums=0)

        x = jnp.arange(4.0)
        assert step.__name__ == "scaled" and step.__doc__ == "Scales x."
        assert type(step.__wrapped__).__name__ == "PjitFunction"
        assert step.lower(x, k=3).compile()(x).tolist() == [0.0, 3.0, 6.0, 9.0]
        assert step.eval_shape(x).shape == (4,)
        for _ in range(40):  # into the lane and on in it
            assert step(x, k=3).tolist() == [0.0, 3.0, 6.0, 9.0]
        assert step._cache_size() == 1
        assert Model(0.5).apply(x).tolist() == [0.0, 0.5, 1.0, 1.5]


def test_a_framework_that_donates_its_state_has_the_device_s_steps(tmp_path: Path) -> None:
    """Keras's `fit` on JAX: its step returns (logs, state), donates the state to the next
    call, and the loop waits only at an epoch's end (its logs read). A step's readiness is
    asked of the scalar loss, not of the state, which the next call deletes before anyone can
    ask: before, a deleted probe counted as ready, the lane opened, and the steps took their
    dispatch's 0.9 ms on the CPU (3.4 ms on a v5e) against a device's 190 ms (50 ms)."""

    def train(state: tuple, big: jax.Array) -> tuple:
        w, b = state
        for _ in range(6):  # a few ms of device work against tens of us of dispatch
            b = jnp.tanh(b @ b)
        return {"loss": jnp.mean(b)}, (w + 1, b * 0 + big)

    step = jax.jit(train, donate_argnums=0)
    state, big = (jnp.ones(8), jnp.full((384, 384), 0.001)), jnp.full((384, 384), 0.001)

    def one_step() -> Any:
        nonlocal state
        logs, state = step(state, big)
        return logs

    device_s = _seconds_waited_on(one_step)
    with tpuscope.profile(store=tmp_path, name="donates", warmup=1) as run:
        step = jax.jit(train, donate_argnums=0)
        for _epoch in range(4):
            for _ in range(22):  # more calls than a lane batch: a clock read inside the epoch
                logs, state = step(state, big)
            float(logs["loss"])  # the epoch's end
    steps = tpuscope.load_run(run.path).steps.iloc[22:]
    p50 = float(np.median(steps["wall_ns"])) / 1e9
    assert 0.5 * device_s < p50 < 2 * device_s, (p50, device_s)


def test_a_sampler_that_donates_its_cache_has_the_device_s_steps(tmp_path: Path) -> None:
    """A cached sampler's step returns (next token, KV cache) and donates the cache to the next
    call (tests/tpu/programs/gpt_decode.py): no scalar among its outputs. Readiness is asked of
    the token, the smallest output, not of the cache the next call deletes: before, the steps
    took their dispatch's time: 0.01-0.1 ms for this step's first 25 calls against its 20 ms
    (the decoder: p50 0.59 ms against its 74 ms a token)."""

    def decode(token: jax.Array, cache: jax.Array) -> tuple:
        h = cache
        for _ in range(6):  # 20 ms of device work against tens of us of dispatch
            h = jnp.tanh(h @ h)
        return jnp.argmax(h[:, :1], axis=0) + token, cache * 0 + h

    step = jax.jit(decode, donate_argnums=1)
    token, cache = jnp.zeros(1, jnp.int32), jnp.full((768, 768), 0.001)

    def one_step() -> Any:
        nonlocal token, cache
        token, cache = step(token, cache)
        return token

    device_s = _seconds_waited_on(one_step)
    with tpuscope.profile(store=tmp_path, name="sampler", warmup=1) as run:
        step = jax.jit(decode, donate_argnums=1)
        for _ in range(40):  # more calls than a lane batch, never waiting
            token, cache = step(token, cache)
        int(token[0])
    steps = tpuscope.load_run(run.path).steps.iloc[5:]
    p50 = float(np.median(steps["wall_ns"])) / 1e9
    assert 0.5 * device_s < p50 < 2 * device_s, (p50, device_s)


def _seconds_waited_on(one_step: Callable[[], Any]) -> float:
    """A step's time bare, each call waited on (after 6 warm calls): what the device takes."""
    for _ in range(6):
        out = one_step()
    jax.block_until_ready(out)
    start = time.perf_counter()
    for _ in range(5):
        jax.block_until_ready(one_step())
    return (time.perf_counter() - start) / 5


def test_a_step_compiled_ahead_of_the_loop_has_its_steps(tmp_path: Path) -> None:
    """A loop that calls `jax.jit(f).lower(...).compile()`'s executable (what rule
    compile_time advises, and what JAX's layout API needs: gpt_decode.py --auto-layout) has one
    step a call, named as the jitted function: before, such a decoder on a v5e was one 20.9 s
    step. The executable keeps its own attributes (input_formats)."""

    def update(w: jax.Array, x: jax.Array) -> jax.Array:
        return w - 0.01 * x.T @ jnp.tanh(x @ w)

    w, x = jnp.ones((256, 256)), jnp.ones((64, 256))
    with tpuscope.profile(store=tmp_path, name="aot", warmup=1) as run:
        step = jax.jit(update).lower(w, x).compile()
        assert step.input_formats[0][0] is not None
        for _ in range(30):
            w = step(w, x)
        traced_step = jax.jit(update).trace(w, x).lower().compile()  # the same through `trace`
        for _ in range(10):
            w = traced_step(w, x)
        float(w[0, 0])
    loaded = tpuscope.load_run(run.path)
    boundaries = list(loaded.steps.sort_values("step")["boundary"].astype(str))
    # the read after the loop compiles its indexing: that is the after-the-loop step (tail.py)
    assert boundaries == ["jit:update"] * 40 + ["end"]
