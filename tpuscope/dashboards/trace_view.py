"""The Trace page's data: DuckDB over the run's trace_events parts, never the events in memory.

DuckDB aggregates them (the summary, exact busy time per line and bin, time per op) and picks
what the timeline can draw (the events in view, or the longest of each line's pixel-wide
buckets), reading only the columns each query names. A zoom runs the timeline's query again
for its window (pages/trace.py lays the results out)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.compute as pc

from .data import StoreData
from .figures.common import NS_PER_MS, empty_figure
from .figures.trace import activity_figure, busy_ns, ops_table, trace_timeline

BINS = 300  # the activity heatmap's columns
# The timeline's buckets per line across the window, SUB to a heatmap bin (one DuckDB pass
# computes both): under the plot's width in pixels (at most ~1,150 px: a 1,400 px page less the
# lane labels), so no bucket is narrower than a pixel; and the events drawn, at most (issue 30).
SUB = 3
PIXELS = BINS * SUB
SHOWN = 2000
OPS = 50


def _plane(multi_host: bool) -> str:
    """The plane label in SQL: per host when the trace spans several (every host has a /device:TPU:0)."""
    return (
        "coalesce(CAST(host AS VARCHAR), '') || ' ' || plane"
        if multi_host
        else "CAST(plane AS VARCHAR)"
    )


def _query(data: StoreData, run_id: str, statements: list[str]) -> list[pd.DataFrame]:
    """Statements over the run's trace_events parts on one DuckDB connection (footers read once);
    every result is small (aggregates, or at most SHOWN rows)."""
    con = data.duckdb(run_id, ["trace_events"])
    try:
        return [con.sql(statement).df() for statement in statements]
    finally:
        con.close()


def _head_sql() -> str:
    """One pass for the summary and the op table: counts, time and bounds per (host, plane, op)
    (a few thousand rows at most); pandas adds them up (`_head`)."""
    return (
        "SELECT host, CAST(plane AS VARCHAR) AS plane, CAST(name AS VARCHAR) AS name, "
        "count(*) AS count, sum(dur_ns) AS total, max(dur_ns) AS longest, min(start_ns) AS t0, "
        "max(start_ns + dur_ns) AS t1, min(step) FILTER (WHERE step >= 0) AS step_lo, "
        "max(step) FILTER (WHERE step >= 0) AS step_hi FROM trace_events GROUP BY ALL"
    )


def _head(rows: pd.DataFrame, n: int = OPS) -> tuple[dict[str, Any], pd.DataFrame]:
    """The summary (events, bounds, hosts, steps) and the n ops of most total time, as
    (plane, name, count, total, longest), from `_head_sql`'s rows."""
    hosts = int(rows["host"].nunique())
    head = {
        "events": int(rows["count"].sum()),
        "t0": rows["t0"].min(),
        "t1": rows["t1"].max(),
        "hosts": hosts,
        "step_lo": rows["step_lo"].min(),
        "step_hi": rows["step_hi"].max(),
    }
    plane = rows["plane"]
    if hosts > 1:  # as _plane labels it
        plane = rows["host"].fillna("").astype(str) + " " + plane
    ops = (
        rows.assign(plane=plane)
        .groupby(["plane", "name"], as_index=False)
        .agg(count=("count", "sum"), total=("total", "sum"), longest=("longest", "max"))
        .sort_values(["total", "plane", "name"], ascending=[False, True, True], kind="stable")
        .head(n)
        .reset_index(drop=True)
    )
    return head, ops


def _grid_sql(plane: str, t0: int, t1: int, bins: int = BINS, sub: int = SUB) -> str:
    """One pass for the activity and the timeline over `cells` equal buckets of [t0, t1] per
    line (BINS of them make one heatmap bin): the events and their busy ns inside a bucket,
    the few that cross a bucket's end (as (s, e) pairs, spread by `_busy`), and the longest
    event starting in it (what the timeline draws of the whole trace)."""
    cells, width = bins * sub, max(1.0, (t1 - t0) / bins) / sub
    clamp = f"least(greatest(CAST(floor((%s - {t0}) / {width}) AS BIGINT), 0), {cells - 1})"
    return f"""
        SELECT plane, line, b, n, inside, spans, dur_ns, ev.name AS name, ev.start_ns AS start_ns,
               ev.step AS step FROM (
            SELECT plane, line, b, count(*) AS n, sum(dur_ns) FILTER (WHERE b = b1) AS inside,
                   list({{'s': start_ns, 'e': start_ns + dur_ns}}) FILTER (WHERE b <> b1) AS spans,
                   max(dur_ns) AS dur_ns,
                   arg_max({{'name': name, 'start_ns': start_ns, 'step': step}}, dur_ns) AS ev
            FROM (SELECT {plane} AS plane, CAST(line AS VARCHAR) AS line, CAST(name AS VARCHAR) AS name,
                         start_ns, dur_ns, step, {clamp % "start_ns"} AS b,
                         {clamp % "(start_ns + dur_ns)"} AS b1 FROM trace_events)
            GROUP BY ALL)"""


def _busy(grid: pa.Table, t0: int, t1: int, bins: int = BINS, sub: int = SUB) -> pd.DataFrame:
    """Exact busy ns per (plane, line, bin b) from `_grid_sql`'s buckets (`sub` to a bin): what
    fell inside a bucket, plus each crossing event's overlap with every bin
    (figures.trace.busy_ns: prefix sums over its lane's starts and ends)."""
    cells = grid.select(["plane", "line", "b", "inside"]).to_pandas()
    inside = (
        cells.assign(b=cells["b"] // sub, busy=cells["inside"].fillna(0).astype(float))
        .groupby(["plane", "line", "b"], as_index=False)["busy"]
        .sum()
    )
    column = grid["spans"].combine_chunks()
    spans = pc.list_flatten(column)
    if not len(spans):
        return inside
    lane = cells.iloc[pc.list_parent_indices(column).to_numpy()][["plane", "line"]]
    s = pc.struct_field(spans, "s").to_numpy() - t0
    e = pc.struct_field(spans, "e").to_numpy() - t0
    edges = np.arange(bins + 1) * max(1.0, (t1 - t0) / bins)
    crossing = []
    for (plane, line), rows in (
        lane.reset_index(drop=True).groupby(["plane", "line"]).indices.items()
    ):
        spread = busy_ns(s[rows], e[rows], edges)
        hit = np.flatnonzero(spread)
        crossing.append(pd.DataFrame({"plane": plane, "line": line, "b": hit, "busy": spread[hit]}))
    both = pd.concat([inside, *crossing], ignore_index=True)
    return both.groupby(["plane", "line", "b"], as_index=False)["busy"].sum()


def _picks(grid: pa.Table, shown: int = SHOWN) -> pd.DataFrame:
    """The timeline's events of the whole trace: the `shown` longest of the buckets' longest
    (as `_timeline_sql` picks them), with how many events there are."""
    frame = grid.select(["plane", "line", "name", "start_ns", "dur_ns", "step", "n"]).to_pandas()
    picked = frame.nlargest(shown, "dur_ns", keep="first").drop(columns="n")
    return picked.assign(in_view=int(frame["n"].sum())).reset_index(drop=True)


def _timeline_sql(plane: str, w0: int, w1: int, shown: int, pixels: int = PIXELS) -> str:
    """The events in view; when more than `shown`, the longest of each line's pixel-wide
    buckets, then the `shown` longest of those (what a plot of that width can draw)."""
    view = (
        f"SELECT {plane} AS plane, CAST(line AS VARCHAR) AS line, CAST(name AS VARCHAR) AS name, start_ns, "
        f"dur_ns, step FROM trace_events WHERE start_ns <= {w1} AND start_ns + dur_ns >= {w0}"
    )
    px = max(1.0, (w1 - w0) / pixels)
    return f"""
        WITH v AS ({view}), n AS (SELECT count(*) AS in_view FROM v)
        SELECT v.*, n.in_view FROM v, n WHERE n.in_view <= {shown}
        UNION ALL
        SELECT plane, line, ev.name, ev.start_ns, dur_ns, ev.step, in_view FROM (
            SELECT plane, line, max(dur_ns) AS dur_ns,
                   arg_max({{'name': name, 'start_ns': start_ns, 'step': step}}, dur_ns) AS ev
            FROM v, n WHERE n.in_view > {shown}
            GROUP BY plane, line, CAST(floor((start_ns - {w0}) / {px}) AS BIGINT)
            ORDER BY dur_ns DESC LIMIT {shown}), n"""


def _timeline(frame: pd.DataFrame, t0: int, window: tuple[int, int], run_id: str) -> go.Figure:
    """The picked events of a window; drawn as an image of PIXELS columns when only some of
    the events in view are (figures.trace.trace_timeline)."""
    in_view = int(frame["in_view"].iloc[0]) if len(frame) else 0
    return trace_timeline(
        frame.drop(columns="in_view"), t0, window, in_view=in_view, pixels=PIXELS
    ).update_layout(uirevision=run_id)


def timeline(
    data: StoreData, run_id: str, window_ms: tuple[float, float] | None = None
) -> go.Figure:
    """The timeline of a window (ms since trace start), read from the store for that window:
    the whole trace's version is cached, a zoom re-reads the events in view."""
    view = overview(data, run_id)
    if not view["events"]:
        return empty_figure("No trace events in this run")
    if window_ms is None:
        return view["timeline"]
    t0 = view["t0"]
    window = (int(t0 + window_ms[0] * NS_PER_MS), int(t0 + window_ms[1] * NS_PER_MS))
    (frame,) = _query(data, run_id, [_timeline_sql(_plane(view["hosts"] > 1), *window, SHOWN)])
    return _timeline(frame, t0, window, run_id)


def _steps_text(lo: Any, hi: Any) -> str:
    if pd.isna(lo):
        return "no step markers"
    return f"{int(lo)}-{int(hi)}" if lo != hi else str(int(lo))


def overview(data: StoreData, run_id: str) -> dict[str, Any]:
    """The page's figures from two DuckDB passes over the parts on one connection (the
    summary and op table, then the activity and timeline over the bounds the first found; no
    events table in memory), cached per version of the table."""

    def build() -> dict[str, Any]:
        con = data.duckdb(run_id, ["trace_events"])
        try:
            head, ops = _head(con.sql(_head_sql()).df())
            if not head["events"]:
                return {"events": 0}
            t0, t1, multi = int(head["t0"]), int(head["t1"]), head["hosts"] > 1
            plane = _plane(multi)
            grid = con.sql(_grid_sql(plane, t0, t1)).to_arrow_table()
            shown = (  # every event when they are few, else the longest of each bucket's longest
                con.sql(_timeline_sql(plane, t0, t1, SHOWN)).df()
                if head["events"] <= SHOWN
                else _picks(grid)
            )
        finally:
            con.close()
        busy = _busy(grid, t0, t1)
        return {
            "events": head["events"],
            "lines": len(busy[["plane", "line"]].drop_duplicates()),
            "planes": int(busy["plane"].nunique()),
            "hosts": head["hosts"],
            "t0": t0,
            "span_ms": (t1 - t0) / NS_PER_MS,
            "steps": _steps_text(head["step_lo"], head["step_hi"]),
            "activity": activity_figure(busy, head["events"], t0, t1, BINS),
            "ops": ops_table(ops).round(3),
            "timeline": _timeline(shown, t0, (t0, t1), run_id),
        }

    return data.derived(run_id, "trace-overview", ("trace_events",), build)
