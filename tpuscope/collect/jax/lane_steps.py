"""The lane's side of the step tracker: the calls of a settled step function counted in the jit
hook's wrapper (lane.py) become step rows here, in the flush thread or at the next event on
the program's thread; a mixin of StepTracker (steps.py), which holds the state it reads."""

from __future__ import annotations

import threading
from array import array
from time import perf_counter_ns, time_ns
from typing import Any

from tpuscope.collect.jax.lane import LANE_BATCH, LANE_HOLD, Lane, write_calls
from tpuscope.collect.jax.probe import tail_probe
from tpuscope.collect.jax.ready import StepClock
from tpuscope.collect.jax.rows import OpenStep, StepLog
from tpuscope.collect.session import Session


class LaneSteps:
    """What the lane's methods read and write of the tracker (set in StepTracker.__init__)."""

    session: Session
    step: int
    lane: Lane
    lane_steps: int
    clock: StepClock
    _lock: threading.RLock
    _rows: StepLog
    _acc: OpenStep
    _last_end: int
    _boundary: str
    _step_calls: int

    def on_lane_batch(self, outputs: Any) -> None:
        """After a marked call's dispatch (the jit hook's call; lane.py), at most every
        LANE_BATCH calls: the output kept a batch ago is asked whether it is ready; if not,
        the device fell behind the host and the lane closes (ready.py times the steps'
        outputs again). The calls become rows in the flush thread (`lane_rows`), off the
        program's path; only LANE_HOLD of them waiting (no flush for a long while) makes rows
        here."""
        start = perf_counter_ns()
        lane = self.lane
        if lane.target is None:  # left during the dispatch (a compile)
            return
        lane.check_at = lane.calls + LANE_BATCH
        probe, lane.probe = lane.probe, tail_probe(outputs)
        behind = False
        if probe is not None:
            try:
                behind = not probe.is_ready()
            except Exception:  # donated by a later call: it ran before that call
                behind = False
        if behind or lane.pending() >= LANE_HOLD:
            with self._lock:
                if behind:
                    self._leave_lane()
                else:
                    self._lane_flush(perf_counter_ns())
        lane.ns += perf_counter_ns() - start

    def lane_rows(self) -> None:
        """The flush thread's share of the lane: the calls up to the last marked one become
        rows (under the lock, as the program's own events write them)."""
        with self._lock:
            self._lane_flush()

    def _lane_flush(self, now_ns: int | None = None) -> None:
        """The lane's calls become rows (`Lane.take`: up to the last marked call, or with
        `now_ns`, the time of an event on the program's thread, every call so far): each call
        closed the open step at its stamp and opened the next (what `_roll` does one call at a
        time). The open step's counts (a read, another jitted call, since the last call) are
        the first row's. Call under the lock. After an event the next call is marked: its
        step's start is then its own clock read."""
        lane = self.lane
        before = lane.taken
        stamps = lane.take(now_ns)
        calls = len(stamps)
        if not calls:
            return
        # a read's row: its call's, counted from the open step (row 0); later calls' stay
        done = before + calls
        reads = array("q", (call - before for call in lane.reads if call <= done))
        lane.reads = array("q", (call for call in lane.reads if call > done))
        acc = self._acc
        acc.step = self.step
        offset = time_ns() - perf_counter_ns()  # the stamps are perf_counter_ns
        last = write_calls(self._rows, acc, self._last_end, stamps, offset, self._boundary, reads)
        # the open step: one call, and the reads made since the last stamp
        acc.jit_calls, acc.reads = 1, reads.count(calls)  # (`events`: only tested for zero)
        self.step += calls
        self._last_end = last
        self._step_calls += calls
        self.lane_steps += calls
        cost = self.session.cost
        spent, lane.ns = lane.ns, 0
        cost.hook_ns += spent + calls * lane.call_ns
        cost.hook_calls += calls

    def _leave_lane(self) -> None:
        """Back to the general path: the lane's rows written, the open OpenStep gets its step
        number and its start again, the clock the last end (the open step keeps the probe it
        had when the lane opened: it ends at its host end, as the lane's steps do)."""
        if self.lane.target is not None:
            self._lane_flush(perf_counter_ns())
            self.lane.close()
            acc = self._acc
            acc.step, acc.start_ns = self.step, self._last_end
            self.clock.ended_at(self._last_end)
