"""The device's idle share of the step, from a trace: the traced steps' own (xprof's duty cycle,
else their XLA ops, less compiling), and their busy time against the untraced median step, which
the trace did not slow. The device-idle card (tensorcore_measured.py), rule op_by_op's cost and
the report's cost line read it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tpuscope.analyze.compiling import compiling_ns
from tpuscope.analyze.device_time import DEVICE_WINDOWS
from tpuscope.detect.tables import RunTables
from tpuscope.detect.traced_segment import TracedSegment, run_steps, traced_segment
from tpuscope.schema import Finding


@dataclass
class TracedIdle:
    """The device's idle share of the judged traced steps, and how it was measured."""

    share: float
    total_ns: float  # the traced steps' time
    rows: pd.DataFrame  # device_steps rows of those steps
    basis: str


def traced_idle(tables: RunTables, measured: dict[str, Any]) -> TracedIdle | None:
    """The device idle share of the judged traced steps (xprof's duty cycle, else the trace's
    XLA ops), less the time spent compiling (the device idles then, waiting for no host)."""
    device_steps = tables.extra.get("device_steps", pd.DataFrame())
    judged = tables.judged
    rows = device_steps
    if not device_steps.empty and not judged.empty and (device_steps["window"] == "steps").any():
        rows = device_steps[device_steps["step"].isin(judged["step"])]
    total = float((rows["busy_ns"] + rows["idle_ns"]).sum()) if not rows.empty else 0.0
    if "device_duty_cycle_percent" in measured:
        return TracedIdle(
            1 - measured["device_duty_cycle_percent"] / 100,
            total,
            rows,
            "measured by xprof (duty cycle)",
        )
    if total <= 0:
        return None
    compiling = compiling_ns(
        rows, tables.compiles, tables.extra.get("trace_events", pd.DataFrame()), tables.steps
    )
    basis = "measured from the trace's XLA ops" + (
        f"; {compiling / 1e9:.2f} s of the idle time was compiling, not waiting"
        if compiling
        else ""
    )
    return TracedIdle(
        max(float(rows["idle_ns"].sum()) - compiling, 0.0) / total, total, rows, basis
    )


def step_idle(
    tables: RunTables, idle: TracedIdle
) -> tuple[list[list[int]], int, TracedSegment, tuple[float, float, float, float] | None]:
    """The traced steps (runs, count), the segment of judged steps that ran their graphs, and
    the idle time against that segment's untraced median step (against_step_time)."""
    rows = idle.rows
    steps = rows["step"][rows["step"] >= 0] if not rows.empty else pd.Series(dtype="int64")
    runs, count = Finding.of_steps(steps)  # -1: whole trace
    segment = traced_segment(tables, run_steps(rows))
    return runs, count, segment, against_step_time(idle, count, segment.judged)


def step_busy_share(tables: RunTables, measured: dict[str, Any]) -> float | None:
    """The device's busy share of the step (the report's cost line: whether tpuscope's host
    time is paid): as the idle card states it, its busy time a traced step against the
    untraced median step, where both are known. A trace slows the host: jax-ai-stack's
    miniGPT's traced steps were 12% busy, its steps 48%. Else xprof's duty cycle, else the
    traced steps' XLA ops over their time (compiling counts as idle here: no host work of
    tpuscope's overlaps it). `measured`: xprof's figures (tensorcore_measured.xprof_figures)."""
    idle = traced_idle(tables, measured)
    if idle is None:
        return None
    untraced = step_idle(tables, idle)[3]
    if untraced:
        return round(1 - untraced[0], 4)
    if "device_duty_cycle_percent" in measured:
        return round(1 - idle.share, 4)
    return traced_busy_share(idle.rows)


def traced_busy_share(device_steps: pd.DataFrame) -> float | None:
    """XLA ops' share of the traced steps' time (None without step windows): a pod's, whose
    step rows stay in its parts (detect/pod_tables.py), and the fallback of step_busy_share."""
    if device_steps.empty:
        return None
    rows = device_steps[device_steps["step"] >= 0]
    total = float((rows["busy_ns"] + rows["idle_ns"]).sum())
    return round(float(rows["busy_ns"].sum()) / total, 4) if total > 0 else None


def outside_compiles_ns(judged: pd.DataFrame) -> pd.Series:
    """Each judged step's time outside its compiles."""
    compile_ns = judged["compile_ns"].fillna(0) if "compile_ns" in judged else 0
    return (judged["wall_ns"] - compile_ns).clip(lower=0)


def median_step_s(tables: RunTables) -> float:
    """The median judged step's wall time: the traced idle share's total holds compiles."""
    judged = tables.judged
    return float(judged["wall_ns"].median()) / 1e9 if not judged.empty else 0.0


def against_step_time(
    idle: TracedIdle, count: int, judged: pd.DataFrame
) -> tuple[float, float, float, float] | None:
    """(idle share, idle s a step, step s, busy s a step): the device's busy time a traced step
    against the median of the `judged` steps that ran the traced graphs (detect/traced_segment),
    which the trace did not slow. A trace slows the host (an
    input-bound MLP's traced steps idled 64% on a v5e where it lost 51% bare, 1.78 of 3.52 ms:
    its median step 3.60 ms against 1.82 ms busy). The device's own windows only: the host's
    are clipped to the trace's span, and a clipped step's busy time is part of one. None
    without step times or the device's windows. A step's compile time is not its wait for the
    host (Flax's Gemma sampler recompiled in every request: about 12.6 s of each 13.3 s one)."""
    rows = idle.rows
    if not count or rows.empty or "step" not in rows or judged.empty or "wall_ns" not in judged:
        return None
    windows = rows[(rows["step"] >= 0) & rows["window"].isin(DEVICE_WINDOWS)]
    step_s = float(outside_compiles_ns(judged).median()) / 1e9
    if windows.empty or not np.isfinite(step_s) or step_s <= 0:
        return None
    busy_s = float(windows["busy_ns"].sum()) / len(windows) / 1e9  # a (device, step) a row
    per_step = max(step_s - busy_s, 0.0)
    return per_step / step_s, per_step, step_s, busy_s
