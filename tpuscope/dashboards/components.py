"""Shared page pieces: number formats, stat tiles, finding cards, grids, empty states."""

from __future__ import annotations

import json
from typing import Any

import dash_ag_grid as dag
import pandas as pd
from dash import dcc, html

from tpuscope.report.console import where
from tpuscope.schema import Finding, plain_evidence

MAX_EVIDENCE = 4000
GRAPH_CONFIG = {"displaylogo": False, "responsive": True}
NUM = {"type": "rightAligned", "filter": "agNumberColumnFilter"}  # a grid column of numbers
RUN_TABS = (
    ("overview", "Overview", ""),
    ("recompiles", "Recompiles", "/recompiles"),
    ("fallbacks", "Fallbacks & host syncs", "/fallbacks"),
    ("churn", "Shape churn", "/churn"),
    ("tensorcore", "TensorCore", "/tensorcore"),
    ("trace", "Trace", "/trace"),
    ("hosts", "Hosts", "/hosts"),
)


def fmt_num(value: Any, digits: int = 2, unit: str = "") -> str:
    """'-' for missing values, thousands separators otherwise (the browser tests read these)."""
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, int) or (isinstance(value, float) and digits == 0):
        text = f"{value:,.0f}"
    else:
        text = f"{value:,.{digits}f}"
    return f"{text} {unit}".rstrip() if unit else text


def fmt_pct(share: Any) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def stat(label: str, value: str, ident: str, note: str | None = None) -> html.Div:
    """A headline tile; `ident` gives the value a stable id for tests and scripts."""
    return html.Div(
        className="stat",
        children=[
            html.Div(label, className="stat-label"),
            html.Div(value, id=ident, className="stat-value"),
            html.Div(note, className="stat-note") if note else None,
        ],
    )


def stats_row(children: list[Any]) -> html.Div:
    return html.Div(children, className="stats")


def empty_state(title: str, body: str, ident: str = "empty-state") -> html.Div:
    """What to show instead of a blank page: why there is no data and how to get it."""
    return html.Div(className="empty", id=ident, children=[html.H3(title), html.P(body)])


def error_page(message: str) -> html.Div:
    return html.Div(
        className="page",
        children=[
            html.H2("Not found"),
            html.P(message, id="error-message", className="error"),
            dcc.Link("Back to all runs", href="/"),
        ],
    )


def graph(figure: Any, ident: str) -> dcc.Graph:
    return dcc.Graph(id=ident, figure=figure, config=GRAPH_CONFIG, className="graph")


def short_site(location: Any) -> str:
    """'/long/path/to/train.py:57' -> 'train.py:57' for narrow grid cells (the full path is the tooltip)."""
    return location.rsplit("/", 1)[-1] if isinstance(location, str) else ""


def site_column(header: str = "call site", width: int = 180) -> dict[str, Any]:
    return {"field": "site", "headerName": header, "tooltipField": "location", "minWidth": width}


def severity_badge(severity: str) -> html.Span:
    return html.Span(severity, className=f"badge sev-{severity}")


def compact(value: Any, items: int = 20) -> Any:
    """Evidence for display: long lists cut to their first items (a storm lists 100k steps)."""
    if isinstance(value, dict):
        return {k: compact(v, items) for k, v in value.items()}
    if isinstance(value, list | tuple):
        head = [compact(v, items) for v in value[:items]]
        return head + [f"... {len(value) - items:,} more"] if len(value) > items else head
    return value


def finding_card(finding: Finding, index: int) -> html.Div:
    """One finding: what, where, what it costs, the fix, and the evidence on demand."""
    written = plain_evidence(finding.evidence)  # the rule's record as the JSON it writes
    evidence = json.dumps(compact(written), indent=1, default=str) if written else None
    if evidence and len(evidence) > MAX_EVIDENCE:  # a storm's evidence can be megabytes
        evidence = (
            evidence[:MAX_EVIDENCE] + f"\n... ({len(evidence) - MAX_EVIDENCE:,} more characters: "
            "tpuscope show RUN --json has all of it)"
        )
    return html.Div(
        className=f"card finding sev-border-{finding.severity}",
        id=f"finding-{index}",
        children=[
            html.Div(
                className="card-head",
                children=[
                    severity_badge(finding.severity),
                    html.Span(finding.rule, className="rule"),
                    html.Span(f"~{finding.cost_s:,.2f} s lost", className="cost"),
                ],
            ),
            html.H4(finding.title),
            html.P(finding.detail),
            html.P([html.B("Fix: "), finding.fix], className="fix"),
            html.P([html.B("Where: "), html.Code(where(finding.location))], className="where")
            if finding.location
            else None,
            html.P([html.B("Steps: "), finding.steps_text]) if finding.step_runs else None,
            html.Details([html.Summary("Evidence"), html.Pre(evidence)]) if evidence else None,
        ],
    )


def findings_list(findings: list[Finding], empty: str) -> html.Div:
    if not findings:
        return html.Div(empty_state("No findings", empty, ident="no-findings"))
    return html.Div([finding_card(f, i) for i, f in enumerate(findings)], className="findings")


def grid(
    ident: str,
    frame: pd.DataFrame | list[dict[str, Any]],
    columns: list[dict[str, Any]],
    height: int | str | None = None,
    **kwargs: Any,
) -> dag.AgGrid:
    """A sortable, filterable AG Grid over plain records (the grid's JS is served locally);
    `height` in px, or a CSS length ("calc(100vh - 220px)": as tall as the window lets it)."""
    rows = frame.to_dict("records") if isinstance(frame, pd.DataFrame) else frame
    n = len(rows)
    options: dict[str, Any] = {"enableBrowserTooltips": True}
    if height is None and n <= 15:
        options["domLayout"] = "autoHeight"
    options.update(kwargs.pop("dashGridOptions", {}))
    tall = height if isinstance(height, str) else f"{height or min(600, 60 + 42 * max(n, 3))}px"
    style = {"height": tall, "minHeight": "400px"} if "domLayout" not in options else {}
    return dag.AgGrid(
        id=ident,
        rowData=rows,
        columnDefs=columns,
        defaultColDef={
            "sortable": True,
            "filter": True,
            "floatingFilter": True,
            "suppressHeaderFilterButton": True,
            "resizable": True,
            "minWidth": 80,
            "wrapHeaderText": True,
            "autoHeaderHeight": True,
        },
        columnSize="responsiveSizeToFit",
        dashGridOptions=options,
        style=style,
        className="grid",
        **kwargs,
    )


LIVE_MS = 2000  # how often a page of a live run reads it again (the program flushes every 2 s)
LIVE_STATUS = (
    "running"  # meta status of a run in progress (store/liveness.py: launcher still alive)
)


def is_live(summary: dict[str, Any]) -> bool:
    """A run still in progress: its launcher is alive and has not recorded an end."""
    return summary.get("ended") == LIVE_STATUS


def live_badge(live: bool, ident: str = "live-badge") -> html.Span | None:
    return (
        html.Span(
            "live",
            id=ident,
            className="badge live",
            title="in progress: this page updates by itself until the run ends",
        )
        if live
        else None
    )


def live_timer(ident: str, live: bool) -> dcc.Interval:
    """Ticks while the run is live; the page's callback turns it off when the run has ended."""
    return dcc.Interval(id=ident, interval=LIVE_MS, disabled=not live)


def run_header(run_id: str, summary: dict[str, Any], active: str) -> html.Div:
    """Title (with the "live" mark while the run is in progress), one-line identity of the
    run, and the tabs of its pages."""
    base = f"/run/{run_id}"
    tabs = [
        dcc.Link(
            label,
            href=base + suffix,
            id=f"tab-{key}",
            className="tab active" if key == active else "tab",
        )
        for key, label, suffix in RUN_TABS
    ]
    identity = (
        f"{summary.get('backend') or '-'} on {summary.get('device_kind') or '-'} · "
        f"{summary.get('ended') or '-'} · {summary.get('command') or ''}"
    )
    return html.Div(
        className="run-header",
        children=[
            html.H2([summary.get("name") or run_id, live_badge(is_live(summary))], id="run-title"),
            html.Div(
                [html.Code(run_id, id="run-id"), html.Span(" · " + identity)],
                className="run-identity",
            ),
            html.Nav(tabs, className="tabs"),
        ],
    )


def run_page(
    tab: str, run_id: str, summary: dict[str, Any], *body: Any, head_id: str | None = None
) -> html.Div:
    """One page of a run: the page element (id `page-<tab>`, which tests and the benchmark wait
    for), the run's header with its tabs (in a `head_id` element when a callback redraws it),
    then the page's own content; every run page is built by this one function."""
    header = run_header(run_id, summary, tab)
    return html.Div(
        className="page",
        id=f"page-{tab}",
        children=[html.Div(header, id=head_id) if head_id else header, *body],
    )
