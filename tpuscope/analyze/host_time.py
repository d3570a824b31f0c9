"""Where the host's time went in a traced window: the program's own Python functions and its
jitted calls' dispatch, as JAX's profiler recorded them. Pure pandas over trace_events.

JAX's profiler traces Python calls by default (its Python tracer): each is an event named
"$<file name>:<first line> <function>" on the host plane, and each jitted call's dispatch (its
arguments handed to the device, numpy ones transferred) is a "PjitFunction(<name>)" event. The
tracer names files by their base name only, so a function is the program's when its file name
is one of the program's files that tpuscope saw (call sites, compiles): a library module of the
same name would be taken for it. The whole trace counts, not the device's step windows: the host
runs ahead of the device, so a step's Python precedes its device window (kept to the device's
windows, the input-bound MLP's `data_stream` lost half its calls); tpuscope's own window spans
the traced steps only. The tracer slows the Python it traces, so these are shares of
the traced steps' host time, not the untraced step's.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath

import numpy as np
import pandas as pd

from tpuscope.analyze.compiling import overlaps
from tpuscope.analyze.device_time import first_device_line
from tpuscope.parse.xplane_meta import MODULE_LINE

_PYTHON_CALL = re.compile(r"^\$(?P<file>[^:]+):(?P<line>\d+) (?P<function>.+)$")
_DISPATCH = re.compile(r"^PjitFunction\((?P<name>.+)\)$")
# Flax NNX's graph traversal (flax/nnx/graphlib.py): `nnx.jit` flattens the Modules it is given
# into a graph definition and state at each call, and unflattens them after
NNX_GRAPH = "flax.nnx's graph flatten and unflatten (nnx.jit splitting and merging the Modules)"
_NNX_GRAPH_CALL = re.compile(r"^\$graphlib\.py:\d+ _graph_(un)?flatten$")


@dataclass(frozen=True)
class HostPart:
    """One place the host spent its traced time: `label`, the program's `location`
    (path:line, or None for a dispatch), seconds a traced step."""

    label: str
    location: str | None
    s_per_step: float
    eager_s_per_step: float = 0.0  # a function's: the ops outside jit it dispatched
    eager_ops: tuple[str, ...] = ()  # their names, the most dispatched first


def host_parts(
    events: pd.DataFrame,
    program_files: list[str],
    steps: int,
    jitted: frozenset[str] = frozenset(),
    compiling: tuple[np.ndarray, np.ndarray] | None = None,
) -> list[HostPart]:
    """The program's outermost Python functions, its jitted calls' dispatch and Flax NNX's
    graph traversal in the trace, longest first, each its time a step over `steps` traced
    steps. A function's part also holds the dispatches made inside it of ops outside jit:
    every dispatch but those of the program's `jitted` functions (Equinox's RNN example's
    loader spent most of its time indexing device arrays, each index op a dispatch). Time
    spent compiling (`compiling`: analyze/compiling.compile_spans) is left out of every part:
    a call that compiled holds its compile (Flax's Gemma sampler recompiled inside the module
    loop's every request)."""
    if events.empty or "plane" not in events or steps <= 0:
        return []
    host = events[events["plane"].astype(str).str.startswith("/host:")]
    if "host" in host and not host.empty:  # one machine's: a pod's hosts run the same steps
        host = host[host["host"] == host["host"].iloc[0]]
    names = host["name"].astype(str)
    paths = {PurePath(p).name: p for p in program_files}
    calls = names.str.extract(_PYTHON_CALL)
    mine = calls["file"].isin(set(paths)).to_numpy()
    parts: dict[tuple[str, str | None], float] = {}
    dispatches = _less(_outermost(host[names.str.match(_DISPATCH).to_numpy()]), compiling)
    own = _less(_outermost(host[mine]), compiling)
    for outer, label_of in (
        (own, lambda n: _function_label(n, paths)),
        (dispatches, _dispatch_label),
        (
            _less(_outermost(host[names.str.match(_NNX_GRAPH_CALL).to_numpy()]), compiling),
            lambda n: (NNX_GRAPH, None),
        ),
    ):
        for name, dur_ns in zip(
            outer["name"].astype(str), outer["dur_ns"].to_numpy(float), strict=True
        ):
            key = label_of(name)
            parts[key] = parts.get(key, 0.0) + dur_ns / 1e9
    eager = _eager_inside(own, dispatches, jitted, lambda n: _function_label(n, paths))
    found = [
        HostPart(label, where, total / steps, *_per_step(eager.get((label, where)), steps))
        for (label, where), total in parts.items()
    ]
    return sorted(found, key=lambda p: -p.s_per_step)


def _less(events: pd.DataFrame, compiling: tuple[np.ndarray, np.ndarray] | None) -> pd.DataFrame:
    """The events with their time spent compiling taken out of their `dur_ns` (their span kept
    in `end_ns`, for what is inside them)."""
    starts = events["start_ns"].to_numpy(dtype=np.float64)
    ends = starts + events["dur_ns"].to_numpy(dtype=np.float64)
    out = events.assign(end_ns=ends)
    if compiling is None or events.empty:
        return out
    return out.assign(dur_ns=np.clip(ends - starts - overlaps(compiling, starts, ends), 0, None))


def _eager_inside(
    own: pd.DataFrame,
    dispatches: pd.DataFrame,
    jitted: frozenset[str],
    label_of: Callable[[str], tuple[str, str | None]],
) -> dict[tuple[str, str | None], tuple[float, Counter[str]]]:
    """Per function part: the seconds and names of the dispatches inside its calls (on its
    thread) that are not of the program's jitted functions."""
    if own.empty or dispatches.empty:
        return {}
    ops = dispatches["name"].astype(str).str.extract(_DISPATCH)["name"]
    eager = dispatches[~ops.isin(jitted).to_numpy()]
    found: dict[tuple[str, str | None], tuple[float, Counter[str]]] = {}
    for line, calls in own.groupby("line", observed=True, sort=False):
        mine = eager[eager["line"] == line]
        starts = mine["start_ns"].to_numpy()
        order = np.argsort(starts, kind="stable")
        mine, starts = mine.iloc[order], starts[order]
        for name, start, end in zip(
            calls["name"].astype(str),
            calls["start_ns"].to_numpy(),
            calls["end_ns"].to_numpy(),
            strict=True,
        ):
            lo, hi = np.searchsorted(starts, [start, end], side="left")
            inside = mine.iloc[lo:hi]
            if inside.empty:
                continue
            key = label_of(name)
            seconds, names = found.get(key, (0.0, Counter()))
            names.update(inside["name"].astype(str).str.extract(_DISPATCH)["name"])
            found[key] = (seconds + float(inside["dur_ns"].sum()) / 1e9, names)
    return found


def _per_step(
    eager: tuple[float, Counter[str]] | None, steps: int
) -> tuple[float, tuple[str, ...]]:
    if eager is None:
        return 0.0, ()
    seconds, names = eager
    return seconds / steps, tuple(name for name, _ in names.most_common(4))


def _function_label(name: str, paths: dict[str, str]) -> tuple[str, str | None]:
    match = _PYTHON_CALL.match(name)
    assert match is not None  # selected by the same pattern
    path = paths[match["file"]]
    return f"{match['function']} ({PurePath(path).name}:{match['line']})", f"{path}:{match['line']}"


def _dispatch_label(name: str) -> tuple[str, str | None]:
    match = _DISPATCH.match(name)
    assert match is not None
    return (
        f"the dispatch of the jitted {match['name']} (its arguments' transfer and any compile included)",
        None,
    )


def _outermost(rows: pd.DataFrame) -> pd.DataFrame:
    """The events not inside another of the same rows on their line (a call's nested calls,
    a generator's own calls, a dispatch inside a dispatch)."""
    if rows.empty:
        return rows
    keep = []
    ordered = rows.sort_values(["start_ns", "dur_ns"], ascending=[True, False], kind="stable")
    for _, line in ordered.groupby("line", observed=True, sort=False):
        starts = line["start_ns"].to_numpy()
        ends = starts + line["dur_ns"].to_numpy()
        reach = np.maximum.accumulate(ends)
        inside = np.zeros(len(line), bool)
        inside[1:] = starts[1:] < reach[:-1]
        keep.append(line[~inside])
    return pd.concat(keep)


@dataclass(frozen=True)
class HeldIdle:
    """The device's idle time between its module runs in a trace, and the part of it the host
    spent inside a jitted call (JAX's dispatch, the runtime under it), seconds a traced step;
    `gaps`: the idle stretches they came from."""

    idle_s: float
    inside_s: float
    gaps: int


def idle_inside_calls(events: pd.DataFrame, steps: int) -> HeldIdle | None:
    """How much of the device's idle time between module runs the host spent inside a jitted
    call, a step over `steps` traced steps. A call returns once the step is enqueued, so a host
    that is ahead leaves no idle time there; a call the runtime holds (a step with a host
    callback on a TPU returned only once the device ran it, docs/tpu.md) keeps the host from
    dispatching the next step while the device waits. One device's runs (the first plane's) and
    its machine's calls; None without two runs or a call."""
    if events.empty or "line" not in events or "plane" not in events or steps <= 0:
        return None
    modules = first_device_line(events, MODULE_LINE)
    if modules is None:
        return None
    host = events["plane"].astype(str).str.startswith("/host:").to_numpy()
    if "host" in events:  # a pod's trace: the calls of the module plane's machine
        host = host & (events["host"] == modules["host"].iloc[0]).to_numpy()
    calls = events[host & events["name"].astype(str).str.match(_DISPATCH).to_numpy()]
    if len(modules) < 2 or calls.empty:
        return None
    starts = np.sort(modules["start_ns"].to_numpy())
    ends = np.sort((modules["start_ns"] + modules["dur_ns"]).to_numpy())
    gaps = [(ends[i], starts[i + 1]) for i in range(len(starts) - 1) if starts[i + 1] > ends[i]]
    held = _merged(calls["start_ns"].to_numpy(), (calls["start_ns"] + calls["dur_ns"]).to_numpy())
    idle = float(sum(b - a for a, b in gaps))
    return HeldIdle(idle / steps / 1e9, float(_overlap(gaps, held)) / steps / 1e9, len(gaps))


def _merged(starts: np.ndarray, ends: np.ndarray) -> list[tuple[int, int]]:
    """The union of intervals, as disjoint (start, end) pairs in order."""
    out: list[tuple[int, int]] = []
    for s, e in sorted(zip(starts.tolist(), ends.tolist(), strict=True)):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _overlap(first: list[tuple[int, int]], second: list[tuple[int, int]]) -> float:
    """The time two lists of disjoint, ordered intervals share (one sweep over both)."""
    total, i, j = 0.0, 0, 0
    while i < len(first) and j < len(second):
        (a, b), (c, d) = first[i], second[j]
        total += max(0, min(b, d) - max(a, c))
        if b < d:
            i += 1
        else:
            j += 1
    return total
