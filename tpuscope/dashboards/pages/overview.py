"""Run overview: headline figures, the step-time timeline, and the findings by cost."""

from __future__ import annotations

from typing import Any

import duckdb
import plotly.graph_objects as go
from dash import Dash, Input, Output, State, dcc, html, no_update

from .. import series
from ..components import (
    findings_list,
    fmt_num,
    fmt_pct,
    graph,
    is_live,
    live_timer,
    run_header,
    run_page,
    stat,
    stats_row,
)
from ..data import StoreData
from ..figures.common import x_window
from ..figures.steps import step_timeline

MAX_POINTS = 4000
# What the step timeline draws when its tables must be read whole (a part DuckDB cannot read:
# the whole-table reader skips and names it), without the other columns.
TIMELINE_COLUMNS = {
    "steps": ["host", "rank", "step", "wall_ns"],
    "compiles": series.COMPILE_COLUMNS,
    "fallbacks": series.FALLBACK_COLUMNS,
}


def timeline_tables(data: StoreData, run_id: str, name: str) -> Any:
    return data.columns(run_id, name, TIMELINE_COLUMNS[name], categories=name != "compiles")


def step_rows(data: StoreData, run_id: str) -> int:
    """How many steps rows the run has (whether a zoom must re-read at full detail)."""
    return data.derived(run_id, "step-rows", ("steps",), lambda: series.step_rows(data, run_id))


def _steps_stat(summary: dict[str, Any]) -> html.Div:
    """Steps, or in words what an import recorded of them (never "0" for "not recorded")."""
    if summary["steps"] or summary.get("status") != "imported":
        return stat(
            "steps",
            fmt_num(summary["steps"]),
            "stat-steps",
            f"{summary['steps_judged']:,} timed after {summary['warmup']} warm-up",
        )
    markers = summary.get("step_markers")
    return stat(
        "steps",
        fmt_num(markers) if markers else "not recorded",
        "stat-steps",
        "step markers in the imported files, no time per step"
        if markers
        else "the imported files have no step markers",
    )


def headline(summary: dict[str, Any]) -> html.Div:
    """The figures a user checks first; each value has an id the browser tests read."""
    sev = summary["findings_by_severity"]
    timed = summary["step_time_p50_ms"] is not None
    return stats_row(
        [
            _steps_stat(summary),
            stat(
                "step time p50",
                fmt_num(summary["step_time_p50_ms"], 2, "ms") if timed else "not recorded",
                "stat-p50",
            ),
            stat(
                "step time p90",
                fmt_num(summary["step_time_p90_ms"], 2, "ms") if timed else "not recorded",
                "stat-p90",
            ),
            stat(
                "compiles",
                fmt_num(summary["compiles"]),
                "stat-compiles",
                f"{fmt_num(summary['compile_s'], 2, 's')} in total",
            ),
            stat(
                "recompiles",
                fmt_num(summary["recompiles"]),
                "stat-recompiles",
                f"{fmt_num(summary['recompile_s'], 2, 's')}, "
                f"{fmt_pct(summary['recompile_share'])} of the run's wall time",
            ),
            stat(
                "CPU fallback calls",
                fmt_num(summary["fallback_count"]),
                "stat-fallbacks",
                f"{summary['fallback_op_kinds']} distinct ops",
            ),
            stat(
                "host transfers / step",
                fmt_num(summary["transfers_from_device_per_step"], 2),
                "stat-transfers",
                "device to host, after warm-up",
            ),
            stat(
                "findings",
                fmt_num(summary["findings"]),
                "stat-findings",
                f"{sev['high']} high · {sev['medium']} medium · {sev['low']} low",
            ),
        ]
    )


def timeline_figure(
    data: StoreData, run_id: str, x_range: tuple[float, float] | None = None
) -> go.Figure:
    """The step timeline, reduced by DuckDB to what it draws (dashboards.series); the
    whole-run version is cached until the run's tables change."""

    def build() -> go.Figure:
        warmup = int(data.summary(run_id)["warmup"])
        try:
            line = series.read_timeline(data, run_id, MAX_POINTS, x_range)
        except duckdb.Error:  # a damaged part: read the tables whole, without it
            steps, compiles, fallbacks = (
                timeline_tables(data, run_id, n) for n in ("steps", "compiles", "fallbacks")
            )
            fig = step_timeline(steps, compiles, fallbacks, warmup, MAX_POINTS, x_range)
        else:
            fig = step_timeline(
                line.steps,
                line.compiles,
                line.fallbacks,
                warmup,
                MAX_POINTS,
                x_range,
                step_walls=line.step_walls,
                slowest_of=line.slowest_of,
            )
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
    return run_page(
        "overview",
        run_id,
        summary,
        html.Div(headline(summary), id="overview-stats"),
        dcc.Store(id="overview-run", data=run_id),
        live_timer("overview-live", live),
        html.Div(
            className="panel",
            children=[
                graph(timeline_figure(data, run_id), "step-timeline"),
                html.P(
                    "Hover a red triangle for the compile's cause and frame, an orange bar for the ops "
                    "that ran on the host. Zooming re-reads the steps in view at full detail."
                    + (
                        " The run is in progress: this page updates by itself until it ends."
                        if live
                        else ""
                    ),
                    className="muted",
                ),
            ],
        ),
        html.H3("Findings, costliest first"),
        html.Div(findings(data, run_id, summary), id="overview-findings"),
        head_id="overview-head",
    )


def register(app: Dash, data: StoreData) -> None:
    @app.callback(
        Output("step-timeline", "figure"),
        Input("step-timeline", "relayoutData"),
        State("overview-run", "data"),
        prevent_initial_call=True,
    )
    def _zoom(relayout: dict[str, Any] | None, run_id: str) -> Any:
        window = x_window(relayout)
        if window is None or step_rows(data, run_id) <= MAX_POINTS:
            return no_update
        return timeline_figure(data, run_id, window if isinstance(window, tuple) else None)

    @app.callback(
        Output("overview-head", "children"),
        Output("overview-stats", "children"),
        Output("step-timeline", "figure", allow_duplicate=True),
        Output("overview-findings", "children"),
        Output("overview-live", "disabled"),
        Input("overview-live", "n_intervals"),
        State("overview-run", "data"),
        State("step-timeline", "relayoutData"),
        prevent_initial_call=True,
    )
    def _live(_: int, run_id: str, relayout: dict[str, Any] | None) -> tuple[Any, ...]:
        """A live run read again: the figures, the timeline (in the user's zoom) and the findings;
        the tick that sees the run ended draws it once more and stops the timer."""
        summary = data.summary(run_id)
        window = x_window(relayout)
        if not isinstance(window, tuple) or step_rows(data, run_id) <= MAX_POINTS:
            window = None  # the whole run: not zoomed, or every step is drawn anyway
        figure = timeline_figure(data, run_id, window)
        return (
            run_header(run_id, summary, "overview"),
            headline(summary),
            figure,
            findings(data, run_id, summary),
            not is_live(summary),
        )
