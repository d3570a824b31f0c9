"""CPU fallbacks, host syncs and JAX host callbacks: op x step heatmap, call sites, counts,
transfers per step."""

from __future__ import annotations

from typing import Any

import duckdb
import pandas as pd
from dash import html

from tpuscope.analyze.judge import VALUE_READ_OPS

from .. import aggregates
from ..components import (
    NUM,
    findings_list,
    fmt_num,
    graph,
    grid,
    run_page,
    short_site,
    site_column,
    stat,
    stats_row,
)
from ..data import StoreData
from ..figures.fallbacks import fallback_heatmap, fallback_matrix, transfers_timeline

COLUMNS: list[dict[str, Any]] = [
    {"field": "op", "minWidth": 200},
    site_column(),
    {"field": "count", "headerName": "calls", **NUM, "sort": "desc"},
    {"field": "steps", "headerName": "steps with calls", **NUM},
    {"field": "per_step", "headerName": "calls per step", **NUM},
    {"field": "first_step", "headerName": "first step", **NUM},
    {"field": "last_step", "headerName": "last step", **NUM},
]

SITE_COLUMNS: list[dict[str, Any]] = [
    {"field": "kind", "maxWidth": 150},
    {"field": "name", "headerName": "what", "minWidth": 140},
    site_column(),
    {"field": "count", "headerName": "calls", **NUM, "sort": "desc"},
    {"field": "steps", "headerName": "steps with calls", **NUM},
    {"field": "per_step", "headerName": "calls per step", **NUM},
]


def sync_sites(call_sites: pd.DataFrame) -> pd.DataFrame:
    """Host syncs (.item(), print, device_get, ...) and eager dispatches per call site."""
    if call_sites.empty:
        return pd.DataFrame(columns=[c["field"] for c in SITE_COLUMNS] + ["location"])
    frame = call_sites.assign(location=call_sites["location"].fillna(aggregates.UNPLACED))
    sites = frame.groupby(["kind", "name", "location"], as_index=False).agg(
        count=("count", "sum"), steps=("step", "nunique")
    )
    sites["per_step"] = (sites["count"] / sites["steps"]).round(2)
    sites["site"] = sites["location"].map(short_site)
    return sites.sort_values("count", ascending=False)


def fallback_sites(fallbacks: pd.DataFrame) -> pd.DataFrame:
    """One row per (op, call site): calls, steps with calls, calls per such step, first/last step."""
    if fallbacks.empty:
        return pd.DataFrame(columns=[c["field"] for c in COLUMNS] + ["location"])
    fallbacks = fallbacks[
        ~fallbacks["op"].astype(str).isin(VALUE_READ_OPS)
    ]  # host syncs: counted apart
    if fallbacks.empty:
        return pd.DataFrame(columns=[c["field"] for c in COLUMNS] + ["location"])
    frame = fallbacks.assign(location=fallbacks["location"].fillna(aggregates.UNPLACED))
    sites = frame.groupby(["op", "location"], as_index=False).agg(
        count=("count", "sum"),
        steps=("step", "nunique"),
        first_step=("step", "min"),
        last_step=("step", "max"),
    )
    return site_rows(sites)


def site_rows(sites: pd.DataFrame) -> pd.DataFrame:
    """The grid's rows from per-(op, site) totals: calls per step, the short site, busiest first."""
    if sites.empty:
        return pd.DataFrame(columns=[c["field"] for c in COLUMNS] + ["location"])
    sites = sites.copy()
    whole_run = (
        sites["last_step"] < 0 if "last_step" in sites else pd.Series(False, index=sites.index)
    )
    sites["per_step"] = (
        (sites["count"] / sites["steps"]).round(2).mask(whole_run)
    )  # imported totals: no steps
    for col in ("first_step", "last_step", "steps"):
        if col in sites:
            sites[col] = sites[col].astype("Int64").mask(whole_run)
    sites["site"] = sites["location"].map(short_site)
    return sites.sort_values("count", ascending=False)


TRACING = (
    "call sites are traced only in the few steps after an op or a host read first shows up "
    "(tracing every torch call would slow every step: collect/xla/fallback_sites.py); the other "
    "steps' calls are counted per step, their call sites not taken"
)


def traced_note(sites: pd.DataFrame, call_sites: pd.DataFrame, value_reads: int) -> html.P | None:
    """How many of the calls the tables count have their call site, and why the others have none."""
    total = int(sites["count"].sum()) if not sites.empty else 0
    placed = int(sites.loc[sites["location"] != aggregates.UNPLACED, "count"].sum()) if total else 0
    reads = (
        call_sites[call_sites["name"].astype(str) == "item"] if not call_sites.empty else call_sites
    )
    traced_reads = int(reads["count"].sum()) if not reads.empty else 0
    parts = []
    if placed < total:
        parts.append(f"{placed:,} of {total:,} CPU fallback calls have their call site")
    if value_reads and traced_reads < value_reads:
        parts.append(f"{traced_reads:,} of {value_reads:,} .item() reads were traced to theirs")
    if not parts:
        return None
    return html.P("; ".join(parts) + ": " + TRACING + ".", className="muted", id="traced-note")


def fallback_views(data: StoreData, run_id: str) -> tuple[pd.DataFrame, tuple[pd.DataFrame, int]]:
    """The call-site rows and the heatmap's (matrix, width), aggregated by DuckDB and cached
    until the table changes; a part DuckDB cannot read makes them come from the table read
    whole (which skips and names it)."""

    def compute() -> tuple[pd.DataFrame, tuple[pd.DataFrame, int]]:
        try:
            return site_rows(aggregates.fallback_sites(data, run_id)), aggregates.fallback_matrix(
                data, run_id
            )
        except duckdb.Error:
            rows = data.columns(run_id, "fallbacks", ["step", "op", "count", "location"])
            return fallback_sites(rows), (
                fallback_matrix(rows) if not rows.empty else (pd.DataFrame(), 1)
            )

    return data.derived(run_id, "fallback-views", ("fallbacks",), compute)


def layout(data: StoreData, run_id: str) -> html.Div:
    summary = data.summary(run_id)
    sites, binned = fallback_views(data, run_id)
    steps = data.columns(run_id, "steps", ["step", "transfers_from_device"])  # 2 of its 15 columns
    call_sites = data.table(run_id, "call_sites")
    transfers = int(steps["transfers_from_device"].sum()) if not steps.empty else 0
    findings = [
        f for f in data.findings(run_id) if f.rule in ("cpu_fallback", "host_sync", "host_callback")
    ]
    per_step = summary["fallback_count"] / summary["steps"] if summary["steps"] else None
    return run_page(
        "fallbacks",
        run_id,
        summary,
        stats_row(
            [
                stat(
                    "CPU fallback calls",
                    fmt_num(summary["fallback_count"]),
                    "stat-fallbacks",
                    f"{fmt_num(per_step, 2)} per step (value reads not included)",
                ),
                stat("distinct ops", fmt_num(summary["fallback_op_kinds"]), "stat-fallback-ops"),
                stat(
                    "scalar reads (.item())",
                    fmt_num(summary["value_reads"]),
                    "stat-syncs",
                    "aten::_local_scalar_dense calls",
                ),
                stat(
                    "device-to-host transfers",
                    fmt_num(transfers),
                    "stat-transfers",
                    f"{fmt_num(summary['transfers_from_device_per_step'], 2)} per timed step",
                ),
            ]
        ),
        html.Div(
            graph(fallback_heatmap(None, binned=binned), "fallback-heatmap"), className="panel"
        ),
        html.H3("Call sites"),
        *[n for n in [traced_note(sites, call_sites, summary["value_reads"])] if n is not None],
        grid("fallback-sites", sites, COLUMNS),
        *(
            [
                html.H3("Host syncs by call site"),
                grid("sync-sites", sync_sites(call_sites), SITE_COLUMNS),
            ]
            if not call_sites.empty
            else []
        ),
        html.Div(
            graph(transfers_timeline(steps, summary["warmup"]), "transfers-timeline"),
            className="panel",
        ),
        html.H3("Related findings"),
        findings_list(findings, "No cpu_fallback or host_sync finding in this run."),
    )
