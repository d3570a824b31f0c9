"""TensorCore: dots/convolutions with dims, dtype and MXU padding waste per TPU generation,
each graph's roofline on the run's target chip, and xprof's measured MXU utilization and
duty cycle (plus device busy/idle per step) when the run has a TPU trace.

All arithmetic is tpuscope's own (tpuscope.analyze.mxu, tpuscope.report.device), so the
page and the tensorcore_underuse findings agree.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from dash import html

from tpuscope.analyze.cost_compare import compare
from tpuscope.analyze.mxu import GENERATIONS, matmuls, mxu_costs, roofline
from tpuscope.report.device import busy_idle

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
from ..figures.tensorcore import (
    EDGES,
    busy_idle_bars,
    dot_waste,
    estimate_scatter,
    padding_waste_bars,
    weighted_waste,
)

MEASURED = (
    ("mxu_utilization_percent", "MXU utilization", "stat-mxu"),
    ("device_duty_cycle_percent", "device duty cycle", "stat-duty"),
)


def dots_table(hlo_ops: pd.DataFrame) -> pd.DataFrame:
    """The run's matmuls (one HLO stage per module, as the rule reads them) with labels and waste."""
    dots = matmuls(hlo_ops)
    if dots.empty:
        return dots
    dots = dot_waste(dots)
    dtype = dots["lhs_dtype"].astype(str) if "lhs_dtype" in dots else dots["dtype"].astype(str)
    shape = (
        dots["batch"].astype(str)
        + "x"
        + dots["m"].astype(str)
        + "x"
        + dots["n"].astype(str)
        + "x"
        + dots["k"].astype(str)
    )
    dots["shape"] = dtype + "[" + shape + "]"
    dots["label"] = dots["name"].astype(str) + " " + dots["shape"]
    dots["dtype_in"] = dtype
    has_source = "source_file" in dots and "source_line" in dots
    dots["source"] = (
        (
            dots["source_file"].astype(str) + ":" + dots["source_line"].astype("Int64").astype(str)
        ).where(dots["source_file"].notna(), "")
        if has_source
        else ""
    )
    return dots


def dots_grid(dots: pd.DataFrame) -> Any:
    columns: list[dict[str, Any]] = [
        {"field": "name", "minWidth": 150},
        {"field": "module", "minWidth": 140},
        {"field": "dtype_in", "headerName": "dtype", "maxWidth": 100},
        *[{"field": c, **NUM, "minWidth": 70} for c in ("batch", "m", "n", "k")],
        {"field": "gflop", "headerName": "GFLOP", **NUM, "sort": "desc"},
        *[{"field": f"pad_{g}", "headerName": f"padding {g} (%)", **NUM} for g in EDGES],
        {"field": "source", "minWidth": 140, "tooltipField": "source"},
    ]
    rows = dots.assign(
        gflop=(dots["flops"] / 1e9).round(4),
        **{f"pad_{g}": (100 * dots[f"waste_{g}"]).round(1) for g in EDGES},
    )
    return grid("dots-grid", rows[[c["field"] for c in columns]], columns)


def roofline_grid(dots: pd.DataFrame, hlo_modules: pd.DataFrame, target: str) -> Any:
    """Per graph on the target chip: bound, MXU vs HBM time, padding's share of MXU work."""
    line = roofline(hlo_modules, mxu_costs(dots, target), target)
    if line.empty:
        return None
    rows = pd.DataFrame(
        {
            "module": line["module"].astype(str),
            "matmuls": line["matmuls"],
            "gflop": (line["flops"] / 1e9).round(3),
            "bound": line["bound"],
            "mxu_us": (line["mxu_s"] * 1e6).round(2),
            "hbm_us": (line["hbm_s"] * 1e6).round(2),
            "padding": (100 * line["padding_share"]).round(1),
            "bytes_basis": line["bytes_basis"],
        }
    )
    columns: list[dict[str, Any]] = [
        {"field": "module", "minWidth": 160},
        {"field": "matmuls", **NUM},
        {"field": "gflop", "headerName": "GFLOP", **NUM},
        {"field": "bound", "minWidth": 130},
        {"field": "mxu_us", "headerName": "MXU time (us)", **NUM},
        {"field": "hbm_us", "headerName": "HBM time (us)", **NUM},
        {"field": "padding", "headerName": "padding share (%)", **NUM},
        {"field": "bytes_basis", "headerName": "bytes from", "minWidth": 180},
    ]
    return html.Div(
        [
            html.H3(f"Estimated per graph on {GENERATIONS[target].name} (roofline)"),
            grid("roofline-grid", rows, columns),
        ]
    )


XPROF_COLUMNS: list[dict[str, Any]] = [
    {"field": "hlo_op", "headerName": "op", "minWidth": 160},
    {"field": "category", "minWidth": 110},
    {"field": "self_time_us", "headerName": "self time (us)", **NUM, "sort": "desc"},
    {"field": "self_time_percent", "headerName": "% of op time", **NUM},
    {"field": "flops_utilization", "headerName": "FLOP utilization", **NUM},
    {"field": "bound_by", "headerName": "bound by", "maxWidth": 120},
    {
        "field": "source_info",
        "headerName": "source",
        "minWidth": 160,
        "tooltipField": "source_info",
    },
]


def xprof_rows(xprof_ops: pd.DataFrame, n: int = 50) -> pd.DataFrame:
    """xprof's measured per-op profile (TPU traces): the ops with the most self time."""
    fields = [c["field"] for c in XPROF_COLUMNS]
    if xprof_ops.empty:
        return pd.DataFrame(columns=fields)
    top = xprof_ops.nlargest(n, "self_time_us")
    return top[[f for f in fields if f in top]].round(3)


COST_COLUMNS: list[dict[str, Any]] = [
    {"field": "op", "minWidth": 170, "tooltipField": "rule"},
    {"field": "module", "minWidth": 120},
    {"field": "category", "minWidth": 110},
    {"field": "measured_ms", "headerName": "measured (ms)", **NUM, "sort": "desc"},
    {"field": "estimated_ms", "headerName": "estimated (ms)", **NUM},
    {"field": "ratio", "headerName": "est / meas", **NUM},
    {"field": "bound", "maxWidth": 120},
    {"field": "rule", "minWidth": 220, "tooltipField": "rule"},
]


def cost_comparison(data: StoreData, run_id: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The cost model's estimate next to the measured op times (cached per run)."""
    tables = ("trace_events", "xprof_ops", "xprof_overview", "hlo_ops")
    return data.derived(
        run_id,
        "cost_model",
        tables,
        lambda: compare(data.meta(run_id), *(data.table(run_id, name) for name in tables)),
    )


def cost_rows(priced: pd.DataFrame, n: int = 50) -> pd.DataFrame:
    fields = [c["field"] for c in COST_COLUMNS]
    if priced.empty:
        return pd.DataFrame(columns=fields)
    top = priced.nlargest(n, "measured_us").assign(
        measured_ms=lambda f: (f["measured_us"] / 1e3).round(3),
        estimated_ms=lambda f: (f["estimated_us"] / 1e3).round(3),
    )
    return top.assign(ratio=top["ratio"].round(3))[fields]


def cost_section(priced: pd.DataFrame, view: dict[str, Any]) -> list[Any]:
    return [
        html.H3(
            f"Cost model on {view['target']}: estimate vs measurement "
            f"({100 * view['share_within_2x']:.1f}% of measured op time within 2x)"
        ),
        html.Div(graph(estimate_scatter(priced), "cost-scatter"), className="panel"),
        grid("cost-grid", cost_rows(priced), COST_COLUMNS),
    ]


def measured_tiles(data: StoreData, run_id: str) -> list[Any]:
    """xprof's MXU utilization and duty cycle, else the duty cycle of the trace's XLA ops."""
    overview = data.table(run_id, "xprof_overview")
    figures: dict[str, float] = {}
    if not overview.empty:  # per host; averaged over hosts as the tensorcore rule does
        figures = overview.dropna(subset=["value"]).groupby("name")["value"].mean().to_dict()
    hosts = overview["host"].nunique() if not overview.empty else 0
    note = "measured by xprof" + (f", mean of {hosts} hosts" if hosts > 1 else "")
    tiles = [
        stat(label, fmt_num(float(figures[key]), 1, "%"), ident, note)
        for key, label, ident in MEASURED
        if key in figures
    ]
    if "device_duty_cycle_percent" not in figures:
        devices = busy_idle(data.table(run_id, "device_steps"))
        if devices:
            busy = sum(d["busy_ms"] for d in devices)
            total = busy + sum(d["idle_ms"] for d in devices)
            tiles.append(
                stat(
                    "device duty cycle",
                    fmt_num(100 * busy / total if total else 0.0, 1, "%"),
                    "stat-duty",
                    "measured from the trace's XLA ops",
                )
            )
    return tiles


def layout(data: StoreData, run_id: str) -> html.Div:
    findings = [f for f in data.findings(run_id) if f.rule == "tensorcore_underuse"]
    dots = dots_table(data.table(run_id, "hlo_ops"))
    device_steps = data.table(run_id, "device_steps")
    target = data.summary(run_id)[
        "target"
    ]  # the chip the analysis chose (detect/tensorcore.chip_target)
    tiles = measured_tiles(data, run_id)
    priced, view = cost_comparison(data, run_id)
    if view:
        tiles.append(
            stat(
                "estimate within 2x",
                fmt_num(100 * view["share_within_2x"], 1, "%"),
                "stat-cost",
                f"of measured op time, cost model on {view['target']}",
            )
        )
    body: list[Any] = []
    if not device_steps.empty:
        body.append(html.Div(graph(busy_idle_bars(device_steps), "busy-idle"), className="panel"))
    if not dots.empty:
        tiles += [
            stat(
                f"padding on {g}",
                f"{100 * weighted_waste(dots, g):.1f}%",
                f"stat-waste-{g}",
                "of MXU work (FLOP-weighted), estimated",
            )
            for g in EDGES
        ]
        body += [
            html.Div(graph(padding_waste_bars(dots), "waste-bars"), className="panel"),
            roofline_grid(dots, data.table(run_id, "hlo_modules"), target),
            html.H3(f"Dots and convolutions ({len(dots):,})"),
            dots_grid(dots),
        ]
    if view:
        body += cost_section(priced, view)
    xprof_ops = data.table(run_id, "xprof_ops")
    if not xprof_ops.empty:
        body += [
            html.H3("Measured op profile (xprof)"),
            grid("xprof-ops", xprof_rows(xprof_ops), XPROF_COLUMNS),
        ]
    if findings or body:
        body += [
            html.H3("TensorCore findings"),
            findings_list(findings, "No tensorcore_underuse finding in this run."),
        ]
    else:
        body = [
            empty_state(
                "No TensorCore data in this run",
                "This view needs the run's HLO (dots and convolutions with their dimensions) or a TPU trace. "
                "Re-run with `tpuscope run --deep` to keep HLO dumps, or add `--trace-steps 10:20` to capture "
                "a device trace; then `tpuscope show RUN --reanalyze`.",
                ident="no-tensorcore",
            )
        ]
    return run_page(
        "tensorcore",
        run_id,
        data.header(run_id),
        stats_row(
            [
                stat("matmuls", fmt_num(len(dots)), "stat-dots", f"target {target} for estimates"),
                *tiles,
            ]
        ),
        *[b for b in body if b is not None],
    )
