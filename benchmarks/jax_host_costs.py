"""What the host operations tpuscope's JAX step hook may use cost on this machine's runtime
(a TPU VM under gVisor makes thread wake-ups and system calls dearer than a laptop does):

    python3 benchmarks/jax_host_costs.py [--n 20000]

Prints the median ns of: time.time_ns(), perf_counter_ns(), an array's is_ready() once ready
and while its computation runs,
one tiny jitted dispatch (no wait), a SimpleQueue put/get within one thread, and a put that
wakes a waiting thread (round trip through a second thread and back, halved).
"""

from __future__ import annotations

import argparse
import queue
import statistics
import threading
import time
from time import perf_counter_ns

import jax
import jax.numpy as jnp


def median_ns(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = perf_counter_ns()
        fn()
        times.append(perf_counter_ns() - t)
    return statistics.median(times)


def wake_round_trip(n: int) -> float:
    there, back = queue.SimpleQueue(), queue.SimpleQueue()

    def echo() -> None:
        while (item := there.get()) is not None:
            back.put(item)

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    times = []
    for i in range(n):
        t = perf_counter_ns()
        there.put(i)
        back.get()
        times.append(perf_counter_ns() - t)
    there.put(None)
    return statistics.median(times) / 2


def not_ready_ns(n: int) -> float:
    """is_ready() asked of an output whose computation is still running (a chain of 4096^2
    bf16 matmuls, milliseconds long, dispatched again whenever it finished)."""
    a = jnp.ones((4096, 4096), jnp.bfloat16) * 0.001
    chain = jax.jit(lambda m: jnp.tanh(m @ m @ m @ m @ m @ m @ m @ m))
    jax.block_until_ready(chain(a))
    times: list[int] = []
    out = chain(a)
    while len(times) < n:
        t = perf_counter_ns()
        ready = out.is_ready()
        elapsed = perf_counter_ns() - t
        if ready:
            out = chain(a)
        else:
            times.append(elapsed)
    jax.block_until_ready(out)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000)
    args = parser.parse_args()
    x = jnp.ones((256, 256), jnp.bfloat16)
    f = jax.jit(lambda a: a + 1)
    y = jax.block_until_ready(f(x))
    q: queue.SimpleQueue = queue.SimpleQueue()
    rows = {
        "time.time_ns()": median_ns(time.time_ns, args.n),
        "perf_counter_ns()": median_ns(perf_counter_ns, args.n),
        "is_ready() (ready)": median_ns(y.is_ready, args.n),
        "jitted dispatch, no wait": median_ns(lambda: f(x), min(args.n, 5000)),
        "SimpleQueue put+get, one thread": median_ns(lambda: (q.put(1), q.get()), args.n),
        "put waking a thread (half round trip)": wake_round_trip(min(args.n, 5000)),
    }
    jax.block_until_ready(f(x))
    rows["is_ready() (running)"] = not_ready_ns(min(args.n, 2000))
    print(f"device: {jax.devices()[0].device_kind}")
    for name, ns in rows.items():
        print(f"{name:40s} {ns / 1e3:8.2f} us")


if __name__ == "__main__":
    main()
