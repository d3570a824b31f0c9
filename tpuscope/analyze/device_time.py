"""Device busy and idle time per step window, from trace events. Pure numpy/pandas.

Which events are device work: on a `/device:*` plane, the "XLA Ops" line (TPU; the
line xprof's duty cycle is computed from), else its "Stream ..." lines (GPU kernels
and copies); on a trace with no device plane (XLA on the CPU, as torch_xla and jax
run here), the host events that carry an `hlo_op` stat, i.e. XLA's CPU thunks (on XLA's
worker threads, or on the Python thread when JAX runs a small program inline).
Busy time is the union of those intervals (overlapping ops count once), clipped to
each window; idle = window length - busy.

Windows, best first: the run's own steps (tpuscope's step boundaries, when the trace
clock is epoch ns), step markers in the trace (`step_num` stats from xp.StepTrace or
jax's StepTraceAnnotation), else the whole traced span as step -1.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

HOST_XLA_DEVICE = "/host:CPU (XLA ops)"
DEVICE_STEP_LINES = ["Steps", "XLA Modules"]  # a device plane's lines that span its step work
DEVICE_WINDOWS = ["device steps", "device module runs"]  # the device's own step windows
STEP_WINDOWS = ["steps", *DEVICE_WINDOWS]  # windows that are the run's steps
_NOT_WORK = {
    "XLA Modules",
    "Steps",
    "XLA TraceMe",
    "TensorFlow Ops",
    "TensorFlow Name Scope",
    "Framework Ops",
    "Framework Name Scope",
    "Source code",
    "Async XLA Ops",
}


def _codes(column: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes and their labels, without a Python string per row (traces have millions)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(), [str(c) for c in column.cat.categories]
    codes, labels = pd.factorize(column.astype(str))
    return codes, [str(x) for x in labels]


def _work_lines(plane: str, lines: set[str]) -> set[str]:
    """The lines of one plane that are device work (see the module docstring)."""
    if not plane.startswith("/device:"):
        return set()
    if "XLA Ops" in lines:
        return {"XLA Ops"}
    streams = {x for x in lines if x.startswith("Stream")}
    return streams or lines - _NOT_WORK


def work_pairs(pairs: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """The (plane, line) pairs of a trace that are device work (module docstring). Decided on
    the distinct pairs, so a caller can find them chunk by chunk; empty when the trace has no
    device work line (then XLA's CPU thunks, host events with an hlo_op, are the work)."""
    by_plane: dict[str, set[str]] = {}
    for plane, line in pairs:
        by_plane.setdefault(plane, set()).add(line)
    return {
        (plane, line) for plane, lines in by_plane.items() for line in _work_lines(plane, lines)
    }


def device_ops(events: pd.DataFrame) -> pd.DataFrame:
    """start_ns, dur_ns and device of the events that are device work (module docstring), from
    a frame of events; the import path gathers the same from the reader's table a slice at a
    time (collect/trace_chunks.work_ops), and the tests hold it to this."""
    plane_codes, planes = _codes(events["plane"])
    line_codes, lines = _codes(events["line"])
    width = len(lines) + 1
    keys, inverse = np.unique(
        plane_codes.astype(np.int64) * width + line_codes, return_inverse=True
    )
    pairs = [(planes[k // width], lines[k % width]) for k in keys.tolist()]
    work = work_pairs(pairs)
    keep_pair = np.array([pair in work for pair in pairs], dtype=bool)
    device = np.array([plane for plane, _ in pairs], dtype=object)
    if not keep_pair.any() and "hlo_op" in events:  # no device plane: XLA's CPU thunks
        host = np.array([not plane.startswith("/device:") for plane, _ in pairs], dtype=bool)
        mask = host[inverse.ravel()] & events["hlo_op"].notna().to_numpy()
        labels = np.full(int(mask.sum()), HOST_XLA_DEVICE, dtype=object)
    else:
        mask = keep_pair[inverse.ravel()]
        labels = device[inverse.ravel()[mask]]
    return pd.DataFrame(
        {
            "start_ns": events["start_ns"].to_numpy()[mask],
            "dur_ns": events["dur_ns"].to_numpy()[mask],
            "device": labels,
        }
    )


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the same time as the input intervals (three
    temporaries of the input's length: traces have millions of ops)."""
    if len(starts) == 0:
        return starts.astype(np.int64), ends.astype(np.int64)
    order = np.argsort(starts, kind="stable")
    s, reach = np.asarray(starts, dtype=np.int64)[order], np.asarray(ends, dtype=np.int64)[order]
    del order
    np.maximum.accumulate(reach, out=reach)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s)) - 1
    return s[first], reach[last]


def covered(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Time covered by disjoint sorted intervals up to each point in `at`."""
    lengths = ends - starts
    before = np.concatenate([[0], np.cumsum(lengths)])
    i = np.searchsorted(starts, at, side="right") - 1
    inside = np.where(i >= 0, np.minimum(at, ends[np.maximum(i, 0)]) - starts[np.maximum(i, 0)], 0)
    return np.where(i >= 0, before[np.maximum(i, 0)] + np.maximum(inside, 0), 0)


def _device_rows(ops: pd.DataFrame) -> list[tuple[Any, np.ndarray | slice]]:
    """(device, its rows) in device order; one device (a CPU trace) takes every row, no copy."""
    groups: dict[Any, Any] = ops.groupby("device", observed=True, sort=True).indices
    if len(groups) == 1:
        return [(next(iter(groups)), slice(None))]
    return sorted(groups.items(), key=lambda item: item[0])


def busy_per_window(ops: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """device_steps rows: per device and window (step, start_ns, end_ns) the busy/idle time."""
    rows = []
    all_starts, all_durs = ops["start_ns"].to_numpy(np.int64), ops["dur_ns"].to_numpy(np.int64)
    for device, at in _device_rows(ops):
        own = windows[windows["device"].isin([device, None])] if "device" in windows else windows
        if own.empty:
            continue
        start = all_starts[at]
        s, e = merge_intervals(start, start + all_durs[at])
        w0, w1 = own["start_ns"].to_numpy(np.int64), own["end_ns"].to_numpy(np.int64)
        busy = covered(s, e, w1) - covered(s, e, w0)
        sorted_start = np.sort(start)
        count = np.searchsorted(sorted_start, w1, side="left") - np.searchsorted(
            sorted_start, w0, side="left"
        )
        rows.append(
            pd.DataFrame(
                {
                    "device": device,
                    "step": own["step"].to_numpy(np.int64),
                    "start_ns": w0,
                    "end_ns": w1,
                    "busy_ns": busy,
                    "idle_ns": (w1 - w0) - busy,
                    "ops": count,
                    "window": own["window"].to_numpy(),
                }
            )
        )
    return (
        pd.concat(rows, ignore_index=True)
        if rows
        else pd.DataFrame(
            columns=["device", "step", "start_ns", "end_ns", "busy_ns", "idle_ns", "ops", "window"]
        )
    )


def step_windows(
    events: pd.DataFrame,
    ops: pd.DataFrame,
    steps: pd.DataFrame | None = None,
    span: tuple[int, int] | None = None,
) -> pd.DataFrame:
    """Windows (step, start_ns, end_ns, window[, device]) for the events, best source first.

    span is the traced time (first event start, last event end): the run's steps that
    overlap it are the windows, clipped to it (the profiler starts a little after its
    first step opens), so busy + idle is traced time only. Where the device's own Steps line
    holds as many steps as the run has in the span, its windows are the steps, with the
    run's numbers: on a TPU v5e the host's windows of a device-bound JAX loop put two of
    five 1.0 ms module runs in one step and none in two others (the device was busy 100% of
    the time, and the host's windows said 76%)."""
    if ops.empty and span is None:
        return pd.DataFrame(columns=["step", "start_ns", "end_ns", "window"])
    if span is None:
        span = (int(ops["start_ns"].min()), int((ops["start_ns"] + ops["dur_ns"]).max()))
    lo, hi = span
    device_steps = _device_step_line(events) if not ops.empty else None
    if steps is not None and not steps.empty:
        overlap = steps[(steps["end_ns"] > lo) & (steps["start_ns"] < hi)]
        own = device_steps
        if own is None or len(own) != len(overlap):
            own = _module_runs(events, len(overlap)) if not ops.empty else None
        if own is not None and len(own) == len(overlap):
            # the device's own steps, named as the run's: a JAX step ends when its outputs are
            # ready as the host saw them, and the device line is when the device ran it
            return own.assign(step=overlap["step"].sort_values().to_numpy("int64"))
        if not overlap.empty:
            return pd.DataFrame(
                {
                    "step": overlap["step"].astype("int64"),
                    "start_ns": overlap["start_ns"].clip(lower=lo).astype("int64"),
                    "end_ns": overlap["end_ns"].clip(upper=hi).astype("int64"),
                    "window": "steps",
                }
            ).reset_index(drop=True)
    if ops.empty:
        return pd.DataFrame(columns=["step", "start_ns", "end_ns", "window"])
    if device_steps is not None:
        return device_steps
    if "step_num" in events and events["step_num"].notna().any():
        marked = events[events["step_num"].notna()]
        ends = marked["start_ns"] + marked["dur_ns"]
        grouped = (
            marked.assign(end_ns=ends)
            .groupby("step_num")
            .agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
        )
        return pd.DataFrame(
            {
                "step": grouped.index.astype("int64"),
                "start_ns": grouped["start_ns"].to_numpy(),
                "end_ns": grouped["end_ns"].to_numpy(),
                "window": "trace steps",
            }
        )
    device = ops["device"]  # grouped column by column: no copy of the ops frame
    spans = pd.DataFrame(
        {
            "start_ns": ops["start_ns"].groupby(device, observed=True).min(),
            "end_ns": (ops["start_ns"] + ops["dur_ns"]).groupby(device, observed=True).max(),
        }
    )
    return spans.reset_index().assign(step=-1, window="whole trace")


def _device_step_line(events: pd.DataFrame) -> pd.DataFrame | None:
    """A TPU's own step windows: the "Steps" line of its device plane, when the trace has one.
    JAX dispatches asynchronously, so a host step marker (StepTraceAnnotation) spans the
    dispatch, not the device's work; the device's line spans the work. The steps are numbered
    as the host markers are when there are as many, else as the device numbered them. Each
    window runs until the next step starts, so the device's waits between steps are idle."""
    first = first_device_line(events, "Steps")
    if first is None:
        return None
    numbers = pd.to_numeric(first["name"], errors="coerce")
    if "step_num" in events:
        marked = sorted(int(n) for n in events["step_num"].dropna().unique())
        if len(marked) == len(first):
            numbers = pd.Series(marked, index=first.index)
    if numbers.isna().any():
        return None
    return _back_to_back(first, numbers.astype("int64").to_numpy(), "device steps")


def first_device_line(events: pd.DataFrame, line: str) -> pd.DataFrame | None:
    """The events of one line of the trace's first device plane, by start; None without."""
    if "line" not in events or "plane" not in events:
        return None
    rows = events[
        (events["line"].astype(str) == line)
        & events["plane"].astype(str).str.startswith("/device:")
    ]
    if rows.empty:
        return None
    return rows[rows["plane"] == rows["plane"].iloc[0]].sort_values("start_ns")


def _back_to_back(runs: pd.DataFrame, numbers: np.ndarray, window: str) -> pd.DataFrame:
    """Windows from a device line's events, sorted: each lasts until the next one starts, so
    the device's wait for the host between them is that step's idle."""
    starts = runs["start_ns"].astype("int64").to_numpy()
    ends = (runs["start_ns"] + runs["dur_ns"]).astype("int64").to_numpy().copy()
    ends[:-1] = np.maximum(ends[:-1], starts[1:])
    return pd.DataFrame({"step": numbers, "start_ns": starts, "end_ns": ends, "window": window})


def _module_runs(events: pd.DataFrame, steps: int) -> pd.DataFrame | None:
    """The traced steps' windows from the runs of the step's executable, where the device has
    no Steps line as long as the run's: the first device's "XLA Modules" line, the module that
    ran once a step (the longest in all, where several did). A JAX loop of plain calls has its
    host windows timed in batches (collect/jax/lane.py), which put a decoder's five 1.2 ms runs,
    back to back on a v5e, two and three to a step and none in two others (busy 78%: a false
    "host-bound" card); one run a step is the device's own step.

    A device-bound loop is still running earlier steps when the trace starts: Flax's Gemma (67
    ms a step on a v5e) ran 7 runs of its step in a trace of 5 host steps. Where the host's
    dispatches of that module in the trace (PJRT's `Execute (jit_train_step)`) number the
    steps, the runs before them are that backlog, and the last `steps` runs are the steps (the
    device runs a program's calls in order; the window stops after its last step's outputs).
    A surplus the dispatches do not account for (the same executable called again inside the
    window) leaves the module out, as before."""
    modules = first_device_line(events, "XLA Modules") if steps >= 2 else None
    if modules is None:
        return None
    names = modules["name"].astype(str)
    counts = names.value_counts()
    dispatched = _dispatches(events)
    once = [
        name
        for name, count in counts.items()
        if count == steps
        or (steps < count < 2 * steps and dispatched.get(str(name).split("(")[0]) == steps)
    ]
    if not once:
        return None
    step_module = max(once, key=lambda n: float(modules["dur_ns"][names == n].sum()))
    runs = modules[names == step_module].sort_values("start_ns").tail(steps)
    return _back_to_back(runs, np.arange(steps, dtype="int64"), "device module runs")


DISPATCH_EVENT = r"Execute \((?P<module>[^()]+)\)$"  # PJRT's "...Executable::Execute (jit_f)"


def _dispatches(events: pd.DataFrame) -> dict[str, int]:
    """How many times the host dispatched each module in the trace, by PJRT's per-executable
    event on a host plane (step_markers keeps them); empty where the trace has none."""
    if "plane" not in events or "name" not in events:
        return {}
    host = events[events["plane"].astype(str).str.startswith("/host:")]
    found = host["name"].astype(str).str.extract(DISPATCH_EVENT)["module"].dropna()
    return {str(k): int(v) for k, v in found.value_counts().items()}


StepLookup = tuple[np.ndarray, np.ndarray, np.ndarray]


def step_lookup(windows: pd.DataFrame) -> StepLookup:
    """(window starts sorted, their ends, their steps): made once, so a trace can be given
    its steps chunk by chunk (steps_at) without re-sorting the windows for every chunk."""
    if windows.empty:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    w = windows.drop_duplicates(["step", "start_ns"]).sort_values("start_ns")
    return (
        w["start_ns"].to_numpy(np.int64),
        w["end_ns"].to_numpy(np.int64),
        w["step"].to_numpy(np.int64),
    )


def steps_at(start_ns: np.ndarray, lookup: StepLookup) -> np.ndarray:
    """The step whose window holds each time (-2 for none; -1 windows are 'whole trace')."""
    w0, w1, steps = lookup
    out = np.full(len(start_ns), -2, dtype=np.int64)
    if not len(w0):
        return out
    i = np.searchsorted(w0, start_ns, side="right") - 1
    ok = (i >= 0) & (start_ns < w1[np.maximum(i, 0)])
    out[ok] = steps[i[ok]]
    return out


def assign_steps(start_ns: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """The step whose window holds each time (-2 for none; -1 windows are 'whole trace')."""
    return steps_at(start_ns, step_lookup(windows))
