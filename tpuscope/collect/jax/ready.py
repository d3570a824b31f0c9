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
is skipped (if all were, the host end is used). The helper takes its items from a deque and is
woken through its queue only when it went idle (ReadyWatcher).

On a TPU v5e a dispatch-bound 180 us step that never blocks ran 1.41x slower under tpuscope
(docs/tpu.md): its outputs were not ready at the next call, so each step went to the helper,
and waking a thread there costs 15 us. Polling such steps on the program's thread instead was
tried and dropped (a polled step ends only at a later close, so a host gap after it, an eval or
the profiler's own start, was booked to the wrong step); the cost stays open (issue 40).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from tpuscope.collect.jax.rows import OpenStep, StepLog

HOST_BOUND_STREAK = 4
_PROBE_DEPTH = 4


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


class ReadyWatcher:
    """A daemon thread that notes when each handed-over pytree of arrays is ready.

    Items go into a deque (no system call); the thread is woken through its queue only when
    it went idle, so a device-bound loop, whose helper is still waiting on the last step's
    outputs when the next step's arrive, hands over steps without waking anything (on a TPU
    v5e under gVisor a wake-up cost 15 us, benchmarks/jax_host_costs.py)."""

    def __init__(self, on_ready: Callable[[OpenStep, int | None], None]) -> None:
        self._on_ready = on_ready
        self._items: deque[tuple[OpenStep, Any] | None] = deque()
        self._wake: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = [False]  # the running thread's flag, made with its deque
        self._pid = 0

    def watch(self, record: OpenStep, outputs: Any) -> None:
        if self._pid != os.getpid():  # first use, or a forked child without the thread
            self._pid = os.getpid()
            self._items, self._wake, self._idle = deque(), queue.SimpleQueue(), [False]
            threading.Thread(
                target=self._run,
                args=(self._items, self._wake, self._idle),
                name="tpuscope-jax-ready",
                daemon=True,
            ).start()
        self._items.append((record, outputs))
        if self._idle[0]:
            self._wake.put(None)

    def close(self) -> None:
        if self._pid == os.getpid():
            self._items.append(None)
            self._wake.put(None)
            self._pid = 0

    @staticmethod
    def _next(
        items: deque, wake: queue.SimpleQueue, idle: list[bool]
    ) -> tuple[OpenStep, Any] | None:
        """The next item, sleeping on the queue only when none is waiting."""
        while True:
            if items:
                return items.popleft()
            idle[0] = True
            if items:  # appended before the flag was seen: no wake-up was sent
                idle[0] = False
                continue
            wake.get()
            idle[0] = False

    def _run(self, items: deque, wake: queue.SimpleQueue, idle: list[bool]) -> None:
        from jax._src.array import ArrayImpl
        from jax._src.lib import xla_client
        from jax.tree_util import tree_leaves

        while (item := self._next(items, wake, idle)) is not None:
            record, outputs = item
            arrays = [
                a for a in tree_leaves(outputs) if isinstance(a, ArrayImpl) and not a.is_deleted()
            ]
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
                self._on_ready(record, ready)
            except Exception:
                pass


class StepClock:
    """Emits each closed step once its outputs are ready, in step order (see module doc)."""

    def __init__(self, log: StepLog, lock: threading.RLock) -> None:
        self._log = log  # gets each step with its final start and end (keeps no reference)
        self._lock = lock
        self._closed: deque[OpenStep] = deque()  # closed, waiting for their outputs
        self._open: OpenStep | None = None
        self._last_end = 0
        self._waiting = 0  # outputs handed over and not reported yet
        self._streak = 0  # steps in a row whose outputs were ready when they closed
        self.watched = 0  # outputs handed to the helper thread (the run's meta says how many)
        self.watcher = ReadyWatcher(self._ready)

    def opened(self, record: OpenStep, step: int, boundary: str, start_ns: int) -> None:
        record.step, record.boundary, record.start_ns = step, boundary, start_ns
        self._open = record

    def outputs(self, outputs: Any) -> bool:
        """The open step dispatched `outputs`: it is not done before they are ready. True when
        they were handed to the helper thread."""
        record = self._open
        if record is None:
            return False
        probe = (
            outputs[-1] if type(outputs) is tuple and outputs else outputs
        )  # (state, loss): no walk
        if not hasattr(probe, "is_ready"):
            probe = _probe(outputs)
        record.probe = probe
        if self._streak < HOST_BOUND_STREAK or probe is None:
            record.awaiting += 1
            self._waiting += 1
            self.watched += 1
            self.watcher.watch(record, outputs)
            return True
        return False

    def closed(
        self,
        record: OpenStep,
        host_end_ns: int,
        following: OpenStep | None = None,
        step: int = 0,
        boundary: str = "",
    ) -> None:
        """The host closed the open step (`record`) at host_end_ns; with `following`, the
        next step (its number, boundary) opens at the same instant: the call of the step
        function does both in one call, on the program's path."""
        if record is self._open:
            self._open = None
            record.host_end_ns = host_end_ns
            probe = record.probe
            if probe is not None:
                record.probe = None
                try:
                    ready = bool(probe.is_ready())
                except Exception:  # deleted (donated) or not an array after all
                    ready = False
                record.ready_at_close = ready
                self._streak = self._streak + 1 if ready else 0
            if not self._closed and (record.awaiting <= 0 or record.ready_at_close):
                self._finalize(record)  # the common case: nothing waits before it
            else:
                self._closed.append(record)
                self._drain()
        if following is not None:  # opened(), inlined
            following.step, following.boundary, following.start_ns = step, boundary, host_end_ns
            self._open = following

    def settled_at(self, t_ns: int) -> bool:
        """Nothing closed waits for its outputs, the last steps' were ready when they closed
        (outputs are no longer handed over) and the last step ended at t_ns, the host's close:
        the next steps' times can be written from the host's clock alone (steps.py's lane)."""
        return not self._closed and self._streak >= HOST_BOUND_STREAK and self._last_end == t_ns

    def ended_at(self, end_ns: int) -> None:
        """Steps written without this clock (steps.py's lane) ended at end_ns."""
        self._last_end = end_ns

    def wait_idle(self, timeout_s: float) -> None:
        """Give outputs still running up to `timeout_s` to be ready (call without the lock)."""
        deadline = time.monotonic() + timeout_s
        while self._waiting > 0 and time.monotonic() < deadline:
            time.sleep(0.001)

    def finish(self) -> None:
        """Emit every closed step (outputs not ready by now keep their host end)."""
        for record in self._closed:
            record.awaiting = 0
        self._drain()
        self.watcher.close()

    def _ready(self, record: OpenStep, ready_ns: int | None) -> None:
        with self._lock:
            self._waiting -= 1
            record.awaiting -= 1
            if not record.ready_at_close:  # else the helper only reached it later
                record.ready_ns = max(record.ready_ns, ready_ns or 0)
            self._drain()

    def _drain(self) -> None:
        closed = self._closed
        while closed and (closed[0].awaiting <= 0 or closed[0].ready_at_close):
            self._finalize(closed.popleft())

    def _finalize(self, record: OpenStep) -> None:
        """A step starts where the previous one ended (or when it opened, if later) and ends
        at the later of its host end and its outputs being ready."""
        start = record.start_ns if record.start_ns > self._last_end else self._last_end
        end = max(record.host_end_ns, record.ready_ns, start)
        self._last_end = end
        self._log.emit(record, start, end)
