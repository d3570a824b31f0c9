"""Each device op's own time in a TPU trace whose op events nest: pure numpy over the events."""

from __future__ import annotations

import numpy as np
import pandas as pd


def self_times(ops: pd.DataFrame) -> np.ndarray:
    """Each op event's own time: its duration less the events nested in it on its device. A
    TPU trace times an XLA `while` (a `lax.fori_loop`, `lax.scan`, `nn.scan`) or `conditional`
    as one op whose event spans its body's ops, which it also times one by one; summed as they
    come, a loop's ops count twice (on a v5e, JAX's mnist_vae example, whose epoch is one
    fori_loop: 80.1 ms of ops in a 44.5 ms module run). What is left of a loop's own event is
    its control: the condition and the iterations' turnaround."""
    durations = ops["dur_ns"].to_numpy(np.int64)
    own = durations.copy()
    planes = ops["plane"].astype(str).to_numpy() if "plane" in ops else np.zeros(len(ops), str)
    starts = ops["start_ns"].to_numpy(np.int64)
    for plane in np.unique(planes):
        at = np.flatnonzero(planes == plane)
        order = at[np.lexsort((-durations[at], starts[at]))]  # by start, the longer first
        begin, end = starts[order], starts[order] + durations[order]
        if len(order) < 2 or not (np.maximum.accumulate(end)[:-1] >= end[1:]).any():
            continue  # no event holds another: the common case, without a Python loop
        _subtract_nested(order, begin, end, own)
    return np.clip(own, 0, None)


def _subtract_nested(
    order: np.ndarray, begin: np.ndarray, end: np.ndarray, own: np.ndarray
) -> None:
    """Take each event's duration off the innermost event that holds it (events sorted by
    start, the longer first): a stack of the events still open."""
    stack: list[int] = []
    for i in range(len(order)):
        while stack and (end[stack[-1]] <= begin[i] or end[stack[-1]] < end[i]):
            stack.pop()
        if stack:
            own[order[stack[-1]]] -= end[i] - begin[i]
        stack.append(i)
