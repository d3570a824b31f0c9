"""What tpuscope's JAX step hook costs on the program's thread, apart from JAX's own dispatch,
measured inside one process on this machine (a TPU VM's host or the CPU VM):

    python3 benchmarks/jax_hook_path.py [--n 20000]

Prints the median ns per call of:
- a plain Python call of a no-op (the machine's yardstick: how fast its Python is);
- the hook's wrapper around a no-op "executable" whose output is ready at once (a host-bound
  step: the lane of collect/jax/steps.py) and one whose output is ready two calls later (a
  dispatch-bound step on a TPU: polled, then the lane), as one hooked call of the
  step function (`on_call` + `on_return`) costs less the no-op call;
- a real tiny jitted step (256x256 bf16, never blocking) bare and hooked, in alternating
  windows of 50 calls: the mean step of each kind and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import types
from time import perf_counter_ns

import jax
import jax.numpy as jnp

import tpuscope


class Lagging:
    """An output that is ready once two later steps were dispatched (the chip's lag of a tiny
    step: most were found ready one to three calls later, docs/overhead.md)."""

    __slots__ = ("created",)
    made = 0

    def __init__(self) -> None:
        Lagging.made += 1
        self.created = Lagging.made

    def is_ready(self) -> bool:
        return Lagging.made - self.created >= 2


class Ready:
    __slots__ = ()

    def is_ready(self) -> bool:
        return True


def per_call_ns(fn, n: int) -> float:
    """Median over 20 batches of the mean ns of n/20 calls (a call is shorter than a clock read)."""
    batch, means = max(1, n // 20), []
    for _ in range(20):
        start = perf_counter_ns()
        for _ in range(batch):
            fn()
        means.append((perf_counter_ns() - start) / batch)
    return statistics.median(means)


def over_ns(hooked, executable, n: int) -> float:
    """ns a hooked call of `executable` takes over the same call unhooked."""
    return per_call_ns(lambda: hooked(executable, 1), n) - per_call_ns(lambda: executable(1), n)


def hook_of(fn):
    """The hooked jitted function's call (jit_hook.py `_lane_call`), made again around
    `executable` in place of JAX's (one per executable): the same code and cells but that one."""
    hooked, made = jax.jit(fn), {}

    def call(executable, *args):
        around = made.get(executable)
        if around is None:
            names = hooked.__code__.co_freevars
            cells = tuple(
                types.CellType(executable) if name == "jitted" else cell
                for name, cell in zip(names, hooked.__closure__, strict=True)
            )
            around = made[executable] = types.FunctionType(
                hooked.__code__, hooked.__globals__, "step", None, cells
            )
        return around(*args)

    return call


def tiny_windows(n: int, hook: bool = True) -> tuple[float, float]:
    """Mean us per tiny jitted step (never blocking), bare and hooked, alternating windows
    (hook=False: a second bare function in place of the hooked one)."""

    def step(w, x):
        loss, g = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(x @ w).astype(jnp.float32) ** 2))(
            w
        )
        return w - 0.01 * g.astype(w.dtype), loss

    jitted = jax.jit(step)
    bare = getattr(jitted, "__wrapped__", jitted)
    hooked = jitted if hook else jax.jit(step)
    w = jnp.full((256, 256), 0.01, jnp.bfloat16)
    x = jnp.ones((256, 256), jnp.bfloat16)
    for fn in (bare, hooked, bare, hooked):
        w, _ = fn(w, x)
    jax.block_until_ready(w)
    times: dict[str, list[float]] = {"bare": [], "hooked": []}
    for k in range(max(2, n // 50)):
        kind, fn = ("bare", bare) if k % 2 == 0 else ("hooked", hooked)
        start = perf_counter_ns()
        for _ in range(50):
            w, _ = fn(w, x)
        times[kind].append((perf_counter_ns() - start) / 50 / 1e3)
    jax.block_until_ready(w)
    return statistics.median(times["bare"]), statistics.median(times["hooked"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000)
    n = parser.parse_args().n
    outside = tiny_windows(n // 2, hook=False)
    with tempfile.TemporaryDirectory() as store, tpuscope.profile(store=store, warmup=1):
        noop = lambda *args: None  # noqa: E731
        plain = per_call_ns(lambda: noop(1), n)
        ready_out = (None, Ready())
        lane = over_ns(hook_of(lambda w: w), lambda *a: ready_out, n)
        polled = over_ns(hook_of(lambda w: w + 0), lambda *a: (None, Lagging()), n)
        bare_us, hooked_us = tiny_windows(n // 2)
    print(f"device: {jax.devices()[0].device_kind}")
    print(f"a plain Python call of a no-op        {plain / 1e3:8.2f} us")
    print(f"hooked step call, output ready        {lane / 1e3:8.2f} us over the call unhooked")
    print(f"hooked step call, ready 2 calls later {polled / 1e3:8.2f} us over the call unhooked")
    print(f"tiny jitted step before tpuscope:     {outside[0]:.2f} us, again {outside[1]:.2f} us")
    print(
        f"tiny jitted step, never blocking      bare {bare_us:.2f} us, hooked {hooked_us:.2f} us: "
        f"ratio {hooked_us / bare_us:.3f}"
    )


if __name__ == "__main__":
    main()
