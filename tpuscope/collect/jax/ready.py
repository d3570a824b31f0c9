"""When a JAX step is done: its outputs ready, not its asynchronous dispatch returning.

JAX dispatches a jitted call and returns before the device ran it, so a loop that
never blocks (`state = train_step(state, batch)`) reaches its next call long before
the step finished: timing steps from call to call measured dispatch (p50 0.08 ms on a
jitted step that really takes milliseconds). A profiler must not add the
`block_until_ready` the program did not do (that would serialize its pipeline), and
JAX reports no execution events without a profiler trace, so a helper thread waits
instead: each step's outputs (the step function's, or in a StepTraceAnnotation block
those of every jitted call inside it) are handed to a daemon thread that blocks on them
(`batched_block_until_ready`, which releases the GIL) and notes when they were ready.

A step then ends at the later of (its outputs ready, the host closing it: the next
call or the annotation's exit) and starts where the previous step ended (or when it
opened, if later), so steps tile the run without overlapping and `wall_ns` is what a
step takes in a device-bound loop (its compute) as well as in a host-bound one (the
host's time between calls, as before). Its counts (compiles, syncs, dispatches) stay
those of the host interval.

Costs: when the step closes, one output (the last leaf, usually the loss) is asked
`is_ready()` (~1 us). If it already is, the host end is the step's end and the helper's
answer is not needed: after HOST_BOUND_STREAK such steps in a row, outputs are no longer
handed over (a host-bound loop pays no thread wake-ups) until a step is found not ready
at its close, which turns the helper back on (that one step keeps its host end). While
on: one queue put per step on the program's thread; the outputs are referenced until
ready (not longer); an output the next call donated before the helper thread reached it
is skipped (if all were, the host end is used).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

HOST_BOUND_STREAK = 4
_PROBE_DEPTH = 4


@dataclass(eq=False)
class Timing:
    """One step's times while it waits for its outputs."""

    step: int
    boundary: str
    start_ns: int
    acc: Any = None
    host_end_ns: int = 0
    ready_ns: int = 0
    awaiting: int = 0
    closed: bool = False
    probe: Any = None  # one output array, asked is_ready() at the close
    ready_at_close: bool = False


def _probe(outputs: Any) -> Any:
    """The last array leaf of a small walk into the outputs (None if not found quickly)."""
    for _ in range(_PROBE_DEPTH):
        if hasattr(outputs, "is_ready"):
            return outputs
        if isinstance(outputs, dict):
            outputs = next(reversed(outputs.values()), None)
        elif isinstance(outputs, (tuple, list)):
            outputs = outputs[-1] if outputs else None
        else:
            return None
    return None


def _is_ready(array: Any) -> bool:
    try:
        return bool(array.is_ready())
    except Exception:  # deleted (donated) or not an array after all
        return False


class ReadyWatcher:
    """A daemon thread that notes when each handed-over pytree of arrays is ready."""

    def __init__(self, on_ready: Callable[[Timing, int | None], None]) -> None:
        self._on_ready = on_ready
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._pid = 0

    def watch(self, timing: Timing, outputs: Any) -> None:
        if self._pid != os.getpid():  # first use, or a forked child without the thread
            self._pid = os.getpid()
            self._queue = queue.SimpleQueue()
            threading.Thread(target=self._run, args=(self._queue,), name="tpuscope-jax-ready", daemon=True).start()
        self._queue.put((timing, outputs))

    def close(self) -> None:
        if self._pid == os.getpid():
            self._queue.put(None)
            self._pid = 0

    def _run(self, items: queue.SimpleQueue) -> None:
        from jax._src.array import ArrayImpl
        from jax._src.lib import xla_client
        from jax.tree_util import tree_leaves

        while (item := items.get()) is not None:
            timing, outputs = item
            arrays = [a for a in tree_leaves(outputs) if isinstance(a, ArrayImpl) and not a.is_deleted()]
            del item, outputs
            ready = None
            try:
                if arrays:
                    xla_client.batched_block_until_ready(arrays)
                    ready = time.time_ns()
            except Exception:  # donated by the next call meanwhile, or the runtime is gone
                ready = None
            del arrays
            try:  # noqa: SIM105
                self._on_ready(timing, ready)
            except Exception:
                pass


class StepClock:
    """Writes each step's row once its outputs are ready, in step order (see module doc)."""

    def __init__(self, emit: Callable[[Timing, int, int], None], lock: threading.RLock) -> None:
        self._emit = emit
        self._lock = lock
        self._closed: deque[Timing] = deque()
        self._open: Timing | None = None
        self._last_end = 0
        self._waiting = 0  # outputs handed over and not reported yet
        self._streak = 0  # steps in a row whose outputs were ready when they closed
        self.watcher = ReadyWatcher(self._ready)

    def opened(self, step: int, boundary: str, start_ns: int) -> None:
        self._open = Timing(step, boundary, start_ns)

    def outputs(self, outputs: Any) -> None:
        """The open step dispatched `outputs`: it is not done before they are ready."""
        timing = self._open
        if timing is None:
            return
        timing.probe = _probe(outputs)
        if self._streak < HOST_BOUND_STREAK or timing.probe is None:
            timing.awaiting += 1
            self._waiting += 1
            self.watcher.watch(timing, outputs)

    def closed(self, acc: Any, host_end_ns: int) -> None:
        timing, self._open = self._open, None
        if timing is None:
            return
        timing.acc, timing.host_end_ns, timing.closed = acc, host_end_ns, True
        if timing.probe is not None:
            timing.ready_at_close = _is_ready(timing.probe)
            self._streak = self._streak + 1 if timing.ready_at_close else 0
            timing.probe = None
        self._closed.append(timing)
        self._drain()

    def wait_idle(self, timeout_s: float) -> None:
        """Give outputs still running up to `timeout_s` to be ready (call without the lock)."""
        deadline = time.monotonic() + timeout_s
        while self._waiting > 0 and time.monotonic() < deadline:
            time.sleep(0.001)

    def finish(self) -> None:
        """Write every closed step (outputs not ready by now keep their host end)."""
        for timing in self._closed:
            timing.awaiting = 0
        self._drain()
        self.watcher.close()

    def _ready(self, timing: Timing, ready_ns: int | None) -> None:
        with self._lock:
            self._waiting -= 1
            timing.awaiting -= 1
            if not timing.ready_at_close:  # else the helper only reached it later
                timing.ready_ns = max(timing.ready_ns, ready_ns or 0)
            self._drain()

    def _drain(self) -> None:
        while self._closed and (self._closed[0].awaiting <= 0 or self._closed[0].ready_at_close):
            timing = self._closed.popleft()
            start = max(timing.start_ns, self._last_end)
            end = max(timing.host_end_ns, timing.ready_ns, start)
            self._last_end = end
            self._emit(timing, start, end)
