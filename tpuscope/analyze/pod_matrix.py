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
    size = part.shape[axis]
    missing = np.isnan(part)
    if not missing.any():
        lo, hi = (size - 1) // 2, size // 2
        ordered = np.partition(part, [lo, hi], axis=axis)
        pick = (lambda k: ordered[k, :]) if axis == 0 else (lambda k: ordered[:, k])
        return (pick(lo) + pick(hi)) / 2
    ordered = np.sort(part, axis=axis)  # NaN last
    count = (~missing).sum(axis=axis)
    lo_k = np.maximum(count - 1, 0) // 2
    hi_k = np.minimum(count // 2, size - 1)
    idx = np.arange(part.shape[1 - axis])
    lo = ordered[lo_k, idx] if axis == 0 else ordered[idx, lo_k]
    hi = ordered[hi_k, idx] if axis == 0 else ordered[idx, hi_k]
    return np.where(count > 0, (lo + hi) / 2, np.nan)


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
        self.rows = 0  # rows of host_steps the last full pass read (a step twice: more than cells)

    def columns(self, names: list[str], steps: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """hosts x steps float64 matrices of some columns of host_steps, NaN where a host has no
        row, in one pass; with `steps` (column positions), only those steps' columns."""
        width = self.span if steps is None else len(steps)
        # not filled with NaN first (a write of every cell, 1.7 s of 12.8M-cell matrices): the
        # cells no row wrote are set to NaN after the pass, when there are any
        out = {n: np.empty((len(self.hosts), width)) for n in names}
        seen = np.zeros((len(self.hosts), width), dtype=bool)
        where = np.full(self.span, -1, dtype=np.int64)
        where[np.arange(self.span) if steps is None else steps] = np.arange(width)
        picked = ", ".join(f"h.{n} AS {n}" for n in names)
        reader = self.con.sql(
            f"SELECT CAST(CAST(h.host AS VARCHAR) AS host_enum) AS i, h.step - {self.lo} AS k, "
            f"{picked} FROM host_steps h"
        ).to_arrow_reader(BATCH_ROWS)
        self.rows = 0
        for batch in reader:
            self.rows += batch.num_rows
            i = self._positions(batch.column("i"))
            k = where[batch.column("k").to_numpy(zero_copy_only=False)]
            keep = k >= 0
            i, k = i[keep], k[keep]
            seen[i, k] = True
            for n in names:
                out[n][i, k] = (
                    batch.column(n).to_numpy(zero_copy_only=False)[keep].astype(np.float64)
                )
        if not seen.all():
            for matrix in out.values():
                matrix[~seen] = np.nan
        return out

    def _positions(self, column: Any) -> np.ndarray:
        """Each row's host position from the ENUM column (its dictionary indices, mapped through
        the batch's dictionary in case it is not the ENUM's in order)."""
        import pyarrow as pa

        array: Any = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        codes = array.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        names: list[str] = array.dictionary.to_pylist()  # a DictionaryArray of the hosts' names
        if names != self.hosts[: len(names)]:
            where = {h: i for i, h in enumerate(self.hosts)}
            codes = np.array([where[n] for n in names], dtype=np.int64)[codes]
        return codes


def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
