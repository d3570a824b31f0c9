"""Trace: the traced window, downsampled on the server, with links to xprof and Perfetto."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from dash import Dash, Input, Output, State, dcc, html, no_update

from tpuscope.report.device import log_dirs

from ..components import NUM, empty_state, fmt_num, graph, grid, run_page, stat, stats_row
from ..data import StoreData
from ..figures.common import NS_PER_MS, x_window
from ..figures.trace import activity_heatmap, lane_keys, top_ops, trace_timeline, with_host_planes

# Files in a run folder that other tools open; served only by exact match against this listing.
TRACE_FILES = ("**/*.xplane.pb", "**/*.pftrace", "**/*.perfetto-trace", "**/*.trace.json.gz", "**/*.trace.json",
               "**/*.perfetto.json.gz", "**/*.perfetto.json")
# The columns the page reads (8 of the table's 18): half the Parquet to decode.
COLUMNS = ("host", "plane", "line", "name", "start_ns", "dur_ns", "step", "hlo_op")
OPS_COLUMNS: list[dict[str, Any]] = [
    {"field": "name", "minWidth": 240}, {"field": "plane", "minWidth": 160},
    {"field": "count", **NUM}, {"field": "total_ms", "headerName": "total (ms)", **NUM, "sort": "desc"},
    {"field": "mean_us", "headerName": "mean (us)", **NUM}, {"field": "max_us", "headerName": "max (us)", **NUM},
]


def origin(events: pd.DataFrame) -> int:
    return int(events["start_ns"].min())


def trace_events(data: StoreData, run_id: str) -> pd.DataFrame:
    """The run's trace events, planes named per host on multi-host traces (cached)."""
    return data.derived(run_id, "trace-events", ("trace_events",),
                        lambda: with_host_planes(data.columns(run_id, "trace_events", list(COLUMNS))))


def timeline(data: StoreData, run_id: str, window_ms: tuple[float, float] | None = None) -> go.Figure:
    """The timeline of a window (ms since trace start); the whole trace's version is cached."""
    def build() -> go.Figure:
        events = trace_events(data, run_id)
        t0 = origin(events)
        window = None if window_ms is None else (int(t0 + window_ms[0] * NS_PER_MS),
                                                 int(t0 + window_ms[1] * NS_PER_MS))
        return trace_timeline(events, t0, window).update_layout(uirevision=run_id)

    if window_ms is not None:
        return build()
    return data.derived(run_id, "trace-timeline", ("trace_events",), build)


def overview(data: StoreData, run_id: str) -> dict[str, Any]:
    """Whole-trace figures and figures of the trace page, cached per version of the table."""
    def build() -> dict[str, Any]:
        events = trace_events(data, run_id)
        t0 = origin(events)
        steps = events["step"].dropna() if "step" in events else pd.Series(dtype=float)
        steps = steps[steps >= 0]  # -1: an event outside every step (a trace without step markers)
        return {
            "events": len(events), "lines": len(np.unique(lane_keys(events)[0])),
            "planes": int(events["plane"].nunique()),
            "span_ms": (int((events["start_ns"] + events["dur_ns"]).max()) - t0) / NS_PER_MS,
            "steps": (f"{int(steps.min())}-{int(steps.max())}" if steps.min() != steps.max() else str(int(steps.min())))
                     if len(steps) else "no step markers",
            "activity": activity_heatmap(events, t0), "ops": top_ops(events).round(3),
        }

    return data.derived(run_id, "trace-overview", ("trace_events",), build)


def links(data: StoreData, run_id: str) -> html.Div:
    """How to open the same trace in xprof/TensorBoard or Perfetto (downloads are local files)."""
    run_dir = data.run_dir(run_id)
    files = data.files(run_id, TRACE_FILES)
    xplanes = [f for f in files if f.name.endswith(".xplane.pb")]
    others = [f for f in files if f not in xplanes]
    items: list[Any] = []
    for logdir in log_dirs(run_dir) or sorted({x.parent for x in xplanes}):
        items.append(html.Li(["xprof: ", html.Code(f"xprof --logdir {logdir} --port 8791"),
                              " (then open http://localhost:8791), or TensorBoard: ",
                              html.Code(f"tensorboard --logdir {logdir}")]))
    for path in [*others, *xplanes]:
        rel = path.relative_to(run_dir).as_posix()
        items.append(html.Li([html.A(f"download {rel}", href=f"/download/{run_id}/{rel}"),
                              " (open .json.gz / .pftrace files at ui.perfetto.dev: Open trace file)"
                              if path in others else ""]))
    if not items:
        items.append(html.Li(["No trace file kept in the run folder; ", html.Code(f"tpuscope trace {run_id}"),
                              " writes a Perfetto-openable one."]))
    return html.Div([html.H3("Open it elsewhere"), html.Ul(items, id="trace-links")], className="panel")


def layout(data: StoreData, run_id: str) -> html.Div:
    events = trace_events(data, run_id)
    header = data.header(run_id)
    if events.empty:
        return run_page("trace", run_id, header, empty_state(
            "No trace in this run",
            "Capture a device trace for a window of steps with "
            "`tpuscope run --trace-steps 10:20 python train.py`, or import an xplane.pb with "
            "`tpuscope import PATH`.", ident="no-trace"), links(data, run_id))
    view = overview(data, run_id)
    return run_page(
        "trace", run_id, header,
        stats_row([
            stat("events", fmt_num(view["events"]), "stat-events"),
            stat("trace lines", fmt_num(view["lines"]), "stat-lines", f"{view['planes']} planes"),
            stat("traced window", fmt_num(view["span_ms"], 2, "ms"), "stat-span"),
            stat("steps traced", view["steps"], "stat-trace-steps"),
        ]),
        dcc.Store(id="trace-run", data=run_id),
        html.Div(graph(view["activity"], "trace-activity"), className="panel"),
        html.Div(className="panel", children=[
            graph(timeline(data, run_id), "trace-timeline"),
            html.P("Zoom (drag) to re-read the events in view from the store; double-click to reset.",
                   className="muted"),
        ]),
        html.H3("Time per op (whole trace)"),
        grid("trace-ops", view["ops"], OPS_COLUMNS),
        links(data, run_id),
    )


def register(app: Dash, data: StoreData) -> None:
    @app.callback(Output("trace-timeline", "figure"), Input("trace-timeline", "relayoutData"),
                  State("trace-run", "data"), prevent_initial_call=True)
    def _zoom(relayout: dict[str, Any] | None, run_id: str) -> Any:
        window = x_window(relayout)
        if window is None:
            return no_update
        return timeline(data, run_id, None if window == "reset" else window)
