"""Shape churn: per call site, the varying dims, their values over steps, the bucketing fix.

A recompile card whose cause is shape churn carries the facet (tpuscope.detect.shape_churn):
its dim (arg, dim), the family's graphs (hashes) and the bucket plan; the sizes per step
are read back from those graphs' input shapes. Below the cards, every dim that varies at a call site is plotted straight from the
compiles table, so the page is useful before (or without) re-analysis.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from dash import html

from tpuscope.analyze.contract import RecompileEvidence, ShapeChurnFacet
from tpuscope.schema import Finding

from ..components import empty_state, finding_card, fmt_num, graph, run_page, stat, stats_row
from ..data import StoreData
from ..figures.churn import dim_values
from ..shapes import finding_values, varying_by_step


def churn_buckets(facet: ShapeChurnFacet | None) -> list[int]:
    """The bucket sizes of the finding's padding plan."""
    return [int(b) for b in (facet.buckets if facet else None) or [] if isinstance(b, int | float)]


def finding_section(finding: Finding, index: int, compiles: pd.DataFrame) -> html.Div:
    facet = RecompileEvidence.of(finding).shape_churn  # tpuscope.detect.shape_churn's facet
    values = finding_values(compiles, facet)
    parts: list[Any] = [finding_card(finding, index)]
    if not values.empty:
        title = f"Observed sizes at {finding.location or 'this call site'}"
        parts.append(graph(dim_values(values, churn_buckets(facet), title), f"churn-graph-{index}"))
    return html.Div(parts, className="panel")


def covered(findings: list[Finding]) -> set[tuple[str, str]]:
    """(call site, 'arg A dim D') pairs a finding already plots, with the dims linked to it."""
    pairs = set()
    for f in findings:
        facet = RecompileEvidence.of(f).shape_churn or ShapeChurnFacet()
        linked = facet.linked_dims or [[facet.arg, facet.dim]]
        pairs |= {(f.location or "", f"arg {a} dim {d}") for a, d in linked}
    return pairs


def observed_section(families: pd.DataFrame, skip: set[tuple[str, str]]) -> list[Any]:
    """Varying input dims per call site between graphs of one family (those no finding shows)."""
    varying = varying_by_step(families)
    if not varying.empty:
        keep = [(s, d) not in skip for s, d in zip(varying["site"], varying["dim"], strict=True)]
        varying = varying[keep]
    sections: list[Any] = []
    for i, (site, rows) in enumerate(varying.groupby("site", sort=False)):
        distinct = rows.groupby("dim")["value"].nunique().to_dict()
        label = ", ".join(f"{dim}: {n} sizes" for dim, n in distinct.items())
        sections.append(
            html.Div(
                className="panel",
                children=[
                    html.H4([html.Code(site)]),
                    html.P(label, className="muted"),
                    graph(
                        dim_values(rows, None, "Input sizes of each compile"), f"observed-graph-{i}"
                    ),
                ],
            )
        )
    return sections


def layout(data: StoreData, run_id: str) -> html.Div:
    findings = [
        f
        for f in data.findings(run_id)
        if f.rule == "recompile" and RecompileEvidence.of(f).shape_churn
    ]
    compiles = data.table(run_id, "compiles")
    observed = observed_section(data.compiles_judged(run_id)[0], covered(findings))
    shapes_known = not compiles.empty and compiles["input_shapes"].notna().any()
    body: list[Any] = [finding_section(f, i, compiles) for i, f in enumerate(findings)]
    if observed:
        body += [html.H3("Other input dims that vary between compiled graphs"), *observed]
    if not body:
        why = (
            "No argument dimension took more than one size at any call site."
            if shapes_known
            else "No recompile with shape churn, and this run's compiles do not record input shapes "
            "(re-run with `tpuscope run --deep`, then `tpuscope show RUN --reanalyze`)."
        )
        body = [empty_state("No shape churn", why, ident="no-churn")]
    return run_page(
        "churn",
        run_id,
        data.header(run_id),
        stats_row(
            [
                stat("recompiles with shape churn", fmt_num(len(findings)), "stat-churn-findings"),
                stat("other varying call sites", fmt_num(len(observed)), "stat-churn-sites"),
                stat("recompiles", fmt_num(data.summary(run_id)["recompiles"]), "stat-recompiles"),
            ]
        ),
        *body,
    )
