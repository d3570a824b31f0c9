"""Zoo page (/zoo): the `tpuscope sweep` table, one row per model type x scenario, sortable and
filterable, each cell that ran linking to its run. Reads only the store (the sweep's records)."""

from __future__ import annotations

from typing import Any

from dash import html

from ..components import NUM, empty_state, grid
from ..data import StoreData

COLUMNS: list[dict[str, Any]] = [
    {
        "field": "link",
        "headerName": "cell",
        "cellRenderer": "RunLink",
        "minWidth": 200,
        "pinned": "left",
        "filter": "agTextColumnFilter",
    },
    {"field": "task", "headerName": "task", "minWidth": 90},
    {"field": "status", "headerName": "status", "minWidth": 110},
    {"field": "findings", "headerName": "findings", "minWidth": 160, "tooltipField": "findings"},
    {"field": "agrees", "headerName": "agrees with counters", "minWidth": 100},
    {"field": "compiles", "headerName": "compiles", **NUM, "minWidth": 85},
    {"field": "recompiles", "headerName": "recompiles", **NUM, "minWidth": 95},
    {
        "field": "fallback_ops",
        "headerName": "CPU fallbacks",
        "minWidth": 180,
        "tooltipField": "fallback_ops",
    },
    {
        "field": "tensorcore",
        "headerName": "TensorCore problems",
        "minWidth": 140,
        "tooltipField": "tensorcore",
    },
    {"field": "reads_per_step", "headerName": "value reads / step", **NUM, "minWidth": 90},
    {"field": "executions_per_step", "headerName": "executions / step", **NUM, "minWidth": 90},
    {"field": "step_ms", "headerName": "step p50 (ms)", **NUM, "minWidth": 90},
    {"field": "reason", "headerName": "reason", "minWidth": 260, "tooltipField": "reason"},
]


def layout(data: StoreData) -> html.Div:
    from tpuscope.zoo import table

    records = data.sweep_records()
    rows = []
    for row in map(table.row, records):
        row["link"] = (
            f"{row['model_type']}/{row['scenario']}"  # RunLink links it when run_id is set
        )
        row["agrees"] = {True: "yes", False: "NO: " + row["disagreements"], None: ""}[row["agrees"]]
        row["reason"] = " ".join(
            filter(None, [row["reason"], row["where"] and f"({row['where']})"])
        )
        rows.append(row)
    if not rows:
        body: Any = empty_state(
            "No zoo yet",
            f"The store {data.root} has no sweep. Run "
            f"`tpuscope sweep --store {data.root} --only llama`, then reload.",
            ident="no-zoo",
        )
        head = "no cells"
    else:
        s = table.summarize(records)
        head = (
            f"{s['disagreements']} disagreements in {s['judged']} judged cells; {s['cells']} cells of "
            f"{s['model_types']} model types; by status {s['by_status']}"
        )
        body = grid(
            "zoo-grid",
            rows,
            COLUMNS,
            getRowId="params.data.model_type + '/' + params.data.scenario",
        )
    return html.Div(
        className="page",
        id="page-zoo",
        children=[
            html.Div(
                className="page-head",
                children=[html.H2("Zoo"), html.Span(head, id="zoo-summary", className="muted")],
            ),
            body,
        ],
    )
