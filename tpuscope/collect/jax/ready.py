"""When a JAX step is done: its outputs ready, not its asynchronous dispatch returning.

JAX dispatches a jitted call and returns before the device ran it, so a loop that
never blocks (`state = train_step(state, batch)`) reaches its next call long before
the step finished: timing steps from call to call measured dispatch (p50 0.08 ms on a
jitted step that really takes milliseconds). A profiler must not add the
`block_until_ready` the program did not do (that would serialize its pipeline), and
JAX reports no execution events without a profiler trace, so the step's outputs (the
step function's, or in a StepTraceAnnotation block those of the last jitted call inside it)
are asked whether they are ready, at its close and at later closes, and a helper thread waits
on the steps the host ran far ahead of (below).

A step then ends at the later of (its outputs ready, the host closing it: the next
call or the annotation's exit) and starts where the previous step ended (or when it
opened, if later), so steps tile the run without overlapping and `wall_ns` is what a
step takes in a device-bound loop (its compute) as well as in a host-bound one (the
host's time between calls, as before). Its counts (compiles, syncs, dispatches) stay
those of the host interval.

Costs: when the step closes, one output (the last leaf, usually the loss) is asked
`is_ready()` (0.24 us on a TPU v5e). If it already is, the host end is the step's end. If it is
not, the step is polled: every later close asks the oldest polled step's output again (outputs
of one device finish in the order they were dispatched), and a step found ready within
POLL_DEPTH closes ends at its host end: the device keeps pace with the host, so the host's
intervals are the steps' times (a dispatch-bound loop; each step ends where the next call
begins, so a host gap, an eval or the profiler's start, stays in the step it follows). Polling
knows only that a step finished between two closes: ending steps found ready together at that
bound made steps of no length, where the host's ends keep each step's own interval. No thread
is woken and nothing is queued for a polled step: on a TPU v5e (under gVisor) handing each step
to a thread cost 52 us of a 180 us step, 1.41x (a wake-up 15 us, and the contention for the
GIL that followed). A step the host ran more than POLL_DEPTH closes ahead of is device-bound: it goes to a
helper thread, which blocks on it (`batched_block_until_ready`, releasing the GIL) and notes
when it is ready; there the helper's work overlaps the device's instead of delaying the host.
Before the host waits (a sync the hooks see, tpuscope's profiler stop, the end of the run) the
polled steps not ready go to the helper too, so a loop that runs ahead and then blocks gets
its steps' real ends. A step whose host interval took HELPER_STEP_NS or more is not polled
but handed to the helper at once (its exact end costs the host about 1% of it): a loop the
device holds back, in a wait no hook sees, is timed by its outputs, not its calls. A polled
step found ready only after such a wait, behind steps the helper timed, takes the device's
pace from them (`_finalize`).
Which output is asked is probe.py's; a step whose outputs hold no array it can find is handed
to the helper when dispatched.
The helper takes its items from a deque and is woken through its queue only when it went
idle (ReadyWatcher). After HOST_BOUND_STREAK steps in a row ready at their close, or
PACED_STREAK steps found ready with none handed to the helper (`settled_at`), steps.py writes
steps straight from the host's clock (its lane) until one is not.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from tpuscope.collect.jax.probe import tail_probe
from tpuscope.collect.jax.rows import OpenStep, StepLog

HOST_BOUND_STREAK = 4
POLL_DEPTH = 4  # closed steps polled at once; further ahead, the helper thread waits
PACED_STREAK = 8  # steps found ready since the last one handed to the helper: it keeps pace
# a step's host interval from which a step not ready at its close goes to the helper thread:
# 52 us a step on a TPU v5e (a wake-up and the GIL's hand-off, docs/overhead.md) is about 1%
HELPER_STEP_NS = 5_000_000
PACE_STEPS = 5  # device step times kept for a polled step the device started behind


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
        self._polled: deque[OpenStep] = deque()  # of those, the ones asked at each close
        self._open: OpenStep | None = None
        self._last_end = 0
        self._waiting = 0  # outputs handed over and not reported yet
        self._streak = 0  # steps in a row whose outputs were ready when they closed
        self._paced = 0  # steps found ready (at or after their close) since the last hand-off
        self._paces: deque[int] = deque(maxlen=PACE_STEPS)  # the device's last step times
        self.watched = 0  # outputs handed to the helper thread (the run's meta says how many)
        self.unprobed = 0  # of them, outputs in which no array to poll was found
        self.polled = 0  # steps not ready at their close, polled at later closes
        self.poll_depths = [0] * (POLL_DEPTH + 1)  # polled steps by closes until found ready
        self.watcher = ReadyWatcher(self._ready)

    def opened(self, record: OpenStep, step: int, boundary: str, start_ns: int) -> None:
        record.step, record.boundary, record.start_ns = step, boundary, start_ns
        self._open = record

    def outputs(self, outputs: Any) -> bool:
        """The open step dispatched `outputs`: it is not done before they are ready. True when
        they were handed to the helper thread (no output to poll was found)."""
        record = self._open
        if record is None:
            return False
        record.probe = probe = tail_probe(outputs)
        if probe is None:
            self.unprobed += 1
            self._watch(record, outputs)
            return True
        return False

    def _watch(self, record: OpenStep, outputs: Any) -> None:
        self._paced = 0
        record.awaiting += 1
        self._waiting += 1
        self.watched += 1
        self.watcher.watch(record, outputs)

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
            if self._polled:
                self._poll(record.step, host_end_ns)
            probe = record.probe
            if probe is not None:
                try:
                    ready = bool(probe.is_ready())
                except Exception:  # deleted (donated) or not an array after all
                    ready = True
                record.ready_at_close = ready
                if ready:
                    record.probe = None
                    self._streak += 1
                    self._paced += 1
                else:
                    self._streak = 0
                    self._enqueue(record)
            if not self._closed and (record.awaiting <= 0 or record.ready_at_close):
                self._finalize(record)  # the common case: nothing waits before it
            else:
                self._closed.append(record)
                self._drain()
        if following is not None:  # opened(), inlined
            following.step, following.boundary, following.start_ns = step, boundary, host_end_ns
            self._open = following

    def _enqueue(self, record: OpenStep) -> None:
        """A step not ready at its close is polled; beyond POLL_DEPTH polled steps the oldest
        (found not ready just now) goes to the helper thread, which notes when it is ready.
        A step whose host interval took HELPER_STEP_NS or more goes to the helper at once:
        there its exact end costs the host about 1% of the step (after the steps polled before
        it: the helper notes them ready in the order the device runs them). Not a step that
        compiled: its interval is the compile's, not the device's pace."""
        if record.host_end_ns - record.start_ns >= HELPER_STEP_NS and not record.compiles:
            polled = self._polled
            while polled:
                self._unpoll_to_helper(polled.popleft())
            probe, record.probe = record.probe, None
            self._watch(record, probe)
            return
        record.awaiting += 1
        self.polled += 1
        polled = self._polled
        polled.append(record)
        if len(polled) > POLL_DEPTH:
            self._unpoll_to_helper(polled.popleft())

    def _unpoll_to_helper(self, record: OpenStep) -> None:
        """A polled step (found not ready just now) goes to the helper thread, which holds its
        `awaiting` from then on and notes when its probe is ready."""
        probe, record.probe = record.probe, None
        record.awaiting -= 1
        self._watch(record, probe)

    def _poll(self, step: int, now_ns: int) -> None:
        """Polled steps ready by the close of `step` (at now_ns) end at their host end, or
        where the device was behind, as `_finalize` says (module doc)."""
        polled, depths = self._polled, self.poll_depths
        while polled:
            record = polled[0]
            try:
                ready = record.probe.is_ready()
            except Exception:  # donated by a later call, which ran after it
                ready = True
            if not ready:
                return
            polled.popleft()
            record.probe = None
            record.awaiting -= 1
            record.found_ns = now_ns
            self._paced += 1
            depths[min(step - record.step, POLL_DEPTH)] += 1

    def settled_at(self, t_ns: int) -> bool:
        """The next steps' times can be written from the host's clock alone (lane.py): the last
        steps' outputs were ready when they closed, or (a dispatch-bound loop) the last
        PACED_STREAK steps were found ready, at their close or within POLL_DEPTH closes, and
        none was handed to the helper thread. Closes alone are no evidence: after a drain (the
        profiler's stop) a loop that never reads had its next steps polled and not one found
        ready, and the lane timed them at their dispatch. The steps still polled then end at
        their host ends (the device keeps pace), and the last step ended at t_ns, this close."""
        paced = self._paced >= PACED_STREAK and self._waiting == 0
        if paced and self._polled:
            polled = self._polled
            for record in polled:
                record.probe = None
                record.awaiting -= 1
            polled.clear()
            self._drain()
        elif not paced and self._streak < HOST_BOUND_STREAK:
            return False
        return not self._closed and self._last_end == t_ns

    def ended_at(self, end_ns: int) -> None:
        """Steps written without this clock (steps.py's lane) ended at end_ns."""
        self._last_end = end_ns

    def hand_over(self) -> None:
        """The host is about to wait (a sync, the end of the run): polled steps ready by now
        end as at a close, and the helper thread notes when each of the others is ready while
        the host waits (polling would only see them ready after the wait). Call under the lock."""
        polled = self._polled
        if not polled:
            return
        self._poll(polled[-1].step + 1, time.time_ns())
        while polled:
            self._unpoll_to_helper(polled.popleft())
        self._drain()

    def before_wait(self) -> None:
        """`hand_over` for a wait the hooks do not see (tpuscope's own, before the profiler's
        stop: the device's work on the polled steps is theirs, not the profiler's). Takes the
        lock (re-entrant: the run's end stops the profiler holding it)."""
        with self._lock:
            self.hand_over()

    def wait_idle(self, timeout_s: float) -> None:
        """Give outputs still running up to `timeout_s` to be ready (call without the lock)."""
        self.before_wait()
        deadline = time.monotonic() + timeout_s
        while self._waiting > 0 and time.monotonic() < deadline:
            time.sleep(0.001)

    def finish(self) -> None:
        """Emit every closed step (outputs not ready by now keep their host end)."""
        self._polled.clear()
        for record in self._closed:
            record.awaiting = 0
        self._drain()
        self.watcher.close()

    def _ready(self, record: OpenStep, ready_ns: int | None) -> None:
        with self._lock:
            self._waiting -= 1
            record.awaiting -= 1
            record.ready_ns = max(record.ready_ns, ready_ns or 0)
            self._drain()

    def _drain(self) -> None:
        closed = self._closed
        while closed and (closed[0].awaiting <= 0 or closed[0].ready_at_close):
            self._finalize(closed.popleft())

    def _finalize(self, record: OpenStep) -> None:
        """A step starts where the previous one ended (or when it opened, if later) and ends
        at the later of its host end and its outputs being ready.

        A step the device started behind (the host closed it before the previous step ended)
        ran on the device right after that step. If it was timed by the helper thread, its
        time is the device's own for one step (`_paces`). If it was polled, all that is known
        is that it was ready by the close that found it (`found_ns`, after a wait the hooks do
        not see: Keras's `fit` waits for its callback thread at an epoch's end): it ends one
        device step (the median of the last ones timed) after the previous one, not later
        than that close (with none timed yet, no length, as its host end gave before). Its host
        end, long past, would give it no length and the step after the wait the whole
        backlog."""
        last = self._last_end
        start = record.start_ns if record.start_ns > last else last
        host_end, ready = record.host_end_ns, record.ready_ns
        if host_end >= start or not (ready or record.found_ns):
            end = max(host_end, ready, start)
        elif ready:
            end = max(ready, start)
            if end > start:
                self._paces.append(end - start)
        else:
            paces = sorted(self._paces)
            pace = paces[len(paces) // 2] if paces else 0
            end = max(start, min(start + pace, record.found_ns))
        self._last_end = end
        self._log.emit(record, start, end)
