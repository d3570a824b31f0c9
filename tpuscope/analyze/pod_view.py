"""The pod view (the rule of analyze/hosts.py) from host x step matrices, and what they give.

One pass over a pod's judged (host, step) rows fills the host x step matrix of their wall time
(analyze/pod_matrix.StepMatrix); everything the pod's figures take from those rows is taken
from it while it is in memory, not from another pass over the parts: each host's median step
(the pod view's and the summary's `hosts`), the Hosts page's binned medians (the summary's
`host_steps`), the order statistics of the summary's p50 and p90, and the straggler's slow
steps. Only the slow steps' parts are read again (their columns only), and their causes are
taken in numpy. tests/test_pod_sql.py checks the figures against ones computed by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpuscope.analyze.hosts import (
    COMPONENTS,
    COUNTS,
    MAD_TO_SIGMA,
    MAX_COLUMNS,
    MIN_EXCESS_NS,
    MIN_JUDGED_STEPS,
    MIN_SHARE,
    NOISE_FACTOR,
    NS_PER_MS,
)
from tpuscope.analyze.pod_matrix import StepMatrix, binned_middles, nan_median, order_stats

PARTS = ("compile_ns", "execute_ns", "host_ns", *COUNTS)  # a slow step's parts, against the pod's
DENSE = ("execute_ns", "host_ns")  # parts of every step: read in the wall's pass where they fit
SPARSE = ("compile_ns", *COUNTS)  # parts mostly 0: the cells not 0 read as rows, not matrices
PASS_CELLS = 1 << 27  # matrix cells one pass over the rows fills (8 bytes each: 1 GB)
FIRST_PASS_CELLS = 1 << 26  # the wall's pass reads DENSE too up to these many cells (512 MB)
SPARSE_ROWS = 1 << 20  # SPARSE's cells not 0 read as rows up to this many, else as matrices
QUANTILES = (0.5, 0.9)  # of the judged steps' wall time (the summary's p50 and p90)


@dataclass
class PodFigures:
    """What one pass over the judged rows gave: the pod view, and (when each row is one cell of
    the matrix: no (host, step) written twice) the hosts' medians, the binned matrix record and
    the order statistics of the judged wall times, by (rows, rank)."""

    view: dict[str, Any]
    p50_ms: dict[str, float] = field(default_factory=dict)
    record: dict[str, Any] | None = None
    ranked: dict[tuple[int, int], int] = field(default_factory=dict)


def pod_figures(matrices: StepMatrix, sparse_zero: bool = False) -> PodFigures:
    """The pod view of the matrices' rows, and the figures their wall matrix gives
    (`sparse_zero`: no judged row has a SPARSE part that is not 0)."""
    hosts = matrices.hosts
    together = len(hosts) * matrices.span * (1 + len(DENSE)) <= FIRST_PASS_CELLS
    dense = matrices.columns(["wall_ns", *DENSE] if together else ["wall_ns"])
    wall = dense.pop("wall_ns")
    exact = matrices.rows == matrices.cells  # every row one cell: the matrix holds the rows
    out = PodFigures({})
    if exact:
        out.ranked = order_stats(wall, matrices.rows, QUANTILES)
        out.record = step_matrix_record(wall, matrices)
    p50 = nan_median(wall, 1)
    counts = (~np.isnan(wall)).sum(axis=1)
    spread = MAD_TO_SIGMA * nan_median(np.abs(wall - p50[:, None]), 1)
    excess = wall
    excess -= nan_median(wall, 0)[None, :]  # in place: two matrices at most, not three
    del wall
    pod_p50 = float(_median(p50))
    noise = float(_median(spread))
    threshold = max(NOISE_FACTOR * noise, MIN_SHARE * pod_p50, MIN_EXCESS_NS)
    median_excess = nan_median(excess, 1)
    slow = excess > threshold  # NaN (no such step) is never slow
    del excess
    causes = _slow_parts(matrices, slow, dense if exact else {}, exact, sparse_zero)
    view = []
    for i, host in enumerate(hosts):
        steps = np.flatnonzero(slow[i]) + matrices.lo
        view.append(
            {
                "host": host,
                "steps": int(counts[i]),
                "p50_ms": float(p50[i]) / NS_PER_MS,
                "excess_ms": float(median_excess[i]) / NS_PER_MS,
                "slow_steps": steps.tolist(),
                "straggler": bool(median_excess[i] > threshold and counts[i] >= MIN_JUDGED_STEPS),
                "cause": causes.get(i),
            }
        )
    out.view = {
        "hosts": view,
        "pod_p50_ms": pod_p50 / NS_PER_MS,
        "noise_ms": noise / NS_PER_MS,
        "threshold_ms": threshold / NS_PER_MS,
    }
    if exact:
        out.p50_ms = {h["host"]: h["p50_ms"] for h in view}
    return out


def _median(values: np.ndarray) -> float:
    """pandas' Series.median: NaN skipped (np.nanmedian of the rest), NaN when none is left."""
    kept = values[~np.isnan(values)]
    return float(np.median(kept)) if len(kept) else float("nan")


def _sum(values: np.ndarray) -> float:
    """pandas' Series.sum of float64: NaN as 0, numpy's sum."""
    return float(np.where(np.isnan(values), 0.0, values).sum())


def step_matrix_record(
    wall: np.ndarray, matrices: StepMatrix, max_columns: int = MAX_COLUMNS
) -> dict[str, Any] | None:
    """The summary's `host_steps` from the wall matrix: per host and bin of steps the
    median in ms as pandas takes it from the ms matrix, (lo / 1e6 + hi / 1e6) / 2 of the middle
    two; the bins some host has a row in, null where a host has none."""
    if not matrices.span:
        return None
    width = max(1, int(np.ceil(matrices.span / max_columns)))
    lo, hi = binned_middles(wall, width)
    ms = (lo / NS_PER_MS + hi / NS_PER_MS) / 2
    bins = np.arange(0, matrices.span, width)
    present = np.add.reduceat(matrices.per_step, bins) > 0  # a bin some host has a row in
    ms = ms[:, present]
    return {
        "hosts": list(matrices.hosts),
        "steps": (bins[present] + matrices.lo).tolist(),
        "width": width,
        "ms": [[None if v != v else round(float(v), 6) for v in row] for row in ms],
    }


def _slow_parts(
    matrices: StepMatrix,
    slow: np.ndarray,
    dense: dict[str, np.ndarray],
    exact: bool,
    sparse_zero: bool,
) -> dict[int, dict[str, Any]]:
    """Per host (its row) with slow steps: the cause of its slow steps (cause()),
    from those steps' parts beside the pod's medians of them. The DENSE parts come from the
    wall's pass when it read them; the SPARSE ones from their cells not 0 (when each row is
    one cell and they are few); the others from passes over the rows of as many matrices as
    PASS_CELLS allows, of the steps some host was slow on only."""
    rows = np.flatnonzero(slow.any(axis=1))
    if not len(rows):
        return {}
    cols = np.flatnonzero(slow.any(axis=0))  # the steps some host was slow on
    slow = slow[:, cols]
    mine = {int(i): np.flatnonzero(slow[i]) for i in rows}
    diffs: dict[int, dict[str, np.ndarray]] = {int(i): {} for i in rows}

    def add(col: str, matrix: np.ndarray) -> None:
        pod = nan_median(matrix, 0)
        for i, at in mine.items():
            diffs[i][col] = matrix[i, at] - pod[at]

    for col in DENSE:
        if col in dense:
            add(col, dense.pop(col)[:, cols] if len(cols) < matrices.span else dense.pop(col))
    left = [c for c in PARTS if c not in diffs[int(rows[0])]]
    sparse = None
    if exact:
        sparse = (
            (np.empty(0, np.int64), {c: np.empty(0) for c in SPARSE})
            if sparse_zero
            else matrices.nonzero(list(SPARSE), SPARSE_ROWS)
        )
    if sparse is not None:
        cells, values = sparse
        for col in SPARSE:
            _add_sparse(diffs, mine, col, cells, values[col], matrices, cols)
        left = [c for c in left if c not in SPARSE]
    per_pass = max(1, PASS_CELLS // (len(matrices.hosts) * len(cols)))  # matrices of a pass
    for start in range(0, len(left), per_pass):
        names = left[start : start + per_pass]
        parts = matrices.columns(names, cols)  # only those steps
        for col in names:
            add(col, parts.pop(col))
    return {i: cause(d) for i, d in diffs.items()}


def _add_sparse(
    diffs: dict[int, dict[str, np.ndarray]],
    mine: dict[int, np.ndarray],
    col: str,
    cells: np.ndarray,
    values: np.ndarray,
    matrices: StepMatrix,
    cols: np.ndarray,
) -> None:
    """A part's excess over the pod at each host's slow steps, from the cells where it is not
    0: the pod's median of a step is that of its hosts' values, the cells not listed 0."""
    keep = values != 0
    cells, values = cells[keep], values[keep]
    order = np.argsort(cells)
    cells, values = cells[order], values[order]
    pod = sparse_medians(matrices.per_step, cells % matrices.span, values)[cols]
    for i, at in mine.items():
        wanted = i * matrices.span + cols[at]
        where = np.minimum(np.searchsorted(cells, wanted), max(len(cells) - 1, 0))
        own = (
            np.where(cells[where] == wanted, values[where], 0.0)
            if len(cells)
            else np.zeros(len(wanted))
        )
        diffs[i][col] = own - pod[at]


def sparse_medians(per_step: np.ndarray, step: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per step, the median over its per_step hosts' values (nan_median's, (lo + hi) / 2 of the
    middle two) when only these (step, value) are not 0: in each step's sorted values the
    negatives come first, then its zeros, then the positives."""
    out = np.zeros(len(per_step))
    if not len(step):
        return out
    order = np.lexsort((values, step))
    step, values = step[order], values[order]
    steps, start, count = np.unique(step, return_index=True, return_counts=True)
    negative = np.add.reduceat((values < 0).astype(np.int64), start)
    n = per_step[steps]
    zeros = n - count
    last = len(values) - 1

    def rank(k: np.ndarray) -> np.ndarray:
        low = values[np.clip(start + k, 0, last)]  # k among the negatives
        high = values[np.clip(start + k - zeros, 0, last)]  # k among the positives
        return np.where(k < negative, low, np.where(k < negative + zeros, 0.0, high))

    out[steps] = (rank((n - 1) // 2) + rank(n // 2)) / 2
    return out


def cause(diff: dict[str, np.ndarray]) -> dict[str, Any]:
    """Which part of the step a host's slow steps lost their time to (the median of each
    part's excess over the pod's median of it at those steps, NaN skipped), and the counts
    it had more of than the pod (their excesses' sums)."""
    excess = {name: _median(diff[col]) for name, (col, _) in COMPONENTS.items() if col in diff}
    name = max(excess, key=excess.__getitem__)
    more = {label: _sum(diff[c]) for c, label in COUNTS.items() if c in diff and _sum(diff[c]) > 0}
    return {
        "part": name,
        "text": COMPONENTS[name][1],
        "excess_ms": excess[name] / NS_PER_MS,
        "more_than_pod": more,
    }
