"""Trace: the traced window (activity, timeline, time per op), with links to xprof and Perfetto.

Nothing here holds the run's events: dashboards/trace_view.py reads what the page shows with
DuckDB over the Parquet parts; a zoom re-reads the timeline of its window."""

from __future__ import annotations

from typing import Any

import pandas as pd
from dash import ALL, Dash, Input, Output, State, ctx, dcc, html, no_update

from tpuscope.report.device import log_dirs

from ..components import empty_state, fmt_num, graph, run_page, stat, stats_row
from ..data import StoreData
from ..figures.common import x_window
from ..trace_view import overview, timeline

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
# The op table's (column, header, digits; None: text). A plain table, not an AG Grid: the grid
# cost the Trace page's renderer ~0.25 s of its ~0.9 s of CPU (issue 30, session 11); its at
# most trace_view.OPS rows are sorted by the server when a header is clicked (`sorted_by`).
OPS_COLUMNS: list[tuple[str, str, int | None]] = [
    ("name", "name", None),
    ("plane", "plane", None),
    ("count", "count", 0),
    ("total_ms", "total (ms)", 3),
    ("mean_us", "mean (us)", 3),
    ("max_us", "max (us)", 3),
]


def ops_table_html(ops: pd.DataFrame, by: str = "total_ms", descending: bool = True) -> list[Any]:
    """The time per op, one row per op, sorted by `by` (most total time first, as ops_table
    orders it): every header is a button that sorts by its column (again: the other way)."""
    left = {"textAlign": "left"}
    ops = ops.sort_values(by, ascending=not descending, kind="stable")
    mark = " \u25be" if descending else " \u25b4"
    head = html.Thead(
        html.Tr(
            [
                html.Th(
                    html.Button(
                        title + (mark if col == by else ""),
                        id={"type": "trace-ops-sort", "column": col},
                        className="sort-header",
                        title=f"sort by {title}",
                    ),
                    style=left if digits is None else None,
                )
                for col, title, digits in OPS_COLUMNS
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
    return [head, html.Tbody(rows)]


def sorted_by(clicked: str, current: dict[str, Any]) -> dict[str, Any]:
    """The op table's order after a click on `clicked`'s header: numbers largest first and
    names A to Z, and the other way when the column was already the order."""
    if clicked == current.get("by"):
        return {"by": clicked, "descending": not current.get("descending", True)}
    text = dict((col, digits is None) for col, _, digits in OPS_COLUMNS)
    return {"by": clicked, "descending": not text[clicked]}


def links(data: StoreData, run_id: str) -> html.Div:
    """How to open the same trace in xprof/TensorBoard or Perfetto (downloads are local files)."""
    run_dir = data.run_dir(run_id)
    files = data.files(run_id, TRACE_FILES)
    xplanes = [rel for rel, f in files.items() if f.name.endswith(".xplane.pb")]
    others = [rel for rel in files if rel not in xplanes]
    items: list[Any] = []
    for logdir in log_dirs(run_dir) or sorted({files[x].parent for x in xplanes}):
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
    for rel in [*others, *xplanes]:
        items.append(
            html.Li(
                [
                    html.A(f"download {rel}", href=f"/download/{run_id}/{rel}"),
                    " (open .json.gz / .pftrace files at ui.perfetto.dev: Open trace file)"
                    if rel in others
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
        dcc.Store(id="trace-ops-order", data={"by": "total_ms", "descending": True}),
        html.Table(ops_table_html(view["ops"]), className="compare-table", id="trace-ops"),
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
        return timeline(data, run_id, window if isinstance(window, tuple) else None)  # or reset

    @app.callback(
        Output("trace-ops", "children"),
        Output("trace-ops-order", "data"),
        Input({"type": "trace-ops-sort", "column": ALL}, "n_clicks"),
        State("trace-ops-order", "data"),
        State("trace-run", "data"),
        prevent_initial_call=True,
    )
    def _sort_ops(clicks: list[int | None], order: dict[str, Any], run_id: str) -> Any:
        clicked = ctx.triggered_id
        ops = overview(data, run_id).get("ops")  # cached; none when the trace is gone since
        if not any(clicks) or not isinstance(clicked, dict) or ops is None:
            return no_update, no_update
        order = sorted_by(str(clicked["column"]), order)
        return ops_table_html(ops, order["by"], order["descending"]), order
