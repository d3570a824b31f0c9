"""The pod's medians over hosts and over steps, from a host x step matrix of one column at a time.

DuckDB's median is a holistic aggregate: grouped by step over a pod's 12.8M (host, step)
rows it keeps every value and took ~7 s per column here. The rows of one column, streamed
from DuckDB in batches, fill a host x step matrix instead (NaN where a host has no such
step: a lost host, a host that ended early), and numpy takes the medians along either axis
the way pandas takes them: NaN skipped, the middle value, or (lo + hi) / 2 of the middle two
in float64. One column's matrix is 8 bytes a cell (0.1 GB for 128 hosts x 100k steps).
"""

from __future__ import annotations

from typing import Any

import numpy as np

BATCH_ROWS = 1 << 20
CHUNK = 8192  # steps (or hosts) sorted at once: the sort's copy stays a chunk


def nan_median(matrix: np.ndarray, axis: int) -> np.ndarray:
    """Per row (axis=1) or column (axis=0) the median of the values that are not NaN, as
    pandas' median computes it; NaN where there is none. A chunk of rows (or columns) at a
    time: a partition when the chunk has no NaN, else a sort (NaN last) and each one's count."""
    length = matrix.shape[1 - axis]
    out = np.empty(length, dtype=np.float64)
    step = max(1, CHUNK * 64 // max(1, matrix.shape[axis]))
    for start in range(0, length, step):
        part = matrix[:, start : start + step] if axis == 0 else matrix[start : start + step, :]
        out[start : start + part.shape[1 - axis]] = _middle(part, axis)
    return out


def _middle(part: np.ndarray, axis: int) -> np.ndarray:
    lo, hi, some = _middle_two(part, axis)
    return (lo + hi) / 2 if some is None else np.where(some, (lo + hi) / 2, np.nan)


def _middle_two(part: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The lower and upper middle values along `axis` (NaN skipped), and where there is any
    value (None: everywhere)."""
    size = part.shape[axis]
    missing = np.isnan(part)
    if not missing.any():
        lo_k, hi_k = (size - 1) // 2, size // 2
        ordered = np.partition(part, [lo_k, hi_k], axis=axis)
        pick = (lambda k: ordered[k, :]) if axis == 0 else (lambda k: ordered[:, k])
        return pick(lo_k), pick(hi_k), None
    ordered = np.sort(part, axis=axis)  # NaN last
    count = (~missing).sum(axis=axis)
    lo_k = np.maximum(count - 1, 0) // 2
    hi_k = np.minimum(count // 2, size - 1)
    idx = np.arange(part.shape[1 - axis])
    lo = ordered[lo_k, idx] if axis == 0 else ordered[idx, lo_k]
    hi = ordered[hi_k, idx] if axis == 0 else ordered[idx, hi_k]
    some = count > 0
    return np.where(some, lo, np.nan), np.where(some, hi, np.nan), some


def binned_middles(matrix: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row and bin of `width` columns (the last one may be narrower), the lower and upper
    middle values of the bin's values not NaN (NaN where it has none): a median as pandas takes
    it of values scaled first ((lo / s + hi / s) / 2) needs both, not their mean."""
    rows, length = matrix.shape
    bins = -(-length // width)
    lo, hi = np.empty((rows, bins)), np.empty((rows, bins))
    full = length // width
    step = max(1, CHUNK * 64 // max(1, rows * width))  # whole bins sorted at once
    for start in range(0, full, step):
        stop = min(full, start + step)
        part = matrix[:, start * width : stop * width].reshape(rows * (stop - start), width)
        a, b, _ = _middle_two(part, 1)
        lo[:, start:stop], hi[:, start:stop] = (
            a.reshape(rows, stop - start),
            b.reshape(rows, stop - start),
        )
    if full < bins:  # the last, narrower bin
        lo[:, full], hi[:, full], _ = _middle_two(matrix[:, full * width :], 1)
    return lo, hi


def around(q: float, n: int) -> tuple[int, int, float]:
    """numpy's linear quantile q of n values: the ranks below and above it and the weight."""
    virtual = (n - 1) * np.float64(q)
    below = int(np.floor(virtual))
    return below, min(below + 1, n - 1), virtual - below


def order_stats(
    wall: np.ndarray, rows: int, quantiles: tuple[float, ...]
) -> dict[tuple[int, int], int]:
    """The order statistics of numpy's quantiles of the matrix's values, by (rows, rank): only
    when the values are those rows (none NaN: as many values as rows) and exact in float64."""
    values = wall.reshape(-1)
    missing = np.isnan(values)
    values = values[~missing] if missing.any() else values.copy()
    if len(values) != rows or not rows or values.max() >= 2.0**53 or values.min() < 0:
        return {}
    ranks = sorted({k for q in quantiles for k in around(q, rows)[:2]})
    ordered = np.partition(values, ranks)
    return {(rows, k): int(ordered[k]) for k in ranks}


class StepMatrix:
    """The judged (host, step) rows of a pod (DuckDB view `host_steps`) as host x step
    matrices, a column at a time; hosts in the order given, steps from the lowest judged one."""

    def __init__(self, con: Any, hosts: list[str], span: tuple[Any, Any] | None = None) -> None:
        """`span`: the lowest and highest step of host_steps, when the caller has them."""
        self.con, self.hosts = con, hosts
        # each row's host as its position in `hosts`: an ENUM of them, whose Arrow dictionary
        # indices are the positions (a join on the host's text cost ~0.5 s CPU per pass)
        con.execute("DROP TYPE IF EXISTS host_enum")
        con.execute("CREATE TYPE host_enum AS ENUM (" + ", ".join(_q(h) for h in hosts) + ")")
        lo, hi = span or con.execute("SELECT min(step), max(step) FROM host_steps").fetchall()[0]
        self.lo, self.span = int(lo), int(hi) - int(lo) + 1
        self.rows = 0  # rows of host_steps the last pass read (a step twice: more than cells)
        self.cells = 0  # cells the last pass wrote
        self.filled = np.zeros(self.span, dtype=bool)  # steps some host has a row of (full pass)

    def columns(self, names: list[str], steps: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """hosts x steps float64 matrices of some columns of host_steps, NaN where a host has no
        row, in one pass; with `steps` (column positions), only those steps' columns."""
        width = self.span if steps is None else len(steps)
        # not filled with NaN first (a write of every cell, 1.7 s of 12.8M-cell matrices): the
        # cells no row wrote are set to NaN after the pass, when there are any
        out = {n: np.empty((len(self.hosts), width)) for n in names}
        flat = {
            n: matrix.reshape(-1) for n, matrix in out.items()
        }  # views: cell = host x width + k
        seen = np.zeros(len(self.hosts) * width, dtype=bool)
        where = None
        if steps is not None:  # a step's column among the chosen, -1 for the others
            where = np.full(self.span, -1, dtype=np.int64)
            where[steps] = np.arange(width)
        # the cell's position and the values as DOUBLE from DuckDB (its threads, no numpy pass
        # per column); the host's position is its ENUM code (a join on its text cost ~0.5 s)
        host = "enum_code(CAST(CAST(h.host AS VARCHAR) AS host_enum))::BIGINT"
        cell = f"{host} * {self.span} + (h.step - {self.lo})" if where is None else host
        picked = ", ".join(f"CAST(h.{n} AS DOUBLE) AS {n}" for n in names)
        reader = self.con.sql(
            f"SELECT {cell} AS c, h.step - {self.lo} AS k, {picked} FROM host_steps h"
        ).to_arrow_reader(BATCH_ROWS)
        self.rows = 0
        for batch in reader:
            self.rows += batch.num_rows
            at = batch.column("c").to_numpy()
            if where is not None:  # the host's row, the step's column among the chosen
                k = where[batch.column("k").to_numpy()]
                keep = k >= 0
                at = at[keep] * width + k[keep]
            else:
                keep = None
            seen[at] = True
            for n in names:
                values = batch.column(n).to_numpy(zero_copy_only=False)
                flat[n][at] = values if keep is None else values[keep]
        self.cells = int(np.count_nonzero(seen))
        if self.cells < seen.size:
            for matrix in flat.values():
                matrix[~seen] = np.nan
        if steps is None:
            self.filled = seen.reshape(len(self.hosts), width).any(axis=0)  # steps with a row
        return out


def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
