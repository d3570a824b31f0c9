"""Compare: two runs side by side (step times, compiles, fallbacks, findings added/removed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
from dash import dcc, html

from tpuscope.analyze.judge import judged_steps
from tpuscope.schema import Finding

from ..components import finding_card, fmt_num, fmt_pct, graph
from ..data import StoreData
from ..figures.compare import grouped_counts, step_time_histograms

# (label, summary key, formatter, row id): the rows of the side-by-side table.
ROWS: list[tuple[str, str, Callable[[Any], str], str]] = [
    ("steps", "steps", fmt_num, "steps"),
    ("step time p50", "step_time_p50_ms", lambda v: fmt_num(v, 2, "ms"), "p50"),
    ("step time p90", "step_time_p90_ms", lambda v: fmt_num(v, 2, "ms"), "p90"),
    ("compiles", "compiles", fmt_num, "compiles"),
    ("recompiles", "recompiles", fmt_num, "recompiles"),
    ("compile time", "compile_s", lambda v: fmt_num(v, 2, "s"), "compile-s"),
    ("recompile share of wall time", "recompile_share", fmt_pct, "compile-share"),
    ("CPU fallback calls", "fallback_count", fmt_num, "fallbacks"),
    ("host transfers per step", "transfers_from_device_per_step", lambda v: fmt_num(v, 2), "transfers"),
    ("findings", "findings", fmt_num, "findings"),
]


def change(a: Any, b: Any, share: bool = False) -> str:
    """B against A: '+12.5%' relative, percentage points for shares, the difference when A is 0."""
    if not isinstance(a, int | float) or not isinstance(b, int | float):
        return ""
    if a == b:
        return "same"
    if share:
        return f"{100 * (b - a):+.1f} pp"
    if a:
        return f"{100 * (b - a) / abs(a):+.1f}%"
    return f"{b - a:+,.2f}".rstrip("0").rstrip(".")


def side_by_side(a: dict[str, Any], b: dict[str, Any]) -> html.Table:
    head = html.Thead(html.Tr([html.Th(""), html.Th(a["name"] or a["run_id"]), html.Th(b["name"] or b["run_id"]),
                               html.Th("B vs A")]))
    body = [html.Tr([html.Td(label), html.Td(fmt(a.get(key)), id=f"cmp-a-{ident}"),
                     html.Td(fmt(b.get(key)), id=f"cmp-b-{ident}"),
                     html.Td(change(a.get(key), b.get(key), fmt is fmt_pct), className="muted")])
            for label, key, fmt, ident in ROWS]
    return html.Table([head, html.Tbody(body)], className="compare-table", id="compare-table")


def finding_key(f: Finding) -> tuple[str, str]:
    return f.rule, f.location or f.title


def findings_delta(a: list[Finding], b: list[Finding]) -> dict[str, list[Finding]]:
    """Findings only in B (added), only in A (removed), in both (kept, B's version), by rule and site."""
    keys_a, keys_b = {finding_key(f) for f in a}, {finding_key(f) for f in b}
    return {
        "added": [f for f in b if finding_key(f) not in keys_a],
        "removed": [f for f in a if finding_key(f) not in keys_b],
        "kept": [f for f in b if finding_key(f) in keys_a],
    }


def _delta_column(title: str, items: list[Finding], ident: str) -> html.Div:
    cards = [finding_card(f, i) for i, f in enumerate(items)] or [html.P("none", className="muted")]
    return html.Div([html.H4(f"{title} ({len(items)})", id=ident), *cards], className="delta-col")


def layout(data: StoreData, run_a: str, run_b: str) -> html.Div:
    sa, sb = data.summary(run_a), data.summary(run_b)
    label_a, label_b = f"A: {sa['name'] or run_a}", f"B: {sb['name'] or run_b}"
    steps = {label_a: judged_steps(data.table(run_a, "steps"), sa["warmup"])["wall_ns"],
             label_b: judged_steps(data.table(run_b, "steps"), sb["warmup"])["wall_ns"]}
    if label_a == label_b:
        steps = dict(zip([label_a + " (A)", label_b + " (B)"], steps.values(), strict=True))

    def fallback_counts(run_id: str) -> pd.Series:
        frame = data.table(run_id, "fallbacks")
        return frame.groupby("op")["count"].sum() if not frame.empty else pd.Series(dtype=float)

    compiles = {label_a: pd.Series({"total": sa["compiles"], "recompiles": sa["recompiles"]}),
                label_b: pd.Series({"total": sb["compiles"], "recompiles": sb["recompiles"]})}
    delta = findings_delta(data.findings(run_a), data.findings(run_b))
    return html.Div(className="page", id="page-compare", children=[
        html.H2("Compare runs"),
        html.P([html.Span("A: "), dcc.Link(run_a, href=f"/run/{run_a}", id="compare-a"),
                html.Span("   B: "), dcc.Link(run_b, href=f"/run/{run_b}", id="compare-b")], className="run-identity"),
        side_by_side(sa, sb),
        html.Div(graph(step_time_histograms(steps), "compare-steps"), className="panel"),
        html.Div(className="two-col", children=[
            html.Div(graph(grouped_counts(compiles, "XLA compiles", "compiles"), "compare-compiles"), className="panel"),
            html.Div(graph(grouped_counts({label_a: fallback_counts(run_a), label_b: fallback_counts(run_b)},
                                          "CPU fallback calls per op", "calls"), "compare-fallbacks"),
                     className="panel"),
        ]),
        html.H3("Findings"),
        html.Div(className="delta", children=[
            _delta_column("Added in B", delta["added"], "findings-added"),
            _delta_column("Removed in B", delta["removed"], "findings-removed"),
            _delta_column("In both", delta["kept"], "findings-kept"),
        ]),
    ])
