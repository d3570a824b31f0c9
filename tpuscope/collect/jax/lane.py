"""The step path of a plain loop: a call of the step function is a count, the clock read only
every LANE_BATCH calls.

A TPU runs a short jitted step faster than Python dispatches it, so the host's work per step is
the step time there, and on a v5e's host the Python run between two dispatches costs many
times its warm time (the dispatch leaves the caches cold; docs/overhead.md): there each C call
made between two dispatches (a clock read, an append, a `len`) cost about a microsecond. So in
the lane a call of the step function does only this, inside the function the jit hook returns
(jit_hook.py `_lane_call`): its number counted on `Lane.calls`, the dispatch, and on every
LANE_BATCH-th call (a "marked" call) `perf_counter_ns()` before the dispatch into `Lane.marks`
and, at most every LANE_BATCH calls, a check after it (lane_steps.py `on_lane_batch`) that asks the
output kept at the last check `is_ready()` (by then long finished, unless the device fell
behind the host). No lock, no row, no thread: the marks become rows in the flush thread
(lane_steps.py `lane_rows`, `Lane.take`, `write_calls`), or earlier when anything that is not a
plain call of the step function happens (another jitted call, an eager op, a compile, a step
annotation, the end of the run), so its counts land in the step they happened in.

What that costs in what is known: a marked call's step start is its own clock read, as every
call's was before; the calls between two marks start at times spread evenly between them (each
step of a batch is the batch's mean). Any event, and any value read (a loop that reads its loss
every step), marks the next call, so a loop that does anything between its calls has every step
timed; only a loop of plain calls, the dispatch-bound loop this lane is for, has its steps timed
in batches. Measured on the v5e's ~125 us dispatch-bound step: docs/overhead.md.

A step in the lane runs from one call to the next: its end is the host's, not its outputs'.
That is what the step takes while the device keeps pace with the host, which is when the lane
is open (steps.py enters it once the last steps' outputs were found ready within a few calls,
ready.py `settled_at`) and stays open (the batch's check). A device more than LANE_BATCH steps
behind closes the lane, and ready.py times each step's outputs again.

A device a little slower than the host falls behind slowly, and until it is LANE_BATCH steps
behind the host's marks would time its steps at the host's pace, the backlog landing on the
steps before the program's next wait (a v5e step with a `jax.debug.print`: p50 2.98 ms against
the 4.16 ms the program timed itself). So each mark also asks whether the call PACE_DEPTH
calls before it is done (its output kept then: `Lane.kept`, one `is_ready()` a batch): a mark
the device had not caught up with is stored with its call negated, and a run of such marks is
no anchor when the calls after it, up to the next anchor (a mark the device had caught up
with, or the event that ends the lane's stretch, a value read that waits for the device), took
BACKLOG times the run's pace or more: the device was falling behind, and its backlog is shared
by the run's calls (`_anchors`). A device that is a few calls behind and keeps pace (a
latency: the CPU backend's device thread under load) leaves the host's marks as they are. The
total time of a stretch is the host's clock's either way; what moves is which steps it goes
to. The flush thread writes rows up to the last caught-up mark only, so a device that stays
behind has its calls written at the next event (or LANE_HOLD calls), not at the flush thread's
next turn.
"""

from __future__ import annotations

from array import array
from time import perf_counter_ns
from typing import Any

from tpuscope.collect.jax.rows import STEP_INTS, OpenStep, StepLog

LANE_BATCH = 16  # calls from one clock read (and device check) to the next in a plain loop
PACE_DEPTH = 4  # a mark asks whether the call this many calls before it is done
LANE_HOLD = 1 << 16  # calls waiting that the program's thread makes rows of (no flush since)
FEW_CALLS = 8  # stamps written row by row; more as one numpy block (write_calls)


class Lane:
    """What the jit hook's calls read and write on the lane (jit_hook.py `_lane_call`).

    The program's thread counts `calls` and appends `marks` without a lock; rows are taken
    (`take`) under the collector's lock, by the flush thread up to the last mark, by the
    program's own events up to its last call."""

    __slots__ = (
        "target",
        "calls",
        "mark_at",
        "taken",
        "ref_ns",
        "marks",
        "reads",
        "probe",
        "kept",
        "keep_at",
        "check_at",
        "ns",
        "call_ns",
        "batched",
    )

    def __init__(self) -> None:
        self.target: Any = None  # the step function's JitTarget while the lane is open
        self.calls = 0  # the step function's calls since the lane opened
        self.mark_at = 1  # the next call to read the clock
        self.taken = 0  # calls written as rows: the step of call `taken` is the open one
        self.ref_ns = 0  # perf_counter_ns at which call `taken` was made (its step's start)
        # (perf_counter_ns, call) of each marked call, interleaved: one array for the lane's
        # life (the hook's calls hold its extend; `take` cuts the written ones off); the call
        # negated where the device had not caught up with the mark (no anchor)
        self.marks = array("q")
        # the call in whose step each value read was made while calls waited (steps.py on_sync)
        self.reads = array("q")
        self.probe: Any = None  # an output kept at the last check, asked at the next
        self.kept: Any = None  # an output of the call PACE_DEPTH before the next mark
        self.keep_at = 0  # the call whose output is kept for the next mark (0: none)
        self.check_at = 1  # the first call from which a marked call checks (steps.py)
        self.ns = 0  # the lane's checks' time on the program's path since the last rows
        self.call_ns = call_cost_ns()  # a call's count and share of a mark (not timed per call)
        self.batched = 0  # calls written with a spread stamp, not their own (the run's meta)

    def open(self, target: Any, ref_ns: int) -> None:
        """The next calls of `target` take the lane; the open step started at `ref_ns`."""
        self.calls = self.taken = self.keep_at = 0
        self.mark_at = self.check_at = 1
        self.ref_ns = ref_ns
        self.probe = self.kept = None
        self.target = target

    def close(self) -> None:
        self.target = self.probe = self.kept = None

    def mark_next(self) -> None:
        """After an event the next call is marked (its step starts at its own clock read), with
        no output kept for it: an anchor."""
        self.mark_at, self.keep_at, self.kept = self.calls + 1, 0, None

    def pending(self) -> int:
        """Calls not yet written as rows."""
        return self.calls - self.taken

    def take(self, now_ns: int | None = None) -> array:
        """The perf_counter_ns at which each call after `taken` was made, up to the last marked
        one the device had caught up with (the flush thread: calls after it have no end yet)
        or, with `now_ns` (an event on the program's thread, its time), up to the last call,
        whose step is still open at `now_ns`. An anchor's stamp is its own clock read, the
        others' are spread evenly between the anchors around them (`_anchors`: marks the
        device had not caught up with, before a backlog, are none); the next call is marked
        (`mark_at`) after an event."""
        got = self.marks[:]  # one operation: a mark appended meanwhile stays for next time
        if now_ns is None:
            got = got[: _through_last_anchor(got)]
        end = (now_ns, self.calls + 1) if now_ns is not None and self.calls > 0 else None
        anchors_ns, anchors_call = _anchors(got, (self.ref_ns, self.taken), end)
        marked = len(anchors_call) - 1  # calls whose stamp is their own clock read
        last = anchors_call[-1]
        if now_ns is not None and self.calls > last:
            last = self.calls
            anchors_ns.append(now_ns)
            anchors_call.append(self.calls + 1)  # where the next call would have been
        del self.marks[: len(got)]
        if now_ns is not None:
            self.mark_next()
        if last <= self.taken:
            return array("q")
        stamps = spread(anchors_ns, anchors_call, self.taken + 1, last)
        self.batched += len(stamps) - marked
        self.taken, self.ref_ns = last, stamps[-1]
        return stamps


BACKLOG = 1.5  # a stretch's calls after its last late mark this much slower: a backlog


def _anchors(
    marks: array, start: tuple[int, int], end: tuple[int, int] | None
) -> tuple[list[int], list[int]]:
    """The (ns, call) anchors of interleaved marks after `start`: every mark, but a run of
    marks the device had not caught up with (negated calls) whose calls after them, up to the
    next anchor (a mark, or `end`: an event's time and the call after the last), took BACKLOG
    times the run's own pace or more: the device was falling behind, and the wait that ends
    the run is the backlog its calls share. A run with no anchor after it (the flush thread's
    marks end with the last caught-up one) stays as it is."""
    points = [start] + [(marks[i - 1], marks[i]) for i in range(1, len(marks), 2)]
    if end is not None:
        points.append(end)
    keep = [True] * len(points)
    index = 1
    while index < len(points):
        if points[index][1] > 0:
            index += 1
            continue
        first = index
        while index < len(points) and points[index][1] < 0:
            index += 1
        if index == len(points):
            break  # no anchor after the run
        (p_ns, p_call), (l_ns, l_call) = points[first - 1], points[index - 1]
        e_ns, e_call = points[index]
        own = (l_ns - p_ns) / max(abs(l_call) - abs(p_call), 1)
        after = (e_ns - l_ns) / max(e_call - abs(l_call), 1)
        if after >= BACKLOG * own:
            keep[first:index] = [False] * (index - first)
    if end is not None:
        points, keep = points[:-1], keep[:-1]
    chosen = [point for point, kept in zip(points, keep, strict=True) if kept]
    return [ns for ns, _ in chosen], [abs(call) for _, call in chosen]


def caught_up(probe: Any) -> bool:
    """Whether the device finished the call `probe` (an output of it) came from. A deleted
    probe (donated to a later call: a step that returns its state alone and donates it) says
    nothing of when the device ran its call, so the mark counts as late: `_anchors` spreads a
    run of late marks only before a backlog, and keeps them where the calls kept their pace."""
    try:
        return bool(probe.is_ready())
    except Exception:
        return False


def _through_last_anchor(marks: array) -> int:
    """How many of the interleaved (ns, call) marks end with the last anchor (call > 0)."""
    for index in range(len(marks) - 1, 0, -2):
        if marks[index] > 0:
            return index + 1
    return 0


def spread(anchors_ns: list[int], anchors_call: list[int], first: int, last: int) -> array:
    """Stamps of calls `first`..`last` from anchors (stamp, call), ascending, that enclose them:
    an anchor's call keeps its stamp, the calls between two anchors are spread evenly."""
    if last - first < FEW_CALLS:
        stamps, seg = array("q"), 0
        for call in range(first, last + 1):
            while anchors_call[seg + 1] < call:
                seg += 1
            a, b, a_ns = anchors_call[seg], anchors_call[seg + 1], anchors_ns[seg]
            stamps.append(a_ns + (anchors_ns[seg + 1] - a_ns) * (call - a) // (b - a))
        return stamps
    import numpy as np  # JAX itself needs numpy

    base = anchors_ns[0]
    relative = np.asarray(anchors_ns, dtype=np.int64) - base  # exact in float64 (< 2**53 ns)
    times = np.interp(np.arange(first, last + 1), anchors_call, relative)
    return array("q", (times.astype(np.int64) + base).tobytes())


def call_cost_ns() -> int:
    """What one call's lane bookkeeping costs (its count, and a sixteenth of a mark's clock
    read and append), timed once: timing it per call would take the clock reads the lane
    saves. A warm loop: between two dispatches the same lines run slower, so this is a floor."""
    lane, rounds = Lane.__new__(Lane), 256
    lane.calls, lane.mark_at, marks = 0, 1, array("q")
    start = perf_counter_ns()
    for _ in range(rounds):
        n = lane.calls + 1
        lane.calls = n
        if n >= lane.mark_at:
            lane.mark_at = n + LANE_BATCH
            marks.extend((perf_counter_ns(), n))
    return (perf_counter_ns() - start) // rounds


def write_calls(
    log: StepLog,
    first: OpenStep,
    start_ns: int,
    stamps: array,
    offset_ns: int,
    boundary: str,
    reads: array | None = None,
) -> int:
    """Plain steps closed by calls of the step function at `stamps` + `offset_ns` (the lane's
    perf_counter_ns stamps on the epoch clock) into `log`, the first one `first` (its step
    number and counts), each next one a step of one jitted call; returns the last end. `reads`:
    for each value read among them, the number of stamps before it (k: in the k-th row, k >= 1;
    k = len(stamps) is the step still open, not written here). A few (a loop that reads its
    loss every step writes one at a time) go row by row, more as one numpy block: on the CPU
    VM a row costs 0.6-0.9 us, a block 7.5 us plus 0.05 us a row."""
    count = len(stamps)
    if count <= FEW_CALLS:
        ints, step, last = log.ints, first.step, start_ns
        jit_calls, row_reads = first.jit_calls, first.reads
        for index, stamp in enumerate(stamps):
            end = stamp + offset_ns
            if reads and index:
                row_reads += reads.count(index)
            ints.extend((step, last, end, 0, 0, jit_calls, 0, 0, row_reads))
            step, last, jit_calls, row_reads = step + 1, end, 1, 0
        log.boundaries.extend([boundary] * count)
        return last
    import numpy as np  # JAX itself needs numpy

    ends = np.frombuffer(stamps, dtype=np.int64) + offset_ns
    block = np.zeros((count, len(STEP_INTS)), np.int64)
    block[:, 0] = np.arange(first.step, first.step + count)
    block[0, 1] = start_ns
    block[1:, 1] = ends[:-1]
    block[:, 2] = ends
    block[:, 5] = 1
    block[0, 5], block[0, 8] = first.jit_calls, first.reads
    if reads:
        block[:, 8] += np.bincount(np.frombuffer(reads, dtype=np.int64), minlength=count + 1)[
            :count
        ]
    log.ints.frombytes(block.tobytes())
    log.boundaries.extend([boundary] * count)
    return int(ends[-1])
