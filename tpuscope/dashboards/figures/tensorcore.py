"""TensorCore (MXU) figures: padding waste per TPU generation, device busy/idle per step.

The arithmetic is tpuscope's (tpuscope.analyze.mxu: systolic array edge per
generation, padding_waste); these builders only lay it out.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from tpuscope.analyze.mxu import GENERATIONS, TARGETS, padding_waste

from .common import COLORS, NS_PER_MS, PALETTE, base_figure, empty_figure

MAX_OPS = 30
EDGES = {gen: GENERATIONS[gen].mxu for gen in TARGETS}


def dot_waste(dots: pd.DataFrame) -> pd.DataFrame:
    """Adds waste_<gen> (share of MXU work that is padding) per target generation, and flops when absent."""
    out = dots.copy()
    if "flops" not in out or out["flops"].isna().any():
        batch = out["batch"].astype(float) if "batch" in out else 1.0
        out["flops"] = (
            2.0 * batch * out["m"].astype(float) * out["n"].astype(float) * out["k"].astype(float)
        )
    for gen, edge in EDGES.items():
        out[f"waste_{gen}"] = padding_waste(
            out["n"].to_numpy(float), out["k"].to_numpy(float), edge
        )
    return out


def weighted_waste(dots: pd.DataFrame, gen: str) -> float:
    """FLOP-weighted padding share over all dots: how much MXU work is padding on `gen`."""
    total = float(dots["flops"].sum())
    return float((dots["flops"] * dots[f"waste_{gen}"]).sum() / total) if total else 0.0


def by_shape(dots: pd.DataFrame) -> pd.DataFrame:
    """Matmuls of the same shape and dtype as one row (a layer repeats its dots): count, flops summed."""
    waste = [c for c in dots.columns if c.startswith("waste_")]
    grouped = (
        dots.groupby("shape", sort=False)
        .agg(count=("shape", "size"), flops=("flops", "sum"), **{c: (c, "first") for c in waste})
        .reset_index()
    )
    grouped["label"] = grouped["count"].astype(str) + " x " + grouped["shape"]
    return grouped


def padding_waste_bars(dots: pd.DataFrame, max_ops: int = MAX_OPS) -> go.Figure:
    """Per matmul shape (the most FLOPs first): % of MXU work that is padding, per generation."""
    if dots.empty:
        return empty_figure(
            "No dot or convolution ops recorded (run with --deep to keep HLO dumps)"
        )
    shown = (by_shape(dots) if "shape" in dots else dots).nlargest(max_ops, "flops").iloc[::-1]
    labels = [str(x) for x in shown["label"]]
    fig = base_figure(
        "MXU padding waste per matmul shape (most FLOPs first)",
        height=max(260, 90 + 24 * len(shown)),
    )
    for i, (gen, edge) in enumerate(EDGES.items()):
        fig.add_trace(
            go.Bar(
                y=labels,
                x=100 * shown[f"waste_{gen}"],
                name=f"{gen} ({edge}x{edge})",
                orientation="h",
                marker_color=PALETTE[i % len(PALETTE)],
                hovertemplate="%{y}<br>%{x:.0f}% padding<extra>" + gen + "</extra>",
            )
        )
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text="% of MXU work that is padding", range=[0, 100])
    fig.update_yaxes(automargin=True)
    return fig


def busy_idle_bars(device_steps: pd.DataFrame) -> go.Figure:
    """Device busy and idle time per step window, stacked (mean over devices when there are several)."""
    if device_steps.empty:
        return empty_figure("No per-step device time: the run has no device trace")
    devices = device_steps["device"].nunique()
    stepped = device_steps[device_steps["step"] >= 0]  # step -1: a window of the whole trace
    if stepped.empty:  # no step markers in the trace: one bar per device over the whole trace
        per, axis, what = (
            device_steps.groupby("device", as_index=False)[["busy_ns", "idle_ns"]].sum(),
            "device",
            "",
        )
        title = "Device busy and idle time over the whole trace (no step markers in it)"
    else:
        per, axis = stepped.groupby("step", as_index=False)[["busy_ns", "idle_ns"]].mean(), "step"
        what = "step "
        title = "Device busy and idle time per step" + (
            f" (mean of {devices} devices)" if devices > 1 else ""
        )
    fig = base_figure(title, height=300)
    for col, label, color in (("busy_ns", "busy", COLORS["step"]), ("idle_ns", "idle", "#c9d1db")):
        fig.add_trace(
            go.Bar(
                x=per[axis].astype(str) if axis == "device" else per[axis],
                y=per[col] / NS_PER_MS,
                name=label,
                marker_color=color,
                hovertemplate=what + "%{x}<br>%{y:.2f} ms " + label + "<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text=axis)
    fig.update_yaxes(title_text="ms")
    return fig


def estimate_scatter(priced: pd.DataFrame) -> go.Figure:
    """Per op: estimated against measured time (all occurrences, ms, log axes), with the 2x band,
    coloured by what bounds the estimate (tpuscope.analyze.cost_compare)."""
    shown = (
        priced[(priced["measured_us"] > 0) & (priced["estimated_us"] > 0)]
        if not priced.empty
        else priced
    )
    if shown.empty:
        return empty_figure("No device op with both an estimate and a measurement")
    fig = base_figure("Cost model: estimated vs measured time per op (all occurrences)", height=420)
    for i, (bound, group) in enumerate(shown.groupby("bound", sort=True)):
        fig.add_trace(
            go.Scatter(
                x=group["measured_us"] / 1e3,
                y=group["estimated_us"] / 1e3,
                mode="markers",
                name=str(bound),
                marker={"color": PALETTE[i % len(PALETTE)], "size": 8},
                text=group["op"].astype(str),
                hovertemplate="%{text}<br>measured %{x:.3f} ms<br>estimated %{y:.3f} ms<extra>"
                + str(bound)
                + "</extra>",
            )
        )
    lo, hi = (
        float(shown[["measured_us", "estimated_us"]].min().min()) / 1e3,
        float(shown[["measured_us", "estimated_us"]].max().max()) / 1e3,
    )
    for factor, dash in ((1.0, "solid"), (2.0, "dot"), (0.5, "dot")):
        fig.add_trace(
            go.Scatter(
                x=[lo, hi],
                y=[lo * factor, hi * factor],
                mode="lines",
                showlegend=False,
                line={"color": "#8a94a3", "dash": dash, "width": 1},
                hoverinfo="skip",
            )
        )
    fig.update_xaxes(type="log", title_text="measured (ms)")
    fig.update_yaxes(type="log", title_text="estimated (ms)")
    return fig
