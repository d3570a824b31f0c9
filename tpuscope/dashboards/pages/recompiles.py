"""Recompiles: one row per compiled graph, with the shape diff against its predecessor."""

from __future__ import annotations

from typing import Any

import pandas as pd
from dash import Dash, Input, Output, State, dcc, html

from ..components import (
    NUM,
    findings_list,
    fmt_num,
    fmt_pct,
    graph,
    grid,
    is_live,
    live_timer,
    run_header,
    run_page,
    short_site,
    site_column,
    stat,
    stats_row,
)
from ..data import StoreData
from ..figures.common import NS_PER_S
from ..figures.steps import compile_bars

MAX_ROWS = 2000
COLUMNS: list[dict[str, Any]] = [
    {"field": "n", "headerName": "#", **NUM, "maxWidth": 80},
    {"field": "step", **NUM, "maxWidth": 90},
    {"field": "when", "headerName": "compile", "maxWidth": 130},
    {"field": "seconds", "headerName": "compile time (s)", **NUM, "maxWidth": 150},
    {"field": "hash", "headerName": "graph hash", "maxWidth": 170},
    {"field": "cause"},
    site_column("frame"),
    {"field": "diff", "headerName": "shape change vs predecessor", "minWidth": 260},
]


def compile_rows(ordered: pd.DataFrame, diffs: pd.DataFrame) -> pd.DataFrame:
    """The grid's rows: compiles in time order, first compile or recompile, seconds, shape diff."""
    if ordered.empty:
        return pd.DataFrame(columns=[c["field"] for c in COLUMNS])
    return pd.DataFrame(
        {
            "id": [str(i) for i in range(1, len(ordered) + 1)],
            "n": range(1, len(ordered) + 1),
            "step": ordered["step"].astype(int),
            "when": [
                "recompile" if again else "first compile"
                for again in ordered["recompile"].astype(bool)
            ],
            "seconds": (ordered["duration_ns"] / NS_PER_S).round(3),
            "hash": ordered["graph_hash"].fillna("").str.slice(0, 16),
            "cause": ordered["cause"].fillna("(unknown)"),
            "location": ordered["location"].fillna(""),
            "site": ordered["location"].map(short_site),
            "diff": diffs["diff"].reindex(ordered.index).fillna(""),
        }
    )


RETRACE_COLUMNS: list[dict[str, Any]] = [
    {"field": "step", **NUM, "maxWidth": 90},
    {"field": "function", "minWidth": 140},
    {"field": "kind", "headerName": "why", "maxWidth": 140},
    {"field": "arg", "maxWidth": 140},
    {"field": "change", "headerName": "before -> after", "minWidth": 220},
    site_column(),
]


def retrace_rows(retraces: pd.DataFrame) -> pd.DataFrame:
    """JAX's own cache-miss explanations, one row per difference."""
    if retraces.empty:
        return pd.DataFrame(columns=[c["field"] for c in RETRACE_COLUMNS])
    change = (
        retraces["before"].fillna("").astype(str)
        + " -> "
        + retraces["after"].fillna("").astype(str)
    )
    return (
        pd.DataFrame(
            {
                "step": retraces["step"],
                "function": retraces["function"].astype(str),
                "kind": retraces["kind"].astype(str),
                "arg": retraces["arg"].fillna("").astype(str),
                "change": change.where(
                    retraces["before"].notna() | retraces["after"].notna(),
                    retraces["detail"].fillna(""),
                ),
                "location": retraces["location"].fillna(retraces["defined_at"]).fillna(""),
            }
        )
        .sort_values("step")
        .assign(site=lambda f: f["location"].map(short_site))
    )


def ordered_compiles(data: StoreData, run_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Compiles in time order as the analysis judges them, with each one's shape change in
    words (StoreData.compiles_judged: the recompile rule's families, pick and diff)."""

    def build() -> tuple[pd.DataFrame, pd.DataFrame]:
        ordered, judged = data.compiles_judged(run_id)
        return ordered, judged.assign(
            diff=[
                diff_text(p, c)
                for p, c in zip(judged["predecessor"], judged["changes"], strict=True)
            ]
        )

    return data.derived(run_id, "ordered-compiles", ("compiles", "steps"), build)


def diff_text(predecessor: Any, changes: list[str]) -> str:
    """One line of the grid: the first changes, or why there are none."""
    if predecessor is None or predecessor != predecessor:
        return "first compile of this graph"
    if not changes:
        return "not recorded (no input shapes)"
    return "; ".join(changes[:4]) + (f"; ... ({len(changes)} changes)" if len(changes) > 4 else "")


def compile_detail(ordered: pd.DataFrame, diffs: pd.DataFrame, n: int) -> html.Div:
    """The full record of compile #n: hash, Python frames, sizes and the argument diff."""
    if not 1 <= n <= len(ordered):
        return html.Div()
    row = ordered.iloc[n - 1]
    diff = diffs.loc[n - 1]
    frames = [str(f) for f in (row["frames"] if row["frames"] is not None else [])]
    sizes = ", ".join(
        f"{k.replace('_gb', '')} {row[k] * 1024:.2f} MB"
        for k in ("input_gb", "output_gb", "intermediate_gb")
        if k in row and pd.notna(row[k])
    )
    return html.Div(
        className="card",
        id="compile-detail",
        children=[
            html.H4(
                f"Compile #{n} "
                + (f"at step {int(row['step'])}" if row["step"] >= 0 else "(step not recorded)")
                + f": {row['duration_ns'] / NS_PER_S:.3f} s"
            ),
            html.P([html.B("graph hash: "), html.Code(row["graph_hash"] or "-")]),
            html.P([html.B("cause: "), row["cause"] or "-"]),
            html.P(
                [
                    html.B("inputs / outputs: "),
                    f"{row['num_inputs']} / {row['num_outputs']}"
                    + (f"   ({sizes})" if sizes else ""),
                ]
            ),
            html.P(
                [
                    html.B("what changed: "),
                    *(
                        [html.Br(), *[html.Code(c) for c in diff["changes"]]]
                        if diff["changes"]
                        else [diff["diff"]]
                    ),
                ]
            ),
            html.Details(
                [
                    html.Summary(f"Python frames ({len(frames)})"),
                    html.Pre("\n".join(frames) or "-"),
                ],
                open=True,
            ),
        ],
    )


def _stats(data: StoreData, run_id: str, summary: dict[str, Any]) -> html.Div:
    compiles = data.table(run_id, "compiles")
    hashes = compiles["graph_hash"].nunique() if not compiles.empty else 0
    return stats_row(
        [
            stat("compiles", fmt_num(summary["compiles"]), "stat-compiles"),
            stat("recompiles", fmt_num(summary["recompiles"]), "stat-recompiles"),
            # the graphs the report's header and cards count (analyze/summary.distinct_graphs), and
            # their families (analyze/families: a recompile is a new graph of one family)
            stat(
                "graphs",
                fmt_num(summary.get("graphs") or int(hashes)),
                "stat-graphs",
                f"in {fmt_num(summary['graph_families'])} famil"
                + ("y" if summary["graph_families"] == 1 else "ies"),
            ),
            stat("compile time", fmt_num(summary["compile_s"], 2, "s"), "stat-compile-s"),
            stat(
                "recompiling",
                fmt_num(summary["recompile_s"], 2, "s"),
                "stat-recompile-s",
                f"{fmt_pct(summary['recompile_share'])} of the run's wall time",
            ),
        ]
    )


def _rows(data: StoreData, run_id: str) -> tuple[list[dict[str, Any]], str]:
    rows = compile_rows(*ordered_compiles(data, run_id))
    shown = rows.head(MAX_ROWS)
    note = (
        ""
        if len(shown) == len(rows)
        else f" (the first {MAX_ROWS:,} of {len(rows):,}; the chart has all)"
    )
    return shown.to_dict("records"), "Compiled graphs" + note


def _retraces(data: StoreData, run_id: str) -> list[Any]:
    retraces = data.table(run_id, "retraces")
    if retraces.empty:
        return []
    return [
        html.H3("Why JAX traced again"),
        grid("retraces-grid", retrace_rows(retraces), RETRACE_COLUMNS),
    ]


def _findings(data: StoreData, run_id: str, summary: dict[str, Any]) -> html.Div:
    found = data.live_findings(run_id) if is_live(summary) else data.findings(run_id)
    return findings_list(
        [f for f in found if f.rule == "recompile"],
        "No recompile or compile-time finding: graphs were reused after warm-up.",
    )


def layout(data: StoreData, run_id: str) -> html.Div:
    summary = data.summary(run_id)
    ordered, _ = ordered_compiles(data, run_id)
    rows, title = _rows(data, run_id)
    return run_page(
        "recompiles",
        run_id,
        summary,
        html.Div(_stats(data, run_id, summary), id="recompiles-stats"),
        live_timer("recompiles-live", is_live(summary)),
        html.Div(graph(compile_bars(ordered), "compile-bars"), className="panel"),
        html.H3(title, id="compiles-title"),
        html.P(
            "Select a row for its Python frames and the argument-by-argument shape change.",
            className="muted",
        ),
        grid(
            "compiles-grid",
            rows,
            COLUMNS,
            getRowId="params.data.id",
            dashGridOptions={
                "rowSelection": {
                    "mode": "singleRow",
                    "checkboxes": False,
                    "enableClickSelection": True,
                }
            },
        ),
        dcc.Store(id="recompiles-run", data=run_id),
        html.Div(id="compile-detail-slot"),
        html.Div(_retraces(data, run_id), id="retraces-slot"),
        html.H3("Related findings"),
        html.Div(_findings(data, run_id, summary), id="recompiles-findings"),
        head_id="recompiles-head",
    )


def register(app: Dash, data: StoreData) -> None:
    @app.callback(
        Output("compile-detail-slot", "children"),
        Input("compiles-grid", "selectedRows"),
        State("recompiles-run", "data"),
        prevent_initial_call=True,
    )
    def _detail(selected: list[dict[str, Any]] | None, run_id: str) -> Any:
        if not selected:
            return html.Div()
        return compile_detail(*ordered_compiles(data, run_id), int(selected[0]["n"]))

    @app.callback(
        Output("recompiles-head", "children"),
        Output("recompiles-stats", "children"),
        Output("compile-bars", "figure"),
        Output("compiles-title", "children"),
        Output("compiles-grid", "rowData"),
        Output("retraces-slot", "children"),
        Output("recompiles-findings", "children"),
        Output("recompiles-live", "disabled"),
        Input("recompiles-live", "n_intervals"),
        State("recompiles-run", "data"),
        prevent_initial_call=True,
    )
    def _live(_: int, run_id: str) -> tuple[Any, ...]:
        """A live run read again (new compiles appear in the chart and the grid, which keeps its
        selection: rows have stable ids); the tick that sees the run ended stops the timer."""
        summary = data.summary(run_id)
        rows, title = _rows(data, run_id)
        return (
            run_header(run_id, summary, "recompiles"),
            _stats(data, run_id, summary),
            compile_bars(ordered_compiles(data, run_id)[0]),
            title,
            rows,
            _retraces(data, run_id),
            _findings(data, run_id, summary),
            not is_live(summary),
        )
