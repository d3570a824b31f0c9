"""The step path of a plain loop: each call of the step function is a clock read and an append.

A TPU runs a short jitted step faster than Python dispatches it, so the host's work per step is
the step time there, and on a v5e's host the Python run between two dispatches costs many
times its warm time (the dispatch leaves the caches cold; docs/overhead.md). So in the lane a
call of the step function does only this, inside the function the jit hook returns
(jit_hook.py `_lane_call`): `perf_counter_ns()` appended to `Lane.stamps`, the dispatch, and
every LANE_BATCH calls a check (steps.py `on_lane_batch`) that asks the output kept at the last
check `is_ready()` (by then long finished, 0.24 us, unless the device fell behind the host). No
lock, no row, no thread: the stamps become rows in the flush thread (steps.py `lane_rows`,
`write_calls` below: more than a few as one numpy block), or earlier when anything that is not
a plain call of the step function happens (another jitted call, an eager op, a compile, a step
annotation, the end of the run), so its counts land in the step they happened in. A sync (a
loop that reads its loss every step) leaves the stamps waiting: it is noted against the step the
last stamp opened (`Lane.reads`, steps.py `on_sync`).
Measured on the v5e's 180 us dispatch-bound step: 1.04x whole-process (three pairs), from
1.41x before the lane (docs/overhead.md).

A step in the lane runs from one call to the next: its end is the host's, not its outputs'.
That is what the step takes while the device keeps pace with the host, which is when the lane
is open (steps.py enters it once the last steps' outputs were found ready within a few calls,
ready.py `settled_at`) and stays open (the batch's check). A device more than LANE_BATCH steps
behind closes the lane, and ready.py times each step's outputs again.
"""

from __future__ import annotations

from array import array
from time import perf_counter_ns
from typing import Any

from tpuscope.collect.jax.rows import STEP_INTS, OpenStep, StepLog

LANE_BATCH = 16  # calls between the checks that the device keeps pace (a power of two: a mask)
LANE_HOLD = 1 << 16  # stamps waiting that the program's thread makes rows of (no flush since)
FEW_CALLS = 8  # stamps written row by row; more as one numpy block (write_calls)


class Lane:
    """What the jit hook's calls read and write on the lane (jit_hook.py `_lane_call`)."""

    __slots__ = ("target", "stamps", "reads", "probe", "ns", "stamp_ns")

    def __init__(self) -> None:
        self.target: Any = None  # the step function's JitTarget while the lane is open
        # perf_counter_ns of each call since the last rows: one array for the lane's life (the
        # hook's calls hold its append; steps.py `_lane_flush` cuts the written ones off)
        self.stamps = array("q")
        # a value read while stamps wait: how many waited (the read is in the step the last of
        # them opened); written with them (steps.py `on_sync`, `_lane_flush`)
        self.reads = array("q")
        self.probe: Any = None  # an output kept at the last check, asked at the next
        self.ns = 0  # the lane's checks' time on the program's path since the last rows
        self.stamp_ns = stamp_cost_ns()  # a call's stamp, charged per call (not timed per call)

    def close(self) -> None:
        self.target = self.probe = None


def stamp_cost_ns() -> int:
    """What one stamp (a clock read and an append) costs, timed once: timing each call's stamp
    took a second clock read per call, which on a TPU v5e's host cost as much as the stamp
    itself. A warm loop: between two dispatches the same lines run slower, so this is a floor."""
    scratch, rounds = array("q"), 64
    start = perf_counter_ns()
    for _ in range(rounds):
        scratch.append(perf_counter_ns())
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
