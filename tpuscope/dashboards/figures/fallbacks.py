"""CPU fallbacks (op x step heatmap) and device-to-host transfers per step."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tpuscope.analyze.judge import VALUE_READ_OPS

from .common import COLORS, base_figure, colorbar, empty_figure, minmax_indices
from .common import per_step as per_step_sum

MAX_COLUMNS = 200
MAX_OPS = 40


def fallback_matrix(
    fallbacks: pd.DataFrame, max_columns: int = MAX_COLUMNS, max_ops: int = MAX_OPS
) -> tuple[pd.DataFrame, int]:
    """Counts per (op, step bin) and the bin width: at most max_columns bins, busiest ops first."""
    lo, hi = int(fallbacks["step"].min()), int(fallbacks["step"].max())
    width = max(1, math.ceil((hi - lo + 1) / max_columns))
    binned = fallbacks.assign(bin=lo + (fallbacks["step"] - lo) // width * width)
    matrix = binned.pivot_table(
        index="op", columns="bin", values="count", aggfunc="sum", fill_value=0
    )
    order = matrix.sum(axis=1).sort_values(ascending=False).index[:max_ops]
    return matrix.loc[order], width


def _calls_colorbar(most: float) -> dict:
    """The colour bar of call counts: from 0, whole numbers only (a single count of 3 was drawn
    as a scale from 2.5 to 3.5)."""
    return colorbar("calls", tick0=0, dtick=max(1, math.ceil(most / 4)), tickformat=",d")


def fallback_heatmap(
    fallbacks: pd.DataFrame | None,
    max_columns: int = MAX_COLUMNS,
    binned: tuple[pd.DataFrame, int] | None = None,
) -> go.Figure:
    """Which aten ops ran on the host in which steps (binned when there are many steps); from
    the fallbacks rows, or `binned`, the (matrix, width) fallback_matrix gives (computed where
    the rows are: dashboards.aggregates)."""
    if binned is None:
        if fallbacks is not None and not fallbacks.empty:  # value reads are host syncs, apart
            fallbacks = fallbacks[~fallbacks["op"].astype(str).isin(VALUE_READ_OPS)]
        if fallbacks is None or fallbacks.empty:
            return empty_figure("No CPU fallbacks: every aten op in this run had an XLA lowering")
        binned = fallback_matrix(fallbacks, max_columns)
    elif binned[0].empty:
        return empty_figure("No CPU fallbacks: every aten op in this run had an XLA lowering")
    matrix, width = binned
    starts = matrix.columns.to_numpy()
    if (
        len(starts) and starts.max() < 0
    ):  # imported totals: counts over the whole run, no step of their own
        starts = np.array(["whole run"], dtype=object)
        matrix = matrix.iloc[:, :1]
    labels = [
        f"{s}" if width == 1 or isinstance(s, str) else f"{s}-{s + width - 1}" for s in starts
    ]
    custom = np.tile(np.array(labels, dtype=object), (len(matrix), 1))
    fig = base_figure(
        "CPU fallback calls per op and step"
        + ("" if width == 1 else f" ({width} steps per column)"),
        height=max(240, 90 + 26 * len(matrix)),
        colorbar=True,
    )
    fig.add_trace(
        go.Heatmap(
            z=matrix.to_numpy(),
            x=starts,
            y=[str(op) for op in matrix.index],
            customdata=custom,
            colorscale="YlOrRd",
            zmin=0,
            zmax=max(1.0, float(np.nanmax(matrix.to_numpy()))),
            colorbar=_calls_colorbar(float(np.nanmax(matrix.to_numpy()))),
            hovertemplate="%{y}<br>"
            + ("%{customdata}" if isinstance(starts[0], str) else "step %{customdata}")
            + "<br>%{z} calls<extra></extra>",
            xgap=1,
            ygap=1,
        )
    )
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(autorange="reversed", automargin=True)
    return fig


def transfers_timeline(steps: pd.DataFrame, warmup: int, max_points: int = 4000) -> go.Figure:
    """Device-to-host transfers per step: each one stalls the host until the device catches up."""
    if steps.empty or "transfers_from_device" not in steps:
        return empty_figure("No steps recorded in this run")
    per_step = per_step_sum(steps, "transfers_from_device").reset_index()  # one pass, no groupby
    if not per_step["transfers_from_device"].any():
        return empty_figure("No device-to-host transfers inside steps")
    keep = minmax_indices(per_step["transfers_from_device"].to_numpy(), max_points)
    part = per_step.iloc[keep]
    fig = base_figure("Device-to-host transfers per step", height=280)
    fig.add_trace(
        go.Scatter(
            x=part["step"],
            y=part["transfers_from_device"],
            mode="lines+markers" if len(part) < 200 else "lines",
            name="transfers",
            line={"color": COLORS["fallback"], "shape": "hv"},
            hovertemplate="step %{x}<br>%{y} transfers<extra></extra>",
        )
    )
    if warmup > 0:
        fig.add_vrect(
            x0=per_step["step"].min() - 0.5,
            x1=warmup - 0.5,
            fillcolor=COLORS["warmup"],
            line_width=0,
            annotation_text="warm-up",
            annotation_position="top left",
        )
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="transfers per step", rangemode="tozero")
    return fig
