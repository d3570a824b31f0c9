"""Trace: the traced window, with links to xprof and Perfetto.

Nothing here holds the run's events: DuckDB aggregates them over the Parquet parts (the
summary, exact busy time per line and bin, time per op) and picks what the timeline can
draw (the events in view, or the longest of each line's pixel-wide buckets), reading
only the columns each query names. A zoom runs the timeline's query again for its window."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
from dash import Dash, Input, Output, State, dcc, html, no_update

from tpuscope.report.device import log_dirs
from tpuscope.store import sql

from ..components import empty_state, fmt_num, graph, run_page, stat, stats_row
from ..data import StoreData
from ..figures.common import NS_PER_MS, empty_figure, x_window
from ..figures.trace import activity_figure, ops_table, trace_timeline

# Files in a run folder that other tools open; served only by exact match against this listing.
TRACE_FILES = (
    "**/*.xplane.pb",
    "**/*.pftrace",
    "**/*.perfetto-trace",
    "**/*.trace.json.gz",
    "**/*.trace.json",
    "**/*.perfetto.json.gz",
    "**/*.perfetto.json",
)
# The op table's (column, header, digits; None: text). A plain table, not an AG Grid: at most
# OPS rows in a fixed order need no sorting or filtering, and the grid cost the Trace page's
# renderer ~0.25 s of its ~0.9 s of CPU (issue 30, session 11).
OPS_COLUMNS: list[tuple[str, str, int | None]] = [
    ("name", "name", None),
    ("plane", "plane", None),
    ("count", "count", 0),
    ("total_ms", "total (ms)", 3),
    ("mean_us", "mean (us)", 3),
    ("max_us", "max (us)", 3),
]
BINS = 300  # the activity heatmap's columns
# Timeline buckets per line across the window: under the plot's width in pixels (at most ~1,150
# px: a 1,400 px page less the lane labels), so no bucket is narrower than a pixel; and the
# events drawn, at most: Plotly's cost in the browser grows with the points (3 per event), and
# half a visible event per pixel column per lane is what the eye resolves (issue 30).
PIXELS = 1000
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
    con = sql.views(data.run(run_id).loc, ["trace_events"])
    try:
        return [con.sql(statement).df() for statement in statements]
    finally:
        con.close()


def _summary_sql() -> str:
    """Counts and bounds; the planes and lines are counted from the activity's rows."""
    return (
        "SELECT count(*) AS events, min(start_ns) AS t0, max(start_ns + dur_ns) AS t1, "
        "count(DISTINCT host) AS hosts, min(step) FILTER (WHERE step >= 0) AS step_lo, "
        "max(step) FILTER (WHERE step >= 0) AS step_hi FROM trace_events"
    )


def _activity_sql(plane: str, t0: int, t1: int, bins: int = BINS) -> str:
    """Exact busy ns per (lane, bin): an event inside one bin adds its duration there; the few
    longer than a bin are spread over the bins they overlap (generate_series)."""
    width = max(1.0, (t1 - t0) / bins)
    clamp = f"least(greatest(CAST(floor((%s - {t0}) / {width}) AS BIGINT), 0), {bins - 1})"
    return f"""
        WITH e AS (SELECT {plane} AS plane, CAST(line AS VARCHAR) AS line, start_ns AS s, start_ns + dur_ns AS e,
                          {clamp % "start_ns"} AS b0, {clamp % "(start_ns + dur_ns)"} AS b1 FROM trace_events),
        parts AS (SELECT plane, line, b0 AS b, e - s AS busy FROM e WHERE b0 = b1
                  UNION ALL
                  SELECT plane, line, b, least(e, {t0} + (b + 1) * {width}) - greatest(s, {t0} + b * {width})
                  FROM (SELECT *, unnest(generate_series(b0, b1)) AS b FROM e WHERE b0 <> b1))
        SELECT plane, line, b, sum(busy) AS busy FROM parts GROUP BY ALL"""


def _ops_sql(plane: str, n: int = OPS) -> str:
    return (
        f"SELECT {plane} AS plane, CAST(name AS VARCHAR) AS name, count(*) AS count, sum(dur_ns) AS total, "
        f"max(dur_ns) AS longest FROM trace_events GROUP BY ALL ORDER BY total DESC, plane, name LIMIT {n}"
    )


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


def _timeline(
    frame: pd.DataFrame, t0: int, window: tuple[int, int] | None, run_id: str
) -> go.Figure:
    in_view = int(frame["in_view"].iloc[0]) if len(frame) else 0
    return trace_timeline(frame.drop(columns="in_view"), t0, window, in_view=in_view).update_layout(
        uirevision=run_id
    )


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
    """The page's figures, aggregated by DuckDB over the parts (no events table in memory),
    cached per version of the table."""

    def build() -> dict[str, Any]:
        (head,) = _query(data, run_id, [_summary_sql()])
        row = head.iloc[0]
        events = int(row["events"])
        if not events:
            return {"events": 0}
        t0, t1, multi = int(row["t0"]), int(row["t1"]), int(row["hosts"]) > 1
        plane = _plane(multi)
        busy, ops, shown = _query(
            data,
            run_id,
            [_activity_sql(plane, t0, t1), _ops_sql(plane), _timeline_sql(plane, t0, t1, SHOWN)],
        )
        return {
            "events": events,
            "lines": len(busy[["plane", "line"]].drop_duplicates()),
            "planes": int(busy["plane"].nunique()),
            "hosts": int(row["hosts"]),
            "t0": t0,
            "span_ms": (t1 - t0) / NS_PER_MS,
            "steps": _steps_text(row["step_lo"], row["step_hi"]),
            "activity": activity_figure(busy, events, t0, t1, BINS),
            "ops": ops_table(ops).round(3),
            "timeline": _timeline(shown, t0, None, run_id),
        }

    return data.derived(run_id, "trace-overview", ("trace_events",), build)


def ops_table_html(ops: pd.DataFrame) -> html.Table:
    """The time per op, most total time first (as ops_table orders it), one row per op."""
    left = {"textAlign": "left"}
    head = html.Thead(
        html.Tr(
            [
                html.Th(title, style=left if digits is None else None)
                for _, title, digits in OPS_COLUMNS
            ]
        )
    )
    rows = [
        html.Tr(
            [
                html.Td(str(row[col]), style=left)
                if digits is None
                else html.Td(fmt_num(row[col], digits))
                for col, _, digits in OPS_COLUMNS
            ]
        )
        for row in ops.to_dict("records")
    ]
    return html.Table([head, html.Tbody(rows)], className="compare-table", id="trace-ops")


def links(data: StoreData, run_id: str) -> html.Div:
    """How to open the same trace in xprof/TensorBoard or Perfetto (downloads are local files)."""
    run_dir = data.run_dir(run_id)
    files = data.files(run_id, TRACE_FILES)
    xplanes = [f for f in files if f.name.endswith(".xplane.pb")]
    others = [f for f in files if f not in xplanes]
    items: list[Any] = []
    for logdir in log_dirs(run_dir) or sorted({x.parent for x in xplanes}):
        items.append(
            html.Li(
                [
                    "xprof: ",
                    html.Code(f"xprof --logdir {logdir} --port 8791"),
                    " (then open http://localhost:8791), or TensorBoard: ",
                    html.Code(f"tensorboard --logdir {logdir}"),
                ]
            )
        )
    for path in [*others, *xplanes]:
        rel = path.relative_to(run_dir).as_posix()
        items.append(
            html.Li(
                [
                    html.A(f"download {rel}", href=f"/download/{run_id}/{rel}"),
                    " (open .json.gz / .pftrace files at ui.perfetto.dev: Open trace file)"
                    if path in others
                    else "",
                ]
            )
        )
    if not items:
        items.append(
            html.Li(
                [
                    "No trace file kept in the run folder; ",
                    html.Code(f"tpuscope trace {run_id}"),
                    " writes a Perfetto-openable one.",
                ]
            )
        )
    return html.Div(
        [html.H3("Open it elsewhere"), html.Ul(items, id="trace-links")], className="panel"
    )


def layout(data: StoreData, run_id: str) -> html.Div:
    view = overview(data, run_id)
    header = data.header(run_id)
    if not view["events"]:
        return run_page(
            "trace",
            run_id,
            header,
            empty_state(
                "No trace in this run",
                "Capture a device trace for a window of steps with "
                "`tpuscope run --trace-steps 10:20 python train.py`, or import an xplane.pb with "
                "`tpuscope import PATH`.",
                ident="no-trace",
            ),
            links(data, run_id),
        )
    return run_page(
        "trace",
        run_id,
        header,
        stats_row(
            [
                stat("events", fmt_num(view["events"]), "stat-events"),
                stat(
                    "trace lines", fmt_num(view["lines"]), "stat-lines", f"{view['planes']} planes"
                ),
                stat("traced window", fmt_num(view["span_ms"], 2, "ms"), "stat-span"),
                stat("steps traced", view["steps"], "stat-trace-steps"),
            ]
        ),
        dcc.Store(id="trace-run", data=run_id),
        html.Div(graph(view["activity"], "trace-activity"), className="panel"),
        html.Div(
            className="panel",
            children=[
                graph(timeline(data, run_id), "trace-timeline"),
                html.P(
                    "Zoom (drag) to re-read the events in view from the store; double-click to reset.",
                    className="muted",
                ),
            ],
        ),
        html.H3("Time per op (whole trace)"),
        ops_table_html(view["ops"]),
        links(data, run_id),
    )


def register(app: Dash, data: StoreData) -> None:
    @app.callback(
        Output("trace-timeline", "figure"),
        Input("trace-timeline", "relayoutData"),
        State("trace-run", "data"),
        prevent_initial_call=True,
    )
    def _zoom(relayout: dict[str, Any] | None, run_id: str) -> Any:
        window = x_window(relayout)
        if window is None:
            return no_update
        return timeline(data, run_id, None if window == "reset" else window)
