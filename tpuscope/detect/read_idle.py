"""What a JAX loop's value reads cost on a traced chip: the device's idle time in the traced
steps that read, at most their busy time.

A read (`float(loss)`, `np.asarray(x)`, `jax.device_get`) in a JAX loop does not cut the
jitted step, and the host's wait in it is the device's work, which would be done anyway. What
it costs is the overlap: the host runs the rest of its iteration and dispatches the next step
only after the value came back, while the device idles. A TPU trace times that idle time (the
device_steps rows of the traced steps that read). Without the read, the host's work would
overlap the device's: a step loses at most its busy time, so min(idle, busy). Where the idle
time is (within EXPLAINS) within the busy time, the reads are all of it, and rule
tensorcore_underuse's idle card, whose cost is the same time, defers to rule host_sync's card
(a v5e MLP reading its loss every step: its traced steps idled 0.003-1.86 ms against 1.67 ms
busy, the tracer slowing the host; the reads cost 0.97 of that idle time).
A trace of several devices: each step's times are the mean over them. Steps that run op by op
are rule op_by_op's, which takes their idle time as its cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from tpuscope.analyze.device_time import STEP_WINDOWS
from tpuscope.detect import common
from tpuscope.detect.eager_counts import runs_op_by_op
from tpuscope.detect.tables import RunTables

EXPLAINS = 0.9  # the reads' cost as a share of the traced steps' idle time: all of it theirs


@dataclass(frozen=True)
class ReadIdle:
    """Per traced judged step that read (s, the mean over the trace's devices): the device
    idle and busy, and what the reads lost."""

    idle_s: float
    busy_s: float
    lost_s: float
    reading_steps: int  # judged steps that read (traced or not)
    explains_idle: bool  # every traced judged step read, and the reads cost EXPLAINS of its idle


def read_idle(tables: RunTables) -> ReadIdle | None:
    """The traced measure of a JAX loop's reads (module doc); None without a trace of a judged
    step that read, or where the steps run op by op (rule op_by_op takes the idle time)."""
    judged = tables.judged
    if tables.backend != "jax" or judged.empty or "transfers_from_device" not in judged:
        return None
    reading = set(judged.loc[judged["transfers_from_device"].fillna(0) > 0, "step"])
    traced = common.traced_judged(tables)
    device_steps = tables.extra.get("device_steps", pd.DataFrame())
    if not traced or device_steps.empty or not reading or runs_op_by_op(tables):
        return None
    rows = device_steps[
        device_steps["window"].isin(STEP_WINDOWS) & device_steps["step"].isin(set(traced) & reading)
    ]
    if rows.empty:
        return None
    per_step = rows.groupby("step")[["busy_ns", "idle_ns"]].mean() / common.NS  # over devices
    idle, lost = per_step["idle_ns"], float(per_step.min(axis=1).mean())
    return ReadIdle(
        idle_s=float(idle.mean()),
        busy_s=float(per_step["busy_ns"].mean()),
        lost_s=lost,
        reading_steps=len(reading),
        explains_idle=set(traced) <= reading and lost >= EXPLAINS * float(idle.mean()),
    )
