"""What a JAX loop's value reads cost on a traced chip: the device's idle time in the traced
steps that read, at most their busy time.

A read (`float(loss)`, `np.asarray(x)`, `jax.device_get`) in a JAX loop does not cut the
jitted step, and the host's wait in it is the device's work, which would be done anyway. What
it costs is the overlap: the host runs the rest of its iteration and dispatches the next step
only after the value came back, while the device idles. A TPU trace times that idle time (the
device_steps rows of the traced steps that read). Without the read, the host's work would
overlap the device's: a step loses at most its busy time, so min(idle, busy). Where the idle
time is within the busy time, the reads are all of it, and rule tensorcore_underuse's idle
card, whose cost is the same time, defers to rule host_sync's card.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from tpuscope.detect import common
from tpuscope.detect.tables import RunTables


@dataclass(frozen=True)
class ReadIdle:
    """Per traced judged step that read (s): the device idle and busy, and what it lost."""

    idle_s: float
    busy_s: float
    lost_s: float
    reading_steps: int  # judged steps that read (traced or not)
    all_traced_read: bool  # every traced judged step read

    @property
    def explains_idle(self) -> bool:
        """The reads are the whole idle time of the traced steps."""
        return self.all_traced_read and self.idle_s <= self.busy_s


def read_idle(tables: RunTables) -> ReadIdle | None:
    """The traced measure of a JAX loop's reads (module doc); None without a trace of a judged
    step that read."""
    judged = tables.judged
    if tables.backend != "jax" or judged.empty or "transfers_from_device" not in judged:
        return None
    reading = set(judged.loc[judged["transfers_from_device"].fillna(0) > 0, "step"])
    traced = common.traced_judged(tables)
    device_steps = tables.extra.get("device_steps", pd.DataFrame())
    if not traced or device_steps.empty or not reading:
        return None
    rows = device_steps[device_steps["step"].isin(set(traced) & reading)]
    if rows.empty:
        return None
    per_step = rows.groupby("step")[["busy_ns", "idle_ns"]].sum() / common.NS
    return ReadIdle(
        idle_s=float(per_step["idle_ns"].mean()),
        busy_s=float(per_step["busy_ns"].mean()),
        lost_s=float(per_step.min(axis=1).mean()),
        reading_steps=len(reading),
        all_traced_read=set(traced) <= reading,
    )
