"""What a JAX loop's value reads cost on a traced chip: the device's idle time in the traced
steps that read, at most what the reads held the host or the device's busy time.

A read (`float(loss)`, `np.asarray(x)`, `jax.device_get`) in a JAX loop does not cut the
jitted step. It blocks the host until the value is on the host: the device finishing the step
and the value's trip back. What that costs depends on which side bounds the step:
- The device (its busy time over the host's work): the host's wait is device work done anyway;
  the cost is the overlap lost, the device idling while the host runs the rest of its
  iteration and dispatches the next step. A TPU trace times that idle time (the device_steps
  rows of the traced steps that read), at most the step's busy time.
- The host: the wait itself adds to every step. JAX marks each read in the trace (its
  `np.asarray(jax.Array)` annotation, which every read of a value goes through), so the wait
  is measured too: on a v5e an NNX VAE (flax's nnx_toy_examples/05_vae.py) reading its scalar
  loss every step waited 0.50-0.61 ms in each read for 26 us of device work, and its step took
  0.50-0.67 ms more (two rounds) than its twin that reads the losses once an epoch.
Either way a read loses at most the device's idle time: the traced steps that read lose
min(idle, max(busy, wait)), of the means over them. Means, not step by step: the first traced
step's window holds no idle time before it (a v5e MLP reading its loss every step: 3.5 us
idle in its first traced step, 1.49-1.86 ms in the others against 1.67 ms busy; step by step
the reads cost 1.30 ms, of the means 1.34, against 1.40 ms lost bare). Where the reads'
cost is (within EXPLAINS) all of the idle time, rule tensorcore_underuse's idle card, whose
cost is the same time, defers to rule host_sync's card. A trace of several devices: each
step's times are the mean over them. Steps that run op by op are rule op_by_op's, which takes
their idle time as its cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from tpuscope.analyze.device_time import STEP_WINDOWS
from tpuscope.detect import common
from tpuscope.detect.eager_counts import dispatching_holds_idle
from tpuscope.detect.tables import RunTables

EXPLAINS = 0.9  # the reads' cost as a share of the traced steps' idle time: all of it theirs
READ_EVENT = "np.asarray(jax.Array)"  # JAX's trace annotation of ArrayImpl._value: every read
DISPATCH = "PjitFunction("  # a jitted call's dispatch on the host: the program's thread


@dataclass(frozen=True)
class ReadIdle:
    """Per traced judged step that read (s, the mean over the trace's devices): the device
    idle and busy, and what the reads lost."""

    idle_s: float
    busy_s: float
    wait_s: float  # the host's time in the reads (0 where the trace does not mark them)
    lost_s: float
    reading_steps: int  # judged steps that read (traced or not)
    every_traced_step: bool  # every traced judged step read: host and device take turns
    explains_idle: bool  # every traced step read, and the reads cost EXPLAINS of its idle


def read_idle(tables: RunTables) -> ReadIdle | None:
    """The traced measure of a JAX loop's reads (module doc); None without a trace of a judged
    step that read, or where the steps' dispatching of ops outside jit is what the device waited
    for (eager_counts.dispatching_holds_idle: rule op_by_op's card)."""
    judged = tables.judged
    if tables.backend != "jax" or judged.empty or "transfers_from_device" not in judged:
        return None
    reading = set(judged.loc[judged["transfers_from_device"].fillna(0) > 0, "step"])
    traced = common.traced_judged(tables)
    device_steps = tables.extra.get("device_steps", pd.DataFrame())
    if not traced or device_steps.empty or not reading:
        return None
    rows = device_steps[
        device_steps["window"].isin(STEP_WINDOWS) & device_steps["step"].isin(set(traced) & reading)
    ]
    if rows.empty:
        return None
    per_step = rows.groupby("step")[["busy_ns", "idle_ns"]].mean() / common.NS  # over devices
    idle, busy = float(per_step["idle_ns"].mean()), float(per_step["busy_ns"].mean())
    if dispatching_holds_idle(tables, idle):
        return None
    events = tables.extra.get("trace_events", pd.DataFrame())
    wait = _read_wait_s(events, set(traced) & reading)
    lost = min(idle, max(busy, wait))
    every = set(traced) <= reading
    return ReadIdle(
        idle_s=idle,
        busy_s=busy,
        wait_s=wait,
        lost_s=lost,
        reading_steps=len(reading),
        every_traced_step=every,
        explains_idle=every and lost >= EXPLAINS * idle,
    )


def _read_wait_s(events: pd.DataFrame, steps: set[int]) -> float:
    """The host's time in value reads a traced step that read (s): JAX's READ_EVENT annotations
    on the program's thread (the one that dispatched the most jitted calls: a host callback's
    reads run on the runtime's threads), summed by process and step, the mean over the steps
    and then over the processes. 0 where the trace marks no read."""
    needed = {"name", "step", "dur_ns", "line"}
    if events.empty or not needed <= set(events.columns):
        return 0.0
    keys = [k for k in ("host", "pid") if k in events.columns]
    names = events["name"]  # categorical in a run's table: compared by its categories
    dispatches = events[names.str.startswith(DISPATCH).fillna(False).astype(bool)]
    if dispatches.empty:
        return 0.0
    counts = dispatches.groupby([*keys, "line"], observed=True).size().reset_index(name="n")
    program = counts.sort_values("n").drop_duplicates(keys, keep="last")[[*keys, "line"]]
    reads = events[(names == READ_EVENT) & events["step"].isin(steps)]
    reads = reads.astype({"line": str}).merge(program.astype({"line": str}), on=[*keys, "line"])
    if reads.empty:
        return 0.0
    per_step = reads.groupby([*keys, "step"], observed=True)["dur_ns"].sum()
    per_process = per_step.groupby(level=keys).mean() if keys else per_step.mean()
    return float(pd.Series(per_process).mean()) / common.NS
