"""Compile time inside a trace's windows: the device idles while the host compiles, and that
idle time is compile time, not time the device waited for the host's step work (issue 39).
Pure pandas over the run's tables.

A JAX compile is its tracing, its lowering and XLA's backend compile. A trace's own compile
events (`PJRT_Client_Compile`) time the backend compile alone; the run's `compiles` rows time
all three, from the tracing's start. On a v5e, Flax's Gemma sampler recompiled its decoding
`while_loop` for each new prompt length: 10.41 s a compile, of which the trace's event held
8.56 s; the 1.85 s of tracing and lowering had been taken for the host's step work (docs/tpu.md).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

COMPILE_EVENT = "PJRT_Client_Compile"  # a compile in any PJRT backend's host trace


def compiling_ns(
    windows: pd.DataFrame, compiles: pd.DataFrame, events: pd.DataFrame, steps: pd.DataFrame
) -> float:
    """Nanoseconds of compiling inside `windows` (device_steps rows: start_ns, end_ns, step,
    window). Windows that are the run's own steps take their steps' compile time; others the
    union of the run's compiles (tracing's start to the compile's end), or of the trace's
    compile events where that is more (an imported trace has no compile rows)."""
    if windows.empty:
        return 0.0
    own_windows = "window" in windows and (windows["window"] == "steps").all()
    if own_windows and not steps.empty and "compile_ns" in steps:  # the run's step numbers
        traced = steps[steps["step"].isin(windows["step"])]
        return float(traced["compile_ns"].fillna(0).sum())
    window_spans = _spans(windows, "start_ns", "end_ns")
    return max(
        float(overlaps(compile_spans(compiles), *window_spans).sum()),
        float(overlaps(_event_spans(events), *window_spans).sum()),
    )


def compile_spans(compiles: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The run's compiles as disjoint (starts, ends) ns, tracing's start to XLA's end."""
    if compiles.empty or not {"time_ns", "duration_ns"} <= set(compiles):
        return np.array([]), np.array([])
    known = compiles.dropna(subset=["time_ns", "duration_ns"])
    return _spans(known.assign(end_ns=known["time_ns"] + known["duration_ns"]), "time_ns", "end_ns")


def _event_spans(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The trace's own backend compile events as disjoint (starts, ends) ns."""
    if events.empty or "name" not in events:
        return np.array([]), np.array([])
    found = events[events["name"].astype(str) == COMPILE_EVENT].dropna(
        subset=["start_ns", "dur_ns"]
    )
    return _spans(found.assign(end_ns=found["start_ns"] + found["dur_ns"]), "start_ns", "end_ns")


def _spans(rows: pd.DataFrame, start: str, end: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows' [start, end) intervals merged where they overlap (a compile inside another's
    tracing counts once; several devices' windows of one step overlap)."""
    return _union(rows[start].to_numpy(dtype=np.float64), rows[end].to_numpy(dtype=np.float64))


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals merged where they overlap: (starts, ends), sorted."""
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts)
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    new = np.r_[True, starts[1:] > ends[:-1]]
    last = np.r_[np.flatnonzero(new)[1:] - 1, len(starts) - 1]
    return starts[new], ends[last]


def overlaps(
    spans: tuple[np.ndarray, np.ndarray], starts: np.ndarray, ends: np.ndarray
) -> np.ndarray:
    """How much of each interval (starts[i], ends[i]) disjoint sorted `spans` cover."""
    lows, highs = spans
    if len(lows) == 0:
        return np.zeros(len(starts))
    before = np.concatenate([[0.0], np.cumsum(highs - lows)])  # span time before span i

    def upto(x: np.ndarray) -> np.ndarray:  # span time before the instant x
        i = np.searchsorted(lows, x, side="right")
        last = np.clip(i - 1, 0, None)
        partial = np.where(i > 0, np.clip(np.minimum(x, highs[last]) - lows[last], 0, None), 0.0)
        return before[last] * (i > 0) + partial

    return upto(np.asarray(ends, dtype=np.float64)) - upto(np.asarray(starts, dtype=np.float64))
