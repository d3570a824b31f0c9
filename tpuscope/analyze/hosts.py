"""Hosts judged against each other: per-host step times, the pod's median, stragglers.

A pod run holds the rows of many hosts (the `host` column every table carries). A host's
time of a step is the slowest of its processes' (a host is as late as its last rank);
the pod's time of a step is the median over hosts. The noise between steps is the
median over hosts of each host's robust spread of its own step times (1.4826 x MAD);
a host is a straggler when its median excess over the pod's step times is above
NOISE_FACTOR x that noise, above MIN_SHARE of the pod's median step and above 1 ms, and
its slow steps are those where its excess is. A host with fewer than MIN_JUDGED_STEPS judged
steps (one lost early) is never flagged (its steps still count in the pod's medians): the median of two or three steps is one burst of the OS's
scheduling as often as a slow host (a loaded CI machine made such a host 3 ms slow on 2 steps). The rule's constants live here; its one
implementation is DuckDB and numpy over the judged (host, step) rows (analyze/pod_sql.PodSteps
and analyze/pod_view.py), for a pod in its parts and a run's frame in memory alike.
"""

from __future__ import annotations

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
MIN_JUDGED_STEPS = 5
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
