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
        # one partition at the upper middle; the lower is the largest value below it (numpy's
        # partition at two ranks was ~10x slower along a row of 100k values than at one)
        hi_k = size // 2
        ordered = np.partition(part, hi_k, axis=axis)
        hi = ordered[hi_k, :] if axis == 0 else ordered[:, hi_k]
        if size % 2:
            return hi, hi, None
        below = ordered[:hi_k, :] if axis == 0 else ordered[:, :hi_k]
        return below.max(axis=axis), hi, None
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
    out: dict[tuple[int, int], int] = {}
    start = 0  # values[start:] are the values above every rank found so far (values: a copy)
    for k in sorted({k for q in quantiles for k in around(q, rows)[:2]}):
        if k == start and k:  # the rank next to the last: the smallest value left, moved there
            j = start + int(np.argmin(values[start:]))
            values[start], values[j] = values[j], values[start]
        else:  # one rank a partition, in place (numpy's partition at many ranks was ~5x slower)
            values[start:].partition(k - start)
        out[(rows, k)] = int(values[k])
        start = k + 1
    return out


class StepMatrix:
    """The judged (host, step) rows of a pod (DuckDB view `host_steps`) as host x step
    matrices, a column at a time; hosts in the order given, steps from the lowest judged one."""

    def __init__(self, con: Any, hosts: list[str], span: tuple[Any, Any] | None = None) -> None:
        """`span`: the lowest and highest step of host_steps, when the caller has them."""
        self.con, self.hosts = con, hosts
        # each row's host as its position in `hosts`, from DuckDB's hash of its text mapped in
        # numpy: the hash of a dictionary column costs nothing per row (an ENUM cast cost
        # ~0.6 s CPU a pass at 12.8M rows, a join on the text ~0.5 s); an ENUM when two hosts'
        # hashes collide. The hash is of the text (a cast to VARCHAR: none on the parts' column,
        # an ENUM's values for a pandas categorical in a frame), as the hosts' own hashes are
        keys = np.array(
            [h for (h,) in con.execute("SELECT hash(h) FROM unnest(?) t(h)", [hosts]).fetchall()],
            dtype=np.uint64,
        )
        self._order = np.argsort(keys)
        self._keys: np.ndarray | None = keys[self._order]
        if len(np.unique(keys)) < len(hosts):
            self._keys = None
            con.execute("DROP TYPE IF EXISTS host_enum")
            con.execute("CREATE TYPE host_enum AS ENUM (" + ", ".join(_q(h) for h in hosts) + ")")
        lo, hi = span or con.execute("SELECT min(step), max(step) FROM host_steps").fetchall()[0]
        self.lo, self.span = int(lo), int(hi) - int(lo) + 1
        self.rows = 0  # rows of host_steps the last pass read (a step twice: more than cells)
        self.cells = 0  # cells the last pass wrote
        self.per_step = np.zeros(
            self.span, dtype=np.int64
        )  # hosts with a row, per step (full pass)

    def columns(self, names: list[str], steps: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """hosts x steps float64 matrices of some columns of host_steps, NaN where a host has no
        row, in one pass; with `steps` (column positions), only those steps' columns."""
        width = self.span if steps is None else len(steps)
        # not filled with NaN first (a write of every cell, 1.7 s of 12.8M-cell matrices): the
        # cells no row wrote are set to NaN after the pass, when there are any
        out = {n: np.empty((len(self.hosts), width)) for n in names}
        flat = {n: matrix.reshape(-1) for n, matrix in out.items()}  # cell: host x width + k
        seen = np.zeros(len(self.hosts) * width, dtype=bool)
        where = None
        if steps is not None:  # a step's column among the chosen, -1 for the others
            where = np.full(self.span, -1, dtype=np.int64)
            where[steps] = np.arange(width)
        host = (
            "hash(CAST(h.host AS VARCHAR))"
            if self._keys is not None
            else "enum_code(CAST(CAST(h.host AS VARCHAR) AS host_enum))::BIGINT"
        )
        picked = ", ".join(f"CAST(h.{n} AS DOUBLE) AS {n}" for n in names)  # DuckDB's threads
        reader = self.con.sql(
            f"SELECT {host} AS i, h.step - {self.lo} AS k, {picked} FROM host_steps h"
        ).to_arrow_reader(BATCH_ROWS)
        self.rows = 0
        for batch in reader:
            self.rows += batch.num_rows
            i = self._positions(batch.column("i").to_numpy())
            k = batch.column("k").to_numpy()
            keep = None
            if where is not None:  # the step's column among the chosen
                k = where[k]
                keep = k >= 0
                i, k = i[keep], k[keep]
            at = i * width + k
            seen[at] = True
            for n in names:
                values = batch.column(n).to_numpy(zero_copy_only=False)
                flat[n][at] = values if keep is None else values[keep]
        self.cells = int(np.count_nonzero(seen))
        if self.cells < seen.size:
            for matrix in flat.values():
                matrix[~seen] = np.nan
        if steps is None:
            self.per_step = seen.reshape(len(self.hosts), width).sum(axis=0)
        return out

    def nonzero(
        self, names: list[str], limit: int
    ) -> tuple[np.ndarray, dict[str, np.ndarray]] | None:
        """The cells (host x span + step) where one of these columns of host_steps is not 0,
        and the columns' values there; None when there are more than `limit` of them."""
        picked = ", ".join(f"CAST(h.{n} AS DOUBLE) AS {n}" for n in names)
        some = " OR ".join(f"h.{n} <> 0" for n in names)
        host = (
            "hash(CAST(h.host AS VARCHAR))"
            if self._keys is not None
            else ("enum_code(CAST(CAST(h.host AS VARCHAR) AS host_enum))::BIGINT")
        )
        table = self.con.sql(
            f"SELECT {host} AS i, h.step - {self.lo} AS k, {picked} FROM host_steps h "
            f"WHERE {some} LIMIT {int(limit) + 1}"
        ).to_arrow_table()
        if table.num_rows > limit:
            return None
        i = self._positions(table.column("i").to_numpy())
        cells = i * self.span + table.column("k").to_numpy()
        return cells, {n: table.column(n).to_numpy() for n in names}

    def _positions(self, codes: np.ndarray) -> np.ndarray:
        """Each row's host position, from its host's hash (or its ENUM code)."""
        if self._keys is None or not len(codes):
            return codes.astype(np.int64)
        # a host's rows come in runs (a part is one host's): each run's hash looked up once
        starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
        first = codes[starts]
        at = np.minimum(np.searchsorted(self._keys, first), len(self._keys) - 1)
        if not (self._keys[at] == first).all():
            raise ValueError("a judged row of a host the pod view does not know")
        return np.repeat(self._order[at], np.diff(np.append(starts, len(codes))))


def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
