"""Where a never-blocking tiny step's time goes under tpuscope's lane, part by part, in one
process (a TPU VM's host or the CPU VM):

    python3 benchmarks/jax_lane_parts.py [--n 12000] [--size 256]

The same jitted step (jax_hook_path.py's) is called in windows of 50 calls, the kinds taking
turns, so drift on the machine falls on all of them alike. Kinds, each adding one part of the
lane (collect/jax/lane.py) to the one before:
- `bare`: the jitted function itself;
- `wrapper`: a plain Python function calling it;
- `stamps`: the wrapper, plus a perf_counter_ns() appended to an array per call;
- `probe16`: plus, every 16 calls, is_ready() of the output kept 16 calls before;
- `probe1`: the wrapper asking is_ready() of the previous call's output every call (the cost
  the lane avoids);
- `proxy`: an object whose `__call__` calls it (the least a proxy adds);
- `kwargs`: the wrapper taking and passing `**kwargs` too (as any hook must);
- `clock`: the wrapper reading perf_counter_ns() per call, kept nowhere;
- `append0`: the wrapper appending a constant to an array per call (no clock);
- `checks`: the wrapper testing the lane's two conditions per call (its target; JAX's trace
  state at top level), the way the jit hook does;
- `count`: the wrapper counting its calls in a closure cell, checking a mask per call;
- `thin`: `checks` and `count` together, no clock read (what a call costs in a lane that
  stamps only every LANE_BATCH calls);
- `closure`: the jit hook's own lane closure (jit_hook.py `_lane_call`) around it, on a lane
  of its own whose check after each marked call does nothing;
- `closure16`: the same, its check asking is_ready() of the output kept at the last mark;
- `hooked`: the function tpuscope's jit hook returned (the lane, once it opened).
`bare` and `wrapper` run once before tpuscope is loaded too (what its global state costs).
Prints per kind the mean step (us) and the mean time inside the call (us), their ratios to
`bare`, and the run's step paths (how many steps the lane took).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from array import array
from collections.abc import Callable
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import jax
import jax.numpy as jnp

import tpuscope

WINDOW = 50


def step(w: Any, x: Any) -> Any:
    loss, g = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(x @ w).astype(jnp.float32) ** 2))(w)
    return w - 0.01 * g.astype(w.dtype), loss


def wrapper_of(fn: Callable) -> Callable:
    def call(*args: Any) -> Any:
        return fn(*args)

    return call


def stamps_of(fn: Callable) -> Callable:
    stamps = array("q")

    def call(*args: Any) -> Any:
        stamps.append(perf_counter_ns())
        if len(stamps) > 4096:
            del stamps[:]
        return fn(*args)

    return call


def probe_of(fn: Callable, every: int) -> Callable:
    stamps = array("q")
    kept: list[Any] = [None]

    def call(*args: Any) -> Any:
        stamps.append(perf_counter_ns())
        out = fn(*args)
        if not len(stamps) % every:
            if kept[0] is not None:
                kept[0].is_ready()
            kept[0] = out[1]
        if len(stamps) > 4096:
            del stamps[:]
        return out

    return call


def kwargs_of(fn: Callable) -> Callable:
    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return call


def clock_of(fn: Callable) -> Callable:
    clock = perf_counter_ns

    def call(*args: Any) -> Any:
        clock()
        return fn(*args)

    return call


def append0_of(fn: Callable) -> Callable:
    stamps = array("q")
    append = stamps.append

    def call(*args: Any) -> Any:
        append(0)
        if len(stamps) > 4096:
            del stamps[:]
        return fn(*args)

    return call


class _Lane:
    __slots__ = ("target",)


def checks_of(fn: Callable) -> Callable:
    from jax._src import core

    lane, state, top = _Lane(), core.trace_state_strong_ref, core.eval_trace
    lane.target = target = object()

    def call(*args: Any) -> Any:
        if lane.target is target and state.value is top:
            return fn(*args)
        raise AssertionError("off the lane")

    return call


def count_of(fn: Callable) -> Callable:
    count, mask, seen = 0, 15, [0]

    def call(*args: Any) -> Any:
        nonlocal count
        count += 1
        out = fn(*args)
        if not count & mask:
            seen[0] += 1
        return out

    return call


def thin_of(fn: Callable) -> Callable:
    from jax._src import core

    lane, state, top = _Lane(), core.trace_state_strong_ref, core.eval_trace
    lane.target = target = object()
    count, mask, seen = 0, 15, [0]

    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal count
        if lane.target is target and state.value is top:
            count += 1
            out = fn(*args, **kwargs)
            if not count & mask:
                seen[0] += 1
            return out
        raise AssertionError("off the lane")

    return call


def closure_of(fn: Callable, probe: bool) -> Callable:
    """The jit hook's lane closure itself, on a Lane of its own (not the session's)."""
    from types import SimpleNamespace

    from jax._src import core

    from tpuscope.collect.jax.jit_hook import JitHook
    from tpuscope.collect.jax.lane import Lane

    lane, target = Lane(), object()
    lane.target = target

    def batch(out: Any) -> None:
        if len(lane.marks) > 4096:
            del lane.marks[:]
        if probe:
            kept, lane.probe = lane.probe, out[-1]
            if kept is not None:
                kept.is_ready()

    hook = SimpleNamespace(
        sink=SimpleNamespace(lane=lane, on_lane_batch=batch),
        trace_state=core.trace_state_strong_ref,
        top_trace=core.eval_trace,
    )
    return JitHook._lane_call(hook, fn, target, None)  # type: ignore[arg-type]


class Proxy:
    """The least a proxy object adds: a class whose `__call__` calls the jitted function."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def windows(kinds: dict[str, Callable], rounds: int, size: int) -> dict[str, tuple[float, float]]:
    """Per kind: median over its windows of the mean step (us) and of the mean time in the call."""
    w = jnp.full((size, size), 0.01, jnp.bfloat16)
    x = jnp.ones((size, size), jnp.bfloat16)
    for fn in kinds.values():
        for _ in range(20):
            w, _ = fn(w, x)
    jax.block_until_ready(w)
    steps: dict[str, list[float]] = {k: [] for k in kinds}
    inside: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(rounds):
        for kind, fn in kinds.items():
            spent = 0
            start = perf_counter_ns()
            for _ in range(WINDOW):
                t = perf_counter_ns()
                w, _ = fn(w, x)
                spent += perf_counter_ns() - t
            steps[kind].append((perf_counter_ns() - start) / WINDOW / 1e3)
            inside[kind].append(spent / WINDOW / 1e3)
    jax.block_until_ready(w)
    return {k: (statistics.median(steps[k]), statistics.median(inside[k])) for k in kinds}


def show(title: str, result: dict[str, tuple[float, float]], base: float) -> None:
    print(title)
    for kind, (step_us, call_us) in result.items():
        print(
            f"  {kind:8s} step {step_us:8.2f} us ({step_us / base:.3f}x)   in the call {call_us:8.2f} us"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=12000, help="calls per kind")
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args()
    rounds = max(2, args.n // WINDOW)
    os.environ.setdefault("TPUSCOPE_TRACE_STEPS", "off")
    print(f"device: {jax.devices()[0].device_kind}  jax {jax.__version__}")
    plain = jax.jit(step)
    before = windows({"bare": plain, "wrapper": wrapper_of(plain)}, rounds, args.size)
    show("before tpuscope is loaded", before, before["bare"][0])
    with tempfile.TemporaryDirectory() as store:
        with tpuscope.profile(store=store, warmup=1, analyze_at_exit=False):
            hooked = jax.jit(step)
            bare = getattr(hooked, "__wrapped__", hooked)
            kinds = {
                "bare": bare,
                "wrapper": wrapper_of(bare),
                "stamps": stamps_of(bare),
                "probe16": probe_of(bare, 16),
                "probe1": probe_of(bare, 1),
                "proxy": Proxy(bare),
                "kwargs": kwargs_of(bare),
                "clock": clock_of(bare),
                "append0": append0_of(bare),
                "checks": checks_of(bare),
                "count": count_of(bare),
                "thin": thin_of(bare),
                "closure": closure_of(bare, probe=False),
                "closure16": closure_of(bare, probe=True),
                "hooked": hooked,
            }
            inside = windows(kinds, rounds, args.size)
        show("under tpuscope.profile", inside, inside["bare"][0])
        for meta in Path(store).rglob("*.json"):
            paths = json.loads(meta.read_text()).get("jax_step_paths")
            if paths:
                print(f"step paths: {paths}")


if __name__ == "__main__":
    main()
