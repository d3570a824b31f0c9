"""Run overview: headline figures, the step-time timeline, and the findings by cost."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from dash import Dash, Input, Output, State, dcc, html, no_update

from ..components import (
    findings_list,
    fmt_num,
    fmt_pct,
    graph,
    is_live,
    live_timer,
    run_header,
    stat,
    stats_row,
)
from ..data import StoreData
from ..figures.common import x_window
from ..figures.steps import step_timeline

MAX_POINTS = 4000
# What the step timeline draws, read without the other columns (steps' graph_hashes alone is a
# Python list per step): on a million steps, a third of the Parquet to decode.
TIMELINE_COLUMNS = {
    "steps": ["host", "rank", "step", "wall_ns"],
    "compiles": ["step", "duration_ns", "cause", "location", "graph_hash"],
    "fallbacks": ["step", "op", "count", "location"],
}


def timeline_tables(data: StoreData, run_id: str, name: str) -> Any:
    return data.columns(run_id, name, TIMELINE_COLUMNS[name], categories=name != "compiles")


def headline(summary: dict[str, Any]) -> html.Div:
    """The figures a user checks first; each value has an id the browser tests read."""
    sev = summary["findings_by_severity"]
    return stats_row([
        stat("steps", fmt_num(summary["steps"]), "stat-steps",
             f"{summary['steps_judged']:,} timed after {summary['warmup']} warm-up"),
        stat("step time p50", fmt_num(summary["step_time_p50_ms"], 2, "ms"), "stat-p50"),
        stat("step time p90", fmt_num(summary["step_time_p90_ms"], 2, "ms"), "stat-p90"),
        stat("compiles", fmt_num(summary["compiles"]), "stat-compiles",
             f"{fmt_num(summary['compile_s'], 2, 's')} in total"),
        stat("recompiles", fmt_num(summary["recompiles"]), "stat-recompiles",
             f"{fmt_num(summary['recompile_s'], 2, 's')}, "
             f"{fmt_pct(summary['recompile_share'])} of the timed steps' wall time"),
        stat("CPU fallback calls", fmt_num(summary["fallback_count"]), "stat-fallbacks",
             f"{summary['fallback_op_kinds']} distinct ops"),
        stat("host transfers / step", fmt_num(summary["transfers_from_device_per_step"], 2), "stat-transfers",
             "device to host, after warm-up"),
        stat("findings", fmt_num(summary["findings"]), "stat-findings",
             f"{sev['high']} high · {sev['medium']} medium · {sev['low']} low"),
    ])


def timeline_figure(data: StoreData, run_id: str, x_range: tuple[float, float] | None = None) -> go.Figure:
    """The step timeline; the whole-run version is cached until the run's tables change."""
    def build() -> go.Figure:
        fig = step_timeline(timeline_tables(data, run_id, "steps"), timeline_tables(data, run_id, "compiles"),
                            timeline_tables(data, run_id, "fallbacks"), int(data.summary(run_id)["warmup"]),
                            MAX_POINTS, x_range)
        return fig.update_layout(uirevision=run_id)

    if x_range is not None:
        return build()
    return data.derived(run_id, "step-timeline", ("steps", "compiles", "fallbacks"), build)


NO_FINDINGS = "The detectors found no recompile, fallback, host sync or shape churn after warm-up."


def findings(data: StoreData, run_id: str, summary: dict[str, Any]) -> html.Div:
    """The stored findings of an ended run; those of the analysis so far while it is live."""
    if is_live(summary):
        return findings_list(data.live_findings(run_id), NO_FINDINGS)
    return findings_list(data.findings(run_id), NO_FINDINGS)


def layout(data: StoreData, run_id: str) -> html.Div:
    summary = data.summary(run_id)
    live = is_live(summary)
    return html.Div(className="page", id="page-overview", children=[
        html.Div(run_header(run_id, summary, "overview"), id="overview-head"),
        html.Div(headline(summary), id="overview-stats"),
        dcc.Store(id="overview-run", data=run_id),
        live_timer("overview-live", live),
        html.Div(className="panel", children=[
            graph(timeline_figure(data, run_id), "step-timeline"),
            html.P("Hover a red triangle for the compile's cause and frame, an orange bar for the ops "
                   "that ran on the host. Zooming re-reads the steps in view at full detail."
                   + (" The run is in progress: this page updates by itself until it ends." if live else ""),
                   className="muted"),
        ]),
        html.H3("Findings, costliest first"),
        html.Div(findings(data, run_id, summary), id="overview-findings"),
    ])


def register(app: Dash, data: StoreData) -> None:
    @app.callback(Output("step-timeline", "figure"), Input("step-timeline", "relayoutData"),
                  State("overview-run", "data"), prevent_initial_call=True)
    def _zoom(relayout: dict[str, Any] | None, run_id: str) -> Any:
        window = x_window(relayout)
        if window is None or len(timeline_tables(data, run_id, "steps")) <= MAX_POINTS:
            return no_update
        return timeline_figure(data, run_id, None if window == "reset" else window)

    @app.callback(Output("overview-head", "children"), Output("overview-stats", "children"),
                  Output("step-timeline", "figure", allow_duplicate=True),
                  Output("overview-findings", "children"), Output("overview-live", "disabled"),
                  Input("overview-live", "n_intervals"), State("overview-run", "data"),
                  State("step-timeline", "relayoutData"), prevent_initial_call=True)
    def _live(_: int, run_id: str, relayout: dict[str, Any] | None) -> tuple[Any, ...]:
        """A live run read again: the figures, the timeline (in the user's zoom) and the findings;
        the tick that sees the run ended draws it once more and stops the timer."""
        summary = data.summary(run_id)
        window = x_window(relayout)
        zoomed = window not in (None, "reset") and len(data.table(run_id, "steps")) > MAX_POINTS
        figure = timeline_figure(data, run_id, window if zoomed else None)
        return (run_header(run_id, summary, "overview"), headline(summary), figure,
                findings(data, run_id, summary), not is_live(summary))
