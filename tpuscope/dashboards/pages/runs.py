"""Runs page: every run in the store, sortable and filterable; pick two to compare."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, Patch, dcc, html

from ..components import NUM, empty_state, grid
from ..data import StoreData

COLUMNS: list[dict[str, Any]] = [
    {
        "field": "link",
        "headerName": "run",
        "cellRenderer": "RunLink",
        "minWidth": 190,
        "filter": "agTextColumnFilter",
    },
    {"field": "name", "headerName": "name", "minWidth": 140, "tooltipField": "name"},
    {
        "field": "started",
        "headerName": "started",
        "sort": "desc",
        "minWidth": 170,
        "cellDataType": "text",
        "filter": "agTextColumnFilter",
    },
    {"field": "backend", "headerName": "backend", "minWidth": 100},
    {"field": "device", "headerName": "device", "minWidth": 120, "tooltipField": "device"},
    {"field": "steps", "headerName": "steps", **NUM, "minWidth": 80},
    {"field": "p50_ms", "headerName": "step p50 (ms)", **NUM, "minWidth": 100},
    {"field": "recompiles", "headerName": "recompiles", **NUM, "minWidth": 110},
    {"field": "fallbacks", "headerName": "CPU fallback calls", **NUM, "minWidth": 105},
    {
        "headerName": "findings",
        "children": [
            {"field": "high", "headerName": "high", **NUM, "minWidth": 70},
            {"field": "medium", "headerName": "medium", **NUM, "minWidth": 85},
            {"field": "low", "headerName": "low", **NUM, "minWidth": 65},
        ],
    },
    {"field": "ended", "headerName": "ended", "minWidth": 100},
]
SELECTION = {
    "mode": "multiRow",
    "checkboxes": True,
    "headerCheckbox": False,
    "enableClickSelection": False,
}


def layout(data: StoreData) -> html.Div:
    rows = data.run_rows()
    for row in rows:  # the id, whole: names repeat (every bench run of a model has one name)
        row["link"] = str(row["run_id"])  # plain text: RunLink makes the link
    if not rows:
        body: Any = empty_state(
            "No runs yet",
            f"The store {data.root} has no runs. Make one with "
            "`tpuscope run python examples/train_transformer.py --store "
            f"{data.root}`, then reload this page.",
            ident="no-runs",
        )
    else:
        widest = max(
            len(str(row["run_id"])) for row in rows
        )  # every id whole (about 8 px a character)
        columns = [
            {**c, "minWidth": max(c["minWidth"], 8 * widest + 40)}
            if c.get("field") == "link"
            else c
            for c in COLUMNS
        ]
        body = grid(
            "runs-grid",
            rows,
            columns,
            height=None if len(rows) <= 15 else "calc(100vh - 230px)",
            getRowId="params.data.run_id",
            # every column rendered: scrolled sideways, none is left blank (a dozen columns)
            dashGridOptions={
                "rowSelection": SELECTION,
                "animateRows": False,
                "suppressColumnVirtualisation": True,
            },
        )
    return html.Div(
        className="page",
        id="page-runs",
        children=[
            html.Div(
                className="page-head",
                children=[
                    html.H2("Runs"),
                    html.Span(
                        f"{len(rows)} run{'s' if len(rows) != 1 else ''} in {data.root}",
                        id="runs-count",
                        className="muted",
                    ),
                ],
            ),
            html.Div(
                className="toolbar",
                children=[
                    dcc.Input(
                        id="runs-filter",
                        type="search",
                        placeholder="Filter runs (any column)",
                        debounce=False,
                        className="filter",
                    ),
                    dcc.Link(
                        "Select two runs to compare",
                        id="compare-link",
                        href="/",
                        className="button disabled",
                    ),
                ],
            ),
            body,
        ],
    )


def compare_target(selected: list[dict[str, Any]] | None) -> tuple[str, str, str]:
    """(href, label, class) of the compare button for the grid's selection."""
    ids = [row["run_id"] for row in selected or [] if row.get("run_id")]
    if len(ids) != 2:
        note = (
            "Select two runs to compare"
            if len(ids) < 2
            else f"{len(ids)} selected: pick exactly two"
        )
        return "/", note, "button disabled"
    return f"/compare/{ids[0]}/{ids[1]}", "Compare the two selected runs", "button"


def register(app: Dash) -> None:
    @app.callback(
        Output("compare-link", "href"),
        Output("compare-link", "children"),
        Output("compare-link", "className"),
        Input("runs-grid", "selectedRows"),
    )
    def _compare(selected: list[dict[str, Any]] | None) -> tuple[str, str, str]:
        return compare_target(selected)

    @app.callback(
        Output("runs-grid", "dashGridOptions"),
        Input("runs-filter", "value"),
        prevent_initial_call=True,
    )
    def _filter(text: str | None) -> Patch:
        patch = Patch()
        patch["quickFilterText"] = text or ""
        return patch
