"""Where a JAX step begins and ends, and what the hooks count into it (the collector's sink).

Steps: a `jax.profiler.StepTraceAnnotation` block is a step when the program uses
one. Otherwise the step function is the user's jitted (or pmapped) function called most
often (chosen at its second call, switched if another overtakes it); in a program that
compiles none of its own functions, the loop is a framework's (Keras `fit`) and the step
function is the library's jitted function called most often at top level (Keras's
`train_step`), on the same rule: the repeated call of a compiled step. A step runs from
one call of it to the next, so work between calls (data loading, `float(loss)`)
belongs to the step it follows. A program with neither gets one step for the whole
run. Work before the first step is counted in step 0; work after the last one
becomes a last step with boundary "end" (where the last call's step first compiles another
function: tail.py). A step ends when its outputs are ready, not
when its asynchronous dispatch returned (collect/jax/ready.py).

This runs on the program's thread at every top-level jitted call, so the common case
(a call of the step function, the last steps plain) takes the lane (lane.py): a count in the
hook's wrapper, a clock read every few calls, the rows written by the flush thread; the step's
rows are built later, in the flush (rows.py). What a
step did (syncs, eager dispatches, other jitted calls) goes to an EventLog as it happens, and
a closed step stays until the flush as integers in an array (StepLog): nothing per step is left for Python's
garbage collector to track (rows.py says why that matters).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from time import perf_counter_ns, time_ns
from typing import Any

from tpuscope.collect.jax.lane import Lane
from tpuscope.collect.jax.lane_steps import LaneSteps
from tpuscope.collect.jax.ready import StepClock
from tpuscope.collect.jax.rows import (
    EAGER,
    HOST_SYNC,
    JIT_CALL,
    EventLog,
    OpenStep,
    StepLog,
)
from tpuscope.collect.jax.sink import JitTarget, Site, caller_site
from tpuscope.collect.jax.tail import TailMark
from tpuscope.collect.profiler_cost import ProfilerCost
from tpuscope.collect.session import Session
from tpuscope.collect.trace_steps import ProfilerWindow
from tpuscope.schema_consts import ANNOTATION_BOUNDARY as ANNOTATION

ANNOTATION_SOURCE = "jax.profiler.StepTraceAnnotation"
OUTNUMBER = 4  # times a training step's calls a function that does not train must make


class StepTracker(LaneSteps):
    """Opens and closes steps from the hooks' events and counts the events into the open step."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.step = 0
        self.mode: str | None = None  # ANNOTATION or "jit" once a step source is seen
        self.step_fn: JitTarget | None = None
        self.step_site: Site | None = None  # a library's step function: the place it is called
        self._shared_fn = False  # the library's step function is called from other places too
        self._open = False
        self._boundary = ""
        self._depth = 0
        self._last_end = 0
        self._calls: Counter = Counter()  # calls of (jitted function, site) but the step's
        self._step_calls = 0  # of step_fn
        self._first_call_ns: dict[tuple[JitTarget, Site | None], int] = {}
        self._acc = OpenStep()  # the open step (or the work before the first one)
        self._tail: TailMark | None = None  # where the open step may leave the loop (tail.py)
        self._lock = threading.RLock()
        self._rows = StepLog()  # steps done, whose rows wait for the flush
        self._events = EventLog()
        self.clock = StepClock(self._rows, self._lock)
        self._profiler: ProfilerWindow | None = None  # while its window is to come or open
        self._window: ProfilerWindow | None = None  # the run's, kept to trace again (_choose_step)
        self.training: set[str] = set()  # functions whose compiled program differentiates
        self._hook_ns = 0  # hook time on the program's path since the last step closed
        self.lane = Lane()  # the jit hook's wrapper reads it on every call (lane.py)
        self._profiler_due = False  # a step opened or closed with a profiler window: _profile
        self.lane_steps = 0  # steps written in the lane (the run's meta says how many)
        self.user_jits = (
            False  # the program jitted a function of its own (library steps then never count)
        )

    # -- step boundaries -------------------------------------------------------------
    def _owns_steps(self) -> bool:
        return self.session.proc_meta.get("backend") in (None, "jax")

    def _open_at(self, t_ns: int, boundary: str) -> None:
        if self._open:
            self._close(t_ns)
        self._open, self._boundary = True, boundary
        self.clock.opened(self._acc, self.step, boundary, t_ns)
        if self._profiler is not None:
            self._profiler_due = True

    def _profile(self) -> None:
        """Start or stop the profiler window where a step just opened or closed: called by the
        hooks after they let go of the lock, so the helper thread notes the last steps' outputs
        ready while the stop waits for them. The open step then starts after the profiler's
        work, whose time is the session's `trace_ns` (a one-off), not the hook's."""
        self._profiler_due = False
        profiler = self._profiler
        if profiler is None:
            return
        began = time_ns()
        acted = profiler.step_closed(self.step - 1)
        acted = profiler.step_opened(self.step) or acted
        with self._lock:
            if acted:
                now = time_ns()
                self._hook_ns -= now - began
                if self._open and self._acc.start_ns < now:
                    self._acc.start_ns = now
            if profiler.done:
                self._profiler_done()

    def _profiler_done(self) -> None:
        """The window is over (or never opens on this device): its start and stop time go to
        the session's cost, and steps take the fast paths again (`_roll`, the lane)."""
        profiler = self._profiler
        if profiler is not None and profiler.done:
            cost = self.session.cost
            cost.trace_ns += profiler.spent_ns
            cost.trace_stop_ns += profiler.stop_ns
            cost.trace_wait_ns += profiler.waited_ns
            self._profiler = None

    def charge(self, ns: int) -> None:
        """Hooks report the time they spent on the program's path; each step's share goes to
        the session's cost (ProfilerCost) when it closes, apart for steps that compiled."""
        self._hook_ns += ns

    def _close(self, t_ns: int, reopen: bool = False) -> None:
        """Close the open step; with reopen, open the next one at the same instant (with the
        same boundary): the call of the step function, which then costs one call here."""
        self._leave_lane()
        if self._tail is not None:  # the loop goes on: the mark's compile was a step's
            self._resume_loop()
        record, self._acc = self._acc, OpenStep()
        spent, self._hook_ns = self._hook_ns, 0
        self._charge(self.session.cost, spent, record)
        self._open, self._last_end = reopen, t_ns
        profiler = self._profiler
        if profiler is not None:
            self.clock.closed(record, t_ns)  # its row is written once its outputs are ready
            self._profiler_due = True
        self.step += 1
        if profiler is None:
            self.clock.closed(
                record, t_ns, self._acc if reopen else None, self.step, self._boundary
            )
        elif reopen:
            self.clock.opened(self._acc, self.step, self._boundary, t_ns)

    def _roll(self, t_ns: int) -> None:
        """A call of the step function, no profiler window: `_close(t_ns, reopen=True)` and the
        call counted, in as few operations as it takes. This runs right after the last step's
        computation left the caches cold, where each line costs several times its warm time
        (docs/overhead.md)."""
        if self._tail is not None:  # the loop goes on: the mark's compile was a step's
            self._resume_loop()
        record = self._acc
        self._acc = following = OpenStep()
        following.jit_calls = 1
        spent, self._hook_ns = self._hook_ns, 0
        cost = self.session.cost
        if record.compiles or self.session.proc_meta.get("backend") not in (None, "jax"):
            self._charge(cost, spent, record)
        else:
            cost.hook_ns += spent
            cost.hook_calls += 1
        self._last_end = t_ns
        self.step = step = self.step + 1
        self.clock.closed(record, t_ns, following, step, self._boundary)
        settled = self.clock.settled_at(t_ns)
        if settled and not record.eager_count and self._owns_steps() and not self._shared_fn:
            # the next calls take the lane (which counts every call of the step function); not
            # after a step that ran an eager op: its next one would leave the lane at once
            self.lane.open(self.step_fn, perf_counter_ns() - (time_ns() - t_ns))

    def _resume_loop(self) -> None:
        """The step function was called again after a marked compile (tail.py): the open
        step's counts and hook time made one again."""
        tail, self._tail = self._tail, None
        assert tail is not None
        self._acc = tail.resume(self._acc, self.session)
        self._hook_ns += tail.hook_ns

    def _charge(self, cost: ProfilerCost, spent: int, record: OpenStep) -> None:
        """A closed step's hook time to the session's cost: apart when it compiled; not a step
        of this process's when torch_xla's collector counts its steps."""
        if self._owns_steps():
            cost.charge(spent, record.compiles > 0)
        else:
            cost.hook_ns += spent

    def on_step_end(self, boundary: str) -> None:
        """autostart.stop(close_open_step=True) ends the current step here."""
        with self._lock:
            if self._open:
                self._close(time.time_ns())
        if self._profiler_due:
            self._profile()

    # -- jitted calls, annotations -------------------------------------------------------
    def on_jit_return(self, target: JitTarget, outputs: Any, pre_ns: int, returned_ns: int) -> None:
        """The step is not done before what its step function (or, in a StepTraceAnnotation
        block, any jitted call) returned is ready. Charges the jitted call's hook time: `pre_ns`
        before the dispatch, and what followed `returned_ns` (one call fewer on the step path)."""
        if self._open and (target is self.step_fn or self.mode == ANNOTATION):
            with self._lock:
                if self.clock.outputs(outputs):
                    self._leave_lane()
        self._hook_ns += pre_ns + perf_counter_ns() - returned_ns

    def on_jit_call(self, target: JitTarget) -> None:
        self._jit_call(target)
        if self._profiler_due:
            self._profile()

    def _jit_call(self, target: JitTarget) -> None:
        with self._lock:
            if self.lane.pending():
                self._lane_flush(perf_counter_ns())  # the open step: the one this call is in
            if target is self.step_fn and self.mode == "jit" and self._at_step_site():
                self._leave_lane()
                self._step_calls += 1
                now = time_ns()
                if self._open and self._profiler is None:
                    self._roll(now)
                    return
                if self._open:
                    self._close(now, reopen=True)
                else:
                    self._open_at(now, self._boundary)
                self._acc.jit_calls += 1
                return
            if self.mode != ANNOTATION and (target.user or not self.user_jits):
                self._choose_step(target, time.time_ns())
            acc = self._acc
            acc.jit_calls += 1
            if target is not self.step_fn or self.mode != "jit":
                acc.events += 1
                self._events.add(self.step, (JIT_CALL, target.name, None, None))

    def _at_step_site(self) -> bool:
        """Whether this call of the step function is the step's: a library's step function
        counts only from the place it was chosen at (optax's `tree_bias_correction` is called
        twice an update, from two lines: each line's calls recur once a step)."""
        if self.step_site is None:
            return True
        if caller_site() == self.step_site:
            return True
        self._shared_fn = True
        return False

    def _choose_step(self, target: JitTarget, now: int) -> None:
        key = (target, None if target.user else caller_site())
        calls = self._calls[key] = self._calls[key] + 1
        self._first_call_ns.setdefault(key, now)
        boundary = f"{target.transform}:{target.name}"
        if self.step_fn is None:
            if calls < 2:
                return
            self._make_step_fn(key)
            self._open_at(self._first_call_ns[key], boundary)
        elif key != (self.step_fn, self.step_site):
            if not self._takes_over(target, calls):
                return
            if self._trains(target) and not self._trains(self.step_fn):
                self._trace_again()
            self._calls = Counter({key: calls})  # rivals count from the new loop's start
            self._make_step_fn(key)
        self._open_at(now, boundary)

    def _trains(self, target: JitTarget | None) -> bool:
        return target is not None and target.name.rsplit(".", 1)[-1] in self.training

    def _takes_over(self, target: JitTarget, calls: int) -> bool:
        """Whether `target`'s calls become the loop's steps in place of the step function's: a
        training step (its program differentiates, gradients.py) over one that does not (an
        evaluation before the training loop) at its second call; one that does not over a
        training step only once called OUTNUMBER times as often (a loop of inference after a
        few gradient calls, not an evaluation after each epoch); else the function called more
        (a loop that outgrew the program's first repeated calls). A rival's calls count from the
        step function's last takeover (from the program's start before there was one):
        jax-ai-stack's miniGPT tutorial generates 256 tokens before training and 256 after, and
        the first 256 are no sign that the generation outnumbers the training loop."""
        trains = self._trains(target)
        if trains != self._trains(self.step_fn):
            return trains or calls > OUTNUMBER * self._step_calls
        return calls > self._step_calls

    def _trace_again(self) -> None:
        """The step function becomes a training step in place of one that was not: an
        automatic profiler window that traced the former one's steps, its time already counted
        (`_profiler_done`), traces the training steps instead (trace_steps.restart)."""
        window, first = self._window, self.step + 1  # the training steps' first
        if window is None or self._profiler is not None:
            return
        if window.restart(first + self.session.warmup + 1):
            self._profiler = window

    def _make_step_fn(self, key: tuple[JitTarget, Site | None]) -> None:
        target, self.step_site = key
        self.step_fn, self.mode, self._step_calls = target, "jit", self._calls.pop(key)
        self._shared_fn = False
        how = "jitted" if target.transform == "jit" else "pmapped"
        self.session.set_meta(jax_step_source=f"calls of {how} {target.name} ({target.defined_at})")

    def on_annotation(
        self, entering: bool, boundary: str = ANNOTATION, source: str = ANNOTATION_SOURCE
    ) -> None:
        """A step block's entry or exit: a StepTraceAnnotation, or a library's batch that
        brackets a step (Keras's `fit` run without jit: keras_batches.py)."""
        with self._lock:
            now = time.time_ns()
            if entering:
                self._depth += 1
                if self._depth > 1:
                    return
                if self.mode != ANNOTATION:
                    if self._open:
                        self._close(now)
                    self.mode = ANNOTATION
                    self.session.set_meta(jax_step_source=source)
                self._open_at(now, boundary)
            else:
                self._depth = max(0, self._depth - 1)
                if self._depth == 0 and self._open and self.mode == ANNOTATION:
                    self._close(now)
        if self._profiler_due:
            self._profile()

    # -- syncs, eager dispatches, metrics ------------------------------------------------
    def sync_event(self, kind: str, location: str | None, library: str | None = None) -> int:
        """The event id of a host sync of `kind` at that place (interned once; the hook keeps
        it per call site, so a sync at a known line never builds or hashes its key again)."""
        with self._lock:
            return self._events.intern((HOST_SYNC, kind, location, library))

    def on_sync(self, event: int, read: bool, start_ns: int) -> None:
        """Once or more per step (a wait on the loss): counted inline, logged as an event.
        `read`: the sync copied a value to the host (its kind is one of VALUE_READS). Charges
        the sync hook's time since `start_ns`. In the lane the calls waiting stay where they are:
        the sync is in the step the last call opened (the `pending`-th from the last rows), whose
        number is known, and a read is noted for that call's row (`Lane.reads`); the next call
        is marked, so the step the sync is in ends at a clock read."""
        with self._lock:
            self.clock.hand_over()  # the host waits now: the helper times the steps still running
            lane = self.lane
            lane.mark_next()
            pending = lane.pending()
            if pending:
                if read:
                    lane.reads.append(lane.calls)
                self._events.add_id(self.step + pending, event)
            else:
                acc = self._acc
                acc.events += 1
                if read:
                    acc.reads += 1
                self._events.add_id(self.step, event)
            self._hook_ns += perf_counter_ns() - start_ns

    def on_eager(
        self, primitive: str, location: str | None, library: str | None, elapsed_ns: int
    ) -> None:
        with self._lock:
            self._leave_lane()
            acc = self._acc
            acc.events += 1
            acc.eager_count += 1
            acc.eager_ns += elapsed_ns
            self._events.add(self.step, (EAGER, primitive, location, library))

    def _on_metric(self, name: str, seconds: float | None) -> None:
        with self._lock:
            self._leave_lane()
            self._acc.metric(name, None if seconds is None else seconds * 1e9)
