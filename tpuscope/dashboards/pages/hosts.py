"""Hosts of a pod run: step time per host x step, the stragglers, and what hosts did differently."""

from __future__ import annotations

from typing import Any

import pandas as pd
from dash import html

from tpuscope.analyze.contract import RankDivergenceEvidence, StragglerEvidence

from ..components import (
    NUM,
    empty_state,
    findings_list,
    fmt_num,
    graph,
    grid,
    run_page,
    stat,
    stats_row,
)
from ..data import StoreData
from ..figures.hosts import host_heatmap

HOST_COLUMNS: list[dict[str, Any]] = [
    {"field": "host", "minWidth": 120},
    {"field": "processes", **NUM},
    {"field": "steps", **NUM},
    {"field": "p50_ms", "headerName": "p50 step (ms)", **NUM},
    {"field": "excess_ms", "headerName": "vs pod median (ms)", **NUM, "sort": "desc"},
    {"field": "straggler"},
    {"field": "status", "headerName": "ended", "minWidth": 160},
    {"field": "rules", "headerName": "findings naming it", "minWidth": 200},
]
DIVERGENCE_COLUMNS: list[dict[str, Any]] = [
    {"field": "site", "headerName": "user's line", "minWidth": 160},
    {"field": "kind", "maxWidth": 130},
    {"field": "what", "minWidth": 240},
    {"field": "hosts", "headerName": "on hosts", "minWidth": 140},
    {"field": "missing", "headerName": "not on", "minWidth": 140},
    {"field": "first_step", "headerName": "first step", **NUM},
]


def host_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary's hosts as grid rows (plain JSON types, rounded)."""
    return [
        {
            **h,
            "p50_ms": round(h["p50_ms"], 3) if h.get("p50_ms") is not None else None,
            "excess_ms": round(h["excess_ms"], 3) if h.get("excess_ms") is not None else None,
            "rules": ", ".join(h.get("rules") or []),
            "straggler": "yes" if h.get("straggler") else "",
        }
        for h in summary.get("hosts") or []
    ]


def divergence_rows(findings: list[Any]) -> pd.DataFrame:
    """One row per (line, kind, graph or site) of the rank_divergence findings."""
    rows = []
    for finding in findings:
        ev = RankDivergenceEvidence.of(finding)
        items = ev.items or []
        site = (finding.location or "-").rsplit("/", 1)[-1]
        seen = set()
        for item in items:
            key = (item["kind"], item["key"])
            if key in seen:
                continue
            seen.add(key)
            rows.append(
                {
                    "site": site,
                    "kind": item["kind"],
                    "what": item["key"],
                    "hosts": ", ".join(ev.present_on or []),
                    "missing": ", ".join(ev.missing_on or []),
                    "first_step": min(i["step"] for i in items if (i["kind"], i["key"]) == key),
                }
            )
    return pd.DataFrame(rows, columns=[c["field"] for c in DIVERGENCE_COLUMNS])


def layout(data: StoreData, run_id: str) -> html.Div:
    summary = data.summary(run_id)
    hosts = summary.get("hosts") or []
    if not hosts:
        return run_page(
            "hosts",
            run_id,
            summary,
            empty_state(
                "One host",
                "This run was written by one host. Run the same script on every host of a "
                "pod with `tpuscope run --run-id ID` to compare them here (docs/pods.md).",
                ident="no-hosts",
            ),
        )
    findings = data.findings(run_id)
    stragglers = [f for f in findings if f.rule == "straggler"]
    divergent = [f for f in findings if f.rule == "rank_divergence"]
    heatmap = host_heatmap(summary.get("host_steps"))  # from the analysis: no step is read here
    pod_p50 = next((StragglerEvidence.of(f).pod_p50_ms for f in stragglers), None)
    return run_page(
        "hosts",
        run_id,
        summary,
        stats_row(
            [
                stat(
                    "hosts",
                    fmt_num(len(hosts)),
                    "stat-hosts",
                    ", ".join(sorted({str(h.get("status") or "-").split(" (")[0] for h in hosts})),
                ),
                stat(
                    "stragglers",
                    fmt_num(len(stragglers)),
                    "stat-stragglers",
                    ", ".join(StragglerEvidence.of(f).host for f in stragglers) or "none",
                ),
                stat(
                    "divergent lines",
                    fmt_num(len(divergent)),
                    "stat-divergent",
                    "user's lines where hosts did different things",
                ),
                stat(
                    "pod median step",
                    fmt_num(pod_p50, 2, "ms")
                    if pod_p50 is not None
                    else fmt_num(summary.get("step_time_p50_ms"), 2, "ms"),
                    "stat-pod-p50",
                ),
            ]
        ),
        html.Div(graph(heatmap, "host-heatmap"), className="panel"),
        html.H3("Hosts"),
        grid("host-grid", host_rows(summary), HOST_COLUMNS, getRowId="params.data.host"),
        html.H3("Stragglers"),
        findings_list(
            stragglers, "No host is slower than the pod by more than the noise between steps."
        ),
        html.H3("Divergent graphs, fallbacks and host syncs"),
        grid("divergence-grid", divergence_rows(divergent), DIVERGENCE_COLUMNS),
        findings_list(divergent, "Every host compiled the same graphs and made the same syncs."),
    )
