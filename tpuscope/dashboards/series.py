"""The step timeline's series, reduced where they are stored: DuckDB over the run's parts.

A line drawn a thousand pixels wide shows a few thousand points, but a million-step run's
Overview used to read a million steps rows and two million fallback rows into pandas first
(1.9 s of the page's 2.6 s, most of its CPU). Here DuckDB reads only the columns it needs,
applies a zoom window as a predicate (row groups outside it are skipped), and returns:

  - the M4 envelope of each process's step times: the first, last, smallest and largest
    step of each of `points / 4` buckets, which is what a line of that width draws (every
    spike and dip kept, unlike stride sampling; as plotly-resampler and the M4 paper do);
  - the slowest wall time at each compile step (where the compile markers sit);
  - the fallback rows of only the steps whose bars are drawn (per-step counts are summed
    with numpy over two integer columns, then min/max decimated as before).

What comes back are small frames with the raw tables' columns, so figures.steps draws them
exactly as it draws a small run's tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa

from .aggregates import FALLBACKS_ONLY
from .data import table_to_frame
from .figures.common import minmax_indices, step_totals
from .figures.steps import MAX_BARS, MAX_LANES

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection

    from .data import StoreData

COMPILE_COLUMNS = ["step", "duration_ns", "cause", "location", "graph_hash"]
FALLBACK_COLUMNS = ["step", "op", "count", "location"]
_M4 = (
    ("first_step", "first_wall"),
    ("last_step", "last_wall"),
    ("min_step", "min_wall"),
    ("max_step", "max_wall"),
)


@dataclass(frozen=True)
class Timeline:
    """What the step timeline draws, already reduced to what it shows."""

    steps: (
        pd.DataFrame
    )  # host, rank, step, wall_ns (or step, wall_ns: the slowest process per step)
    slowest_of: int | None  # the number of processes when `steps` is the slowest one per step
    compiles: pd.DataFrame  # COMPILE_COLUMNS, in the window
    step_walls: pd.Series  # step -> the slowest process's wall_ns at each compile step
    fallbacks: pd.DataFrame  # FALLBACK_COLUMNS rows of the steps whose bars are drawn


def _window(x_range: tuple[float, float] | None) -> str:
    """A SQL predicate on `step` for a zoom window ('TRUE' for the whole run); the bounds are
    floats (formatted here, never text from a request)."""
    if x_range is None or not all(math.isfinite(v) for v in x_range):
        return "TRUE"
    lo, hi = (float(v) for v in x_range)
    return f"step >= {lo!r} AND step <= {hi!r}"


def step_rows(data: StoreData, run_id: str) -> int:
    """Rows of the steps table (from the Parquet footers: nothing is decoded)."""
    return int(
        data.query(run_id, "SELECT count(*) AS n FROM steps", ["steps"]).column("n")[0].as_py()
    )


def _envelope(con: DuckDBPyConnection, source: str, by: str, buckets: int) -> pd.DataFrame:
    """M4 rows (host, rank, step, wall_ns or step, wall_ns) of `source`, per `by` group."""
    keys = f"{by}, " if by else ""
    frame = con.sql(f"""
        WITH s AS ({source}),
        r AS (SELECT min(step) AS lo, greatest(max(step) - min(step) + 1, 1) AS span FROM s)
        SELECT {keys}(step - r.lo) * {buckets} // r.span AS bucket,
               min(step) AS first_step, arg_min(wall_ns, step) AS first_wall,
               max(step) AS last_step, arg_max(wall_ns, step) AS last_wall,
               arg_min(step, wall_ns) AS min_step, min(wall_ns) AS min_wall,
               arg_max(step, wall_ns) AS max_step, max(wall_ns) AS max_wall
        FROM s, r GROUP BY ALL""").df()
    ids = [c for c in ("host", "rank") if by and c in frame]
    points = pd.concat(
        [frame[ids + [s, w]].rename(columns={s: "step", w: "wall_ns"}) for s, w in _M4]
    )
    points = points.drop_duplicates(ids + ["step"]).sort_values(ids + ["step"], ignore_index=True)
    for col in ids:
        points[col] = points[col].astype(object).where(points[col].notna(), None)
    return points.astype({"step": "int64", "wall_ns": "int64"})


def _steps(con: DuckDBPyConnection, where: str, points: int) -> tuple[pd.DataFrame, int | None]:
    processes = con.sql(f"SELECT count(DISTINCT (host, rank)) FROM steps WHERE {where}").fetchall()[
        0
    ][0]
    buckets = max(1, points // 4)
    if processes > MAX_LANES:
        slowest = f"SELECT step, max(wall_ns) AS wall_ns FROM steps WHERE {where} GROUP BY step"
        return _envelope(con, slowest, "", buckets), int(processes)
    source = f"SELECT host, rank, step, wall_ns FROM steps WHERE {where}"
    return _envelope(con, source, "host, rank", buckets), None


def _fallbacks(con: DuckDBPyConnection, where: str, bars: int) -> pd.DataFrame:
    """The fallback rows of the steps fallback_bars keeps: counts per step from two integer
    columns (numpy, as the figure sums them), then the other columns of those steps alone."""
    where = f"{where} AND {FALLBACKS_ONLY}"  # value reads are host syncs, not fallbacks
    counts = con.sql(
        f"SELECT step, count FROM fallbacks WHERE {where} AND count IS NOT NULL"
    ).to_arrow_table()
    if not counts.num_rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in FALLBACK_COLUMNS})
    counts = counts.combine_chunks()
    per = step_totals(counts.column("step").to_numpy(), counts.column("count").to_numpy())
    chosen = pa.table({"step": per.index.to_numpy()[minmax_indices(per.to_numpy(), bars)]})
    con.register("chosen", chosen)  # rows come in any order: fallback_bars orders them itself
    rows = con.sql(
        f"SELECT {', '.join(FALLBACK_COLUMNS)} FROM fallbacks "
        f"WHERE step IN (SELECT step FROM chosen) AND {FALLBACKS_ONLY}"
    ).to_arrow_table()
    return table_to_frame(rows)


def read_timeline(
    data: StoreData, run_id: str, points: int, x_range: tuple[float, float] | None = None
) -> Timeline:
    """The timeline's series of the run in a window (None: the whole run), at most about
    `points` per process and MAX_BARS fallback bars. Raises duckdb.Error on a part DuckDB
    cannot read (the caller then reads the tables whole, which skips and names it)."""
    where = _window(x_range)
    con = data.duckdb(run_id, ["steps", "compiles", "fallbacks"])
    try:
        steps, slowest_of = _steps(con, where, points)
        compiles = table_to_frame(
            con.sql(
                f"SELECT {', '.join(COMPILE_COLUMNS)} FROM compiles WHERE {where} ORDER BY step"
            ).to_arrow_table()
        )
        walls = con.sql(
            f"SELECT step, max(wall_ns) AS wall_ns FROM steps WHERE {where} AND step IN "
            f"(SELECT step FROM compiles WHERE {where}) GROUP BY step"
        ).df()
        fallbacks = _fallbacks(con, where, min(points, MAX_BARS))
    finally:
        con.close()
    step_walls = pd.Series(
        walls["wall_ns"].to_numpy(np.int64), index=walls["step"].to_numpy(np.int64)
    )
    return Timeline(steps, slowest_of, compiles, step_walls, fallbacks)
