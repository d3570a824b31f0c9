"""Hosts judged against each other: per-host step times, the pod's median, stragglers.

A pod run holds the rows of many hosts (the `host` column every table carries). A host's
time of a step is the slowest of its processes' (a host is as late as its last rank);
the pod's time of a step is the median over hosts. The noise between steps is the
median over hosts of each host's robust spread of its own step times (1.4826 x MAD);
a host is a straggler when its median excess over the pod's step times is above
NOISE_FACTOR x that noise, above MIN_SHARE of the pod's median step and above 1 ms, and
its slow steps are those where its excess is. Pure: DataFrames in, plain data out.
"""

from __future__ import annotations

import math
import re
import weakref
from typing import Any

import numpy as np
import pandas as pd

NOISE_FACTOR = 2.0
MIN_SHARE = 0.05
MIN_EXCESS_NS = (
    1_000_000  # 1 ms: below it, the OS's scheduling of a host's threads, not the program
)
MAD_TO_SIGMA = 1.4826
MAX_COLUMNS = 200  # steps binned to at most this many columns in the summary's host_steps
NS_PER_MS = 1e6
# What a slow step's time went to, from the steps table's own columns.
COMPONENTS = {
    "compile": ("compile_ns", "its own compiles"),
    "execute": ("execute_ns", "device execution"),
    "host": (
        "host_ns",
        "time outside compiles and execution (input pipeline, Python work, sleeps)",
    ),
}
COUNTS = {
    "compiles": "compiles",
    "fallback_ops": "CPU fallbacks",
    "transfers_from_device": "host syncs",
}


def natural_key(host: Any) -> list[Any]:
    """host-2 before host-10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(host))]


def hosts_of(*frames: pd.DataFrame) -> list[str]:
    """Every host that wrote a row to any of these tables, in natural order."""
    found: set[str] = set()
    for frame in frames:
        if not frame.empty and "host" in frame.columns:
            found.update(str(h) for h in frame["host"].dropna().unique())
    return sorted(found, key=natural_key)


_BLOCKS: dict[int, tuple[weakref.ref[pd.DataFrame], int, Any]] = {}


def host_blocks(frame: pd.DataFrame) -> tuple[np.ndarray, list[str]] | None:
    """(first row of each host's block, its host) when every host's rows are one block of
    rows and every host is a string (a run's parts are read host after host), else None.
    One pass of comparisons (grouping 6.4M rows of a pod by their Python strings cost ~1 s,
    comparing them ~0.7 s), remembered while the frame lives: the pod view asks again."""
    if frame.empty or "host" not in frame.columns:
        return None
    known = _BLOCKS.get(id(frame))
    if known is not None and known[0]() is frame and known[1] == len(frame):
        return known[2]
    found = _host_blocks(frame)
    for key in [k for k, (ref, _, _) in _BLOCKS.items() if ref() is None]:
        del _BLOCKS[key]
    _BLOCKS[id(frame)] = (weakref.ref(frame), len(frame), found)
    return found


def _host_blocks(frame: pd.DataFrame) -> tuple[np.ndarray, list[str]] | None:
    column = frame["host"]
    if isinstance(column.dtype, pd.CategoricalDtype):  # compare its codes, not its strings
        codes = column.cat.codes.to_numpy()
        if (codes < 0).any():
            return None
        starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
        labels = list(column.cat.categories[codes[starts]])
    else:
        host = column.to_numpy()
        if pd.isna(host).any():
            return None
        starts = np.flatnonzero(np.concatenate(([True], host[1:] != host[:-1])))
        labels = list(host[starts])
    if len(set(labels)) != len(labels) or not all(isinstance(h, str) for h in labels):
        return None
    return starts, labels


def _one_row_per_step(judged: pd.DataFrame) -> pd.Categorical | None:
    """The judged rows' host as a categorical, when they already are one row per (host, step)
    (one process per host, its steps in order: the groupby would give them back as they
    are), else None. Its categories are astype("category")'s (the hosts, sorted)."""
    if isinstance(judged["host"].dtype, pd.CategoricalDtype):
        return None
    blocks = host_blocks(judged)
    if blocks is None or judged["step"].isna().any():
        return None
    starts, labels = blocks
    step = judged["step"].to_numpy()
    same = np.ones(len(step) - 1, dtype=bool)
    same[starts[1:] - 1] = False  # the pairs that cross from one host's block to the next
    if not (step[1:][same] > step[:-1][same]).all():
        return None
    categories = sorted(labels)
    code = {h: i for i, h in enumerate(categories)}
    lengths = np.diff(np.append(starts, len(step)))
    codes = np.repeat(
        np.array([code[h] for h in labels], dtype=np.int8 if len(labels) < 127 else np.int32),
        lengths,
    )
    return pd.Categorical.from_codes(codes, categories=categories)  # type: ignore[call-overload]  # pandas-stubs take no int8 codes array


def per_host_steps(judged: pd.DataFrame) -> pd.DataFrame:
    """One row per (host, step): the slowest process's wall time and the host's counts."""
    if judged.empty:
        return pd.DataFrame(
            columns=["host", "step", "wall_ns", "host_ns", *[c for c, _ in COMPONENTS.values()]]
        )
    numeric = [c for c in ("compile_ns", "execute_ns", *COUNTS) if c in judged.columns]
    single = _one_row_per_step(judged)
    if single is not None:
        columns = {
            "host": single,
            "step": judged["step"].to_numpy(),
            "wall_ns": judged["wall_ns"].to_numpy(),
            **{c: judged[c].fillna(0).to_numpy() for c in numeric},
        }
        grouped = pd.DataFrame(columns, copy=False)  # the judged rows' arrays, not a copy of them
        return _with_host_ns(grouped)
    host = judged["host"]
    if not isinstance(host.dtype, pd.CategoricalDtype):
        host = host.astype(str).astype("category")  # fast to group by
    frame = judged[["step", "wall_ns", *numeric]].assign(
        host=host.cat.remove_unused_categories(), **{c: judged[c].fillna(0) for c in numeric}
    )
    # the host column stays categorical: the pod view and the summary group by it again
    # (6.4M rows of a 64 x 100k pod: each grouping by Python strings cost ~1 s)
    grouped = frame.groupby(["host", "step"], sort=False, observed=True).agg(
        wall_ns=("wall_ns", "max"), **{c: (c, "sum") for c in numeric}
    )
    return _with_host_ns(grouped.reset_index())


def _with_host_ns(grouped: pd.DataFrame) -> pd.DataFrame:
    grouped["host_ns"] = (
        grouped["wall_ns"] - grouped.get("compile_ns", 0) - grouped.get("execute_ns", 0)
    ).clip(lower=0)
    return grouped


def step_matrix(judged: pd.DataFrame, rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """host x step wall time in ms (rows in natural host order): the Hosts page's heatmap."""
    rows = per_host_steps(judged) if rows is None else rows
    if rows.empty:
        return pd.DataFrame()
    matrix = rows.pivot(index="host", columns="step", values="wall_ns") / NS_PER_MS
    return matrix.loc[sorted(matrix.index, key=natural_key)]


def binned_step_matrix(
    judged: pd.DataFrame, max_columns: int = MAX_COLUMNS, rows: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, int]:
    """step_matrix with the steps binned to at most max_columns columns, and the bin width (a bin
    shows its median: one compile step does not paint a bin of 500 steps)."""
    matrix = step_matrix(judged, rows)
    if matrix.empty:
        return matrix, 1
    lo, hi = int(matrix.columns.min()), int(matrix.columns.max())
    width = max(1, math.ceil((hi - lo + 1) / max_columns))
    if width > 1:
        bins = lo + (matrix.columns.to_numpy() - lo) // width * width
        matrix = matrix.T.groupby(bins).median().T
    return matrix, width


def step_matrix_record(
    judged: pd.DataFrame, max_columns: int = MAX_COLUMNS, rows: pd.DataFrame | None = None
) -> dict[str, Any] | None:
    """The summary's `host_steps`: the binned host x step matrix as plain JSON (null: no step), so
    the Hosts page draws a pod of millions of steps without reading them."""
    matrix, width = binned_step_matrix(judged, max_columns, rows)
    if matrix.empty:
        return None
    values = matrix.to_numpy()
    return {
        "hosts": [str(h) for h in matrix.index],
        "steps": [int(c) for c in matrix.columns],
        "width": width,
        "ms": [[None if v != v else round(float(v), 6) for v in row] for row in values],
    }


class PodMedians:
    """Per row of a pod's per-(host, step) rows, the median over hosts of its step's values:
    groupby("step").transform("median"). When every host's rows are one block of the same
    steps in the same order (every host of a pod runs every step) and no value is missing,
    the medians are kept per step, from a host x step matrix (the same float64 medians),
    and read per row only where asked: no grouping of 6.4M rows by step (1.3 s of a 64 x
    100k pod's analysis), no column of 6.4M medians for each of the step's parts."""

    def __init__(self, rows: pd.DataFrame, columns: list[str]) -> None:
        self._per_step: dict[str, np.ndarray] | None = None
        self._hosts = 0
        blocks = host_blocks(rows)
        if blocks is not None and len(rows) % len(blocks[0]) == 0:
            hosts, width = len(blocks[0]), len(rows) // len(blocks[0])
            step = rows["step"].to_numpy()
            if (np.diff(blocks[0]) == width).all() and (
                step.reshape(hosts, width) == step[:width]
            ).all():
                medians = {
                    c: _step_medians(rows[c].to_numpy(dtype=np.float64), hosts) for c in columns
                }
                if not any(m is None for m in medians.values()):
                    self._per_step, self._hosts = medians, hosts  # type: ignore[assignment]
                    return
        self._frame = rows.groupby("step", sort=False)[columns].transform("median")  # one pass

    def column(self, name: str) -> np.ndarray:
        """Every row's median of `name`, in row order."""
        if self._per_step is not None:
            return np.tile(self._per_step[name], self._hosts)
        return self._frame[name].to_numpy()

    def at(self, name: str, positions: np.ndarray) -> np.ndarray:
        """The medians of `name` of the rows at these positions."""
        if self._per_step is not None:
            per_step = self._per_step[name]
            return per_step[positions % len(per_step)]
        return self._frame[name].to_numpy()[positions]


def _step_medians(values: np.ndarray, hosts: int) -> np.ndarray | None:
    """A column of hosts x steps values, host after host -> per step the median over hosts, as
    pandas' group median computes it (the middle value, or (a + b) / 2 of the middle two, in
    float64); None when a value is missing (pandas skips it)."""
    if np.isnan(values).any():
        return None
    ordered = np.sort(values.reshape(hosts, -1).T, axis=1)  # steps x hosts, each row sorted
    middle = hosts // 2
    return ordered[:, middle] if hosts % 2 else (ordered[:, middle - 1] + ordered[:, middle]) / 2


def _noise_ns(rows: pd.DataFrame) -> float:
    median = rows.groupby("host", observed=True)["wall_ns"].transform("median")
    spread = (rows["wall_ns"] - median).abs().groupby(rows["host"], observed=True).median()
    spread = MAD_TO_SIGMA * spread
    return float(spread.median()) if not spread.empty else 0.0


def pod_view(judged: pd.DataFrame, rows: pd.DataFrame | None = None) -> dict[str, Any]:
    """Per host: median step, excess over the pod's step times, slow steps; and the pod's median,
    noise and threshold. Empty when fewer than two hosts have judged steps. (`rows`: the
    judged steps' per_host_steps, when the caller has them already.)"""
    rows = per_host_steps(judged) if rows is None else rows
    hosts = sorted(map(str, rows["host"].unique()), key=natural_key) if not rows.empty else []
    if len(hosts) < 2:
        return {}
    parts = [c for c in ("compile_ns", "execute_ns", "host_ns", *COUNTS) if c in rows.columns]
    pod = PodMedians(rows, ["wall_ns", *parts])
    rows = rows.assign(
        excess_ns=rows["wall_ns"].to_numpy() - pod.column("wall_ns"), _row=np.arange(len(rows))
    )
    pod_p50 = float(rows.groupby("host", observed=True)["wall_ns"].median().median())
    noise = _noise_ns(rows)
    threshold = max(NOISE_FACTOR * noise, MIN_SHARE * pod_p50, MIN_EXCESS_NS)
    per_host = []
    blocks = host_blocks(rows)
    if blocks is not None:  # each host's rows one block: slices, not the groupby's copies
        ends = [*blocks[0][1:], len(rows)]
        by_host = {h: rows.iloc[a:b] for h, a, b in zip(blocks[1], blocks[0], ends, strict=True)}
    else:
        by_host = {str(h): part for h, part in rows.groupby("host", sort=False, observed=True)}
    for host in hosts:
        mine = by_host[host]
        slow = mine[mine["excess_ns"] > threshold]
        per_host.append(
            {
                "host": host,
                "steps": int(len(mine)),
                "p50_ms": float(mine["wall_ns"].median()) / NS_PER_MS,
                "excess_ms": float(mine["excess_ns"].median()) / NS_PER_MS,
                "slow_steps": [int(s) for s in sorted(slow["step"])],
                "straggler": bool(mine["excess_ns"].median() > threshold),
                "cause": _cause(_with_pod(slow, pod, parts)) if len(slow) else None,
            }
        )
    return {
        "hosts": per_host,
        "pod_p50_ms": pod_p50 / NS_PER_MS,
        "noise_ms": noise / NS_PER_MS,
        "threshold_ms": threshold / NS_PER_MS,
    }


def _with_pod(slow: pd.DataFrame, pod: PodMedians, parts: list[str]) -> pd.DataFrame:
    """The slow rows with the pod's medians of their steps' parts beside their own."""
    positions = slow["_row"].to_numpy()
    return slow.assign(**{f"pod_{c}": pod.at(c, positions) for c in parts})


def _cause(slow: pd.DataFrame) -> dict[str, Any]:
    """Which of the step's parts the slow steps' excess went to, and the counts the host had more of."""
    excess = {
        name: float((slow[col] - slow[f"pod_{col}"]).median())
        for name, (col, _) in COMPONENTS.items()
        if col in slow.columns
    }
    name = max(excess, key=excess.__getitem__)
    more = {
        label: float((slow[c] - slow[f"pod_{c}"]).sum())
        for c, label in COUNTS.items()
        if c in slow.columns and float((slow[c] - slow[f"pod_{c}"]).sum()) > 0
    }
    return {
        "part": name,
        "text": COMPONENTS[name][1],
        "excess_ms": excess[name] / NS_PER_MS,
        "more_than_pod": more,
    }


def host_summary(
    steps: pd.DataFrame,
    judged: pd.DataFrame,
    meta: dict[str, Any],
    rows: pd.DataFrame | None = None,
) -> list[dict[str, Any]]:
    """For the report and the dashboard: each host's processes, steps, median step and how it ended."""
    ended = {str(h.get("host")): h.get("status") for h in meta.get("hosts", [])}
    procs: dict[str, int] = {}
    for proc in meta.get("processes", []):
        procs[str(proc.get("host"))] = procs.get(str(proc.get("host")), 0) + 1
    rows = per_host_steps(judged) if rows is None else rows
    p50: Any = (
        rows.groupby("host", observed=True)["wall_ns"].median().rename(index=str) / NS_PER_MS
        if not rows.empty
        else {}
    )
    counts: Any = steps["host"].astype(str).value_counts() if not steps.empty else {}
    return [
        {
            "host": host,
            "processes": procs.get(host, 0),
            "steps": int(counts.get(host, 0)),
            "p50_ms": float(p50[host]) if host in p50 else None,
            "status": ended.get(host),
        }
        for host in sorted(counts.keys() if len(counts) else [], key=natural_key)
    ]
