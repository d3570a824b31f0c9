"""Compare: two runs side by side (step times, compiles, fallbacks, findings new/gone/changed).

The figures that `tpuscope diff` prints come from the same module
(tpuscope.analyze.compare): the step-time interval and the findings' matching. What is read:
the summaries (analysis.json), the judged steps' columns, and per-op fallback sums that
DuckDB aggregates over the parts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
from dash import dcc, html

from tpuscope.analyze.compare import Side, compare, judged_walls, keyed
from tpuscope.analyze.contract import as_summary
from tpuscope.report.diff import cache_words, difference_text, ratio_text, steps_word
from tpuscope.schema import Finding

from ..components import finding_card, fmt_num, fmt_pct, graph
from ..data import StoreData
from ..figures.compare import grouped_counts, step_time_histograms

# What judging steps needs (analyze/judge: process keys, step, boundary) and the wall time shown.
JUDGE_COLUMNS = ["host", "pid", "step", "boundary", "wall_ns", "compiles"]

# (label, summary key, formatter, row id): the rows of the side-by-side table.
ROWS: list[tuple[str, str, Callable[[Any], str], str]] = [
    ("steps", "steps", fmt_num, "steps"),
    ("step time p50", "step_time_p50_ms", lambda v: fmt_num(v, 2, "ms"), "p50"),
    ("step time p90", "step_time_p90_ms", lambda v: fmt_num(v, 2, "ms"), "p90"),
    ("compiles", "compiles", fmt_num, "compiles"),
    ("recompiles", "recompiles", fmt_num, "recompiles"),
    ("compile time", "compile_s", lambda v: fmt_num(v, 2, "s"), "compile-s"),
    ("run wall time", "run_wall_s", lambda v: fmt_num(v, 2, "s"), "run-wall-s"),
    ("compile time / run wall time", "compile_share", fmt_pct, "compile-time-share"),
    ("persistent compile cache", "compile_cache_words", str, "compile-cache"),
    ("recompile time / run wall time", "recompile_share", fmt_pct, "compile-share"),
    ("CPU fallback calls", "fallback_count", fmt_num, "fallbacks"),
    (
        "host transfers per step",
        "transfers_from_device_per_step",
        lambda v: fmt_num(v, 2),
        "transfers",
    ),
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


def compile_figures(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary with the compile rows' derived figures: compile time's share of the run's wall
    time and the persistent cache in words (the figures `tpuscope diff` prints)."""
    compile_s, wall = summary.get("compile_s"), summary.get("run_wall_s")
    share = compile_s / wall if isinstance(compile_s, int | float) and wall else None
    return {
        **summary,
        "compile_share": share,
        "compile_cache_words": cache_words(summary.get("compile_cache")),
    }


def side_by_side(a: dict[str, Any], b: dict[str, Any], diff: dict[str, Any]) -> html.Table:
    a, b = compile_figures(a), compile_figures(b)
    head = html.Thead(
        html.Tr(
            [
                html.Th(""),
                html.Th(a["name"] or a["run_id"]),
                html.Th(b["name"] or b["run_id"]),
                html.Th("B vs A"),
            ]
        )
    )
    body = [
        html.Tr(
            [
                html.Td(label),
                html.Td(fmt(a.get(key)), id=f"cmp-a-{ident}"),
                html.Td(fmt(b.get(key)), id=f"cmp-b-{ident}"),
                html.Td(change(a.get(key), b.get(key), fmt is fmt_pct), className="muted"),
            ]
        )
        for label, key, fmt, ident in ROWS
    ]
    st = diff["step_time"]
    body.insert(
        3,
        html.Tr(
            [
                html.Td(f"median {steps_word(st)} step time"),
                html.Td(fmt_num(st["a_median_ms"], 2, "ms")),
                html.Td(fmt_num(st["b_median_ms"], 2, "ms")),
                html.Td([ratio_text(st), html.Br(), difference_text(st)], id="cmp-interval"),
            ]
        ),
    )
    return html.Table([head, html.Tbody(body)], className="compare-table", id="compare-table")


def findings_delta(
    diff: dict[str, Any], a: list[Finding], b: list[Finding]
) -> dict[str, list[Finding]]:
    """The comparison's new / gone / changed / same entries as the runs' own findings (for the cards)."""
    by_key = {**keyed(a), **keyed(b)}
    return {
        kind: [by_key[tuple(e["key"])] for e in entries]
        for kind, entries in diff["findings"].items()
    }


def _delta_column(title: str, items: list[Finding], ident: str) -> html.Div:
    cards = [finding_card(f, i) for i, f in enumerate(items)] or [html.P("none", className="muted")]
    return html.Div([html.H4(f"{title} ({len(items)})", id=ident), *cards], className="delta-col")


def fallback_counts(data: StoreData, run_id: str) -> pd.Series:
    """CPU fallback calls per op, summed by DuckDB over the parts (a 100k-step run has 300k
    fallback rows; only the per-op sums come back), cached until the table changes."""

    def load() -> pd.Series:
        table = data.query(
            run_id, 'SELECT op, sum("count") AS calls FROM fallbacks GROUP BY op', ["fallbacks"]
        )
        frame = table.to_pandas()
        return (
            frame.set_index("op")["calls"].astype(float) if len(frame) else pd.Series(dtype=float)
        )

    return data.derived(run_id, "fallback-calls-per-op", ("fallbacks",), load)


def judged(data: StoreData, run_id: str, warmup: int) -> tuple[list[float], list[float] | None]:
    """The judged steps' wall ns and compiles as `tpuscope diff` reads them, cached until the
    steps table changes: judging 100k steps costs ~0.15 s of CPU, paid again at every Compare
    request that names the run."""
    return data.derived(
        run_id,
        f"judged-walls-{warmup}",
        ("steps",),
        lambda: judged_walls(data.columns(run_id, "steps", JUDGE_COLUMNS), warmup),
    )


def layout(data: StoreData, run_a: str, run_b: str) -> html.Div:
    sa, sb = data.summary(run_a), data.summary(run_b)
    label_a, label_b = f"A: {sa['name'] or run_a}", f"B: {sb['name'] or run_b}"
    (wall_a, compiled_a), (wall_b, compiled_b) = (
        judged(data, run_a, sa["warmup"]),
        judged(data, run_b, sb["warmup"]),
    )
    steps = {label_a: pd.Series(wall_a, dtype=float), label_b: pd.Series(wall_b, dtype=float)}
    if label_a == label_b:
        steps = dict(zip([label_a + " (A)", label_b + " (B)"], steps.values(), strict=True))

    compiles = {
        label_a: pd.Series({"total": sa["compiles"], "recompiles": sa["recompiles"]}),
        label_b: pd.Series({"total": sb["compiles"], "recompiles": sb["recompiles"]}),
    }
    findings_a, findings_b = data.findings(run_a), data.findings(run_b)
    diff = compare(
        Side(as_summary(sa), findings_a, wall_a, compiled_a),
        Side(as_summary(sb), findings_b, wall_b, compiled_b),
    )
    delta = findings_delta(diff, findings_a, findings_b)
    return html.Div(
        className="page",
        id="page-compare",
        children=[
            html.H2("Compare runs"),
            html.P(
                [
                    html.Span("A: "),
                    dcc.Link(run_a, href=f"/run/{run_a}", id="compare-a"),
                    html.Span("   B: "),
                    dcc.Link(run_b, href=f"/run/{run_b}", id="compare-b"),
                ],
                className="run-identity",
            ),
            side_by_side(sa, sb, diff),
            html.P(f"Interval: {diff['step_time']['method']}.", className="muted"),
            html.Div(graph(step_time_histograms(steps), "compare-steps"), className="panel"),
            html.Div(
                className="two-col",
                children=[
                    html.Div(
                        graph(
                            grouped_counts(compiles, "XLA compiles", "compiles"), "compare-compiles"
                        ),
                        className="panel",
                    ),
                    html.Div(
                        graph(
                            grouped_counts(
                                {
                                    label_a: fallback_counts(data, run_a),
                                    label_b: fallback_counts(data, run_b),
                                },
                                "CPU fallback calls per op",
                                "calls",
                            ),
                            "compare-fallbacks",
                        ),
                        className="panel",
                    ),
                ],
            ),
            html.H3("Findings"),
            html.Div(
                className="delta",
                children=[
                    _delta_column("New in B", delta["new"], "findings-added"),
                    _delta_column("Gone in B", delta["gone"], "findings-removed"),
                    _delta_column("Changed", delta["changed"], "findings-changed"),
                    _delta_column("Same", delta["same"], "findings-kept"),
                ],
            ),
        ],
    )
