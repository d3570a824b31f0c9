"""The step path of a plain loop: each call of the step function is a clock read and an append.

A TPU runs a short jitted step faster than Python dispatches it, so the host's work per step is
the step time there: on a v5e a 180 us dispatch-bound step ran 1.23x slower under the general
step path (steps.py, ready.py), which asked an output still in flight whether it was ready (a
plain wrapper doing that cost 14-16 us a step there, docs/overhead.md) and ran its Python right
after each dispatch. In the lane, a call of the step function only stamps the time
(`perf_counter_ns`) into an array; every LANE_BATCH calls the output kept at the last check is
asked `is_ready()` (by then it has long finished, 0.24 us, unless the device fell behind the
host) and this call's is kept; the stamps become rows (in one numpy block when there are more
than a few: steps.py `_lane_flush`, `write_calls` below) once LANE_ROWS of them wait or the
oldest is LANE_SPAN_NS old. Written a row at a time every 8 calls under the lock, the lane measured 1.10x on that step
(a row cost 0.8 us on the CPU VM, a batch of 8 with its lock and check 11.5 us); this form is
measured on the CPU only (docs/overhead.md).

A step in the lane runs from one call to the next: its end is the host's, not its outputs'.
That is what the step takes while the device keeps pace with the host, which is when the lane
is open (steps.py enters it once the last steps' outputs were found ready within a few calls,
ready.py `settled_at`) and stays open (the batch's check). A device more than LANE_BATCH steps
behind closes the lane, and ready.py times each step's outputs again. Anything that is not a
plain call of the step function (another jitted call, a sync, an eager op, a compile, a step
annotation, the end of the run) writes the stamps first (steps.py), so its counts land in the
step they happened in.
"""

from __future__ import annotations

from array import array
from typing import Any

from tpuscope.collect.jax.rows import STEP_INTS, OpenStep, StepLog

LANE_BATCH = 16  # calls between the lane's checks that the device keeps pace
LANE_ROWS = 512  # stamps that become rows at once
LANE_SPAN_NS = 1_000_000_000  # or once the oldest is a second old (the live view's rows)
FEW_CALLS = 8  # stamps written row by row; more as one numpy block (write_calls)


class Lane:
    """What the jit hook's wrapper reads and writes on the lane (jit_hook.py `_caller`)."""

    __slots__ = ("target", "stamps", "probe", "ns")

    def __init__(self) -> None:
        self.target: Any = None  # the step function's JitTarget while the lane is open
        self.stamps = array("q")  # perf_counter_ns of each call since the last rows were written
        self.probe: Any = None  # an output kept at the last check, asked at the next
        self.ns = 0  # the lane's own time on the program's path since the last rows

    def close(self) -> None:
        self.target = self.probe = None


def write_calls(
    log: StepLog, first: OpenStep, start_ns: int, stamps: array, offset_ns: int, boundary: str
) -> int:
    """Plain steps closed by calls of the step function at `stamps` + `offset_ns` (the lane's
    perf_counter_ns stamps on the epoch clock) into `log`, the first one `first` (its step
    number and counts), each next one a step of one jitted call; returns the last end. A few
    (a loop that reads its loss every step writes one at a time) go row by row, more as one
    numpy block: on the CPU VM a row costs 0.6-0.9 us, a block 7.5 us plus 0.05 us a row."""
    count = len(stamps)
    if count <= FEW_CALLS:
        ints, step, last = log.ints, first.step, start_ns
        jit_calls, reads = first.jit_calls, first.reads
        for stamp in stamps:
            end = stamp + offset_ns
            ints.extend((step, last, end, 0, 0, jit_calls, 0, 0, reads))
            step, last, jit_calls, reads = step + 1, end, 1, 0
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
    log.ints.frombytes(block.tobytes())
    log.boundaries.extend([boundary] * count)
    return int(ends[-1])
