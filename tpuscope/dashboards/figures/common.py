"""Shared figure pieces: the house style, empty states and server-side decimation."""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import pandas as pd
import plotly.graph_objects as go

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
COLORS = {
    "step": "#3b6fb6",
    "compile": "#d62728",
    "fallback": "#ff7f0e",
    "warmup": "rgba(120,120,120,0.12)",
    "a": "#3b6fb6",
    "b": "#e07b39",
}
PALETTE = (
    "#3b6fb6",
    "#e07b39",
    "#3a9a5b",
    "#c0392b",
    "#8e6bbf",
    "#8c564b",
    "#d16ba5",
    "#7f7f7f",
    "#b5b82e",
    "#17becf",
)
NS_PER_MS = 1e6
NS_PER_S = 1e9


_AXIS = {
    "gridcolor": "#e9edf2",
    "zerolinecolor": "#d5dbe2",
    "linecolor": "#c9d1db",
    "ticks": "",
    "automargin": True,
}
# A small template of our own: plotly_white costs ~40 ms per figure to apply and 6 KB per payload.
TEMPLATE = {
    "layout": {
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "colorway": list(PALETTE),
        "xaxis": _AXIS,
        "yaxis": _AXIS,
        "hovermode": "closest",
    }
}


# The vertical modebar takes the figure's right edge, where Plotly puts a colour bar: a figure
# with one gets a right margin as wide as both, so the bar's labels stay left of the modebar
# (checked in chromium: session 11, the Fallbacks heatmap; session 16, 90 px for "100" and a side title).
COLORBAR_PX, MODEBAR_PX = 90, 44


def colorbar(title: str, **extra: Any) -> dict[str, Any]:
    """A narrow colour bar titled along its side, for a figure made with base_figure(colorbar=True)."""
    return {"title": {"text": title, "side": "right"}, "thickness": 14, **extra}


def base_figure(title: str | None = None, height: int = 360, colorbar: bool = False) -> go.Figure:
    """An empty figure in the dashboard's style (system fonts: nothing is fetched); `colorbar`:
    room for one beside the modebar. The layout goes in whole to the constructor: a later
    update_layout validated it again (~15 ms a figure)."""
    return go.Figure(
        layout={
            "template": TEMPLATE,
            "title": {"text": title, "x": 0.01, "font": {"size": 15}} if title else None,
            "font": {"family": FONT, "size": 12},
            "height": height,
            "margin": {
                "l": 60,
                "r": COLORBAR_PX + MODEBAR_PX if colorbar else 20,
                "t": 48 if title else 16,
                "b": 48,
            },
            "hoverlabel": {"font": {"family": FONT}},
            "legend": {
                "orientation": "h",
                "yanchor": "bottom",
                "y": 1.02,
                "xanchor": "right",
                "x": 1,
            },
            "modebar": {"orientation": "v"},  # keeps the top edge for the title and legend
        }
    )


def empty_figure(message: str, height: int = 220) -> go.Figure:
    """A figure that says why there is nothing to plot, instead of blank axes."""
    fig = base_figure(height=height)
    fig.add_annotation(
        text=message,
        showarrow=False,
        x=0.5,
        y=0.5,
        xref="paper",
        yref="paper",
        font={"size": 14, "color": "#666"},
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def per_step(frame: pd.DataFrame, column: str, how: str = "sum") -> pd.Series:
    """step -> sum (or max) of a column, in step order (see step_totals)."""
    values = frame[column].to_numpy()
    if len(values) and values.dtype.kind in "iuf":
        return step_totals(frame["step"].to_numpy(), values, how, column)
    grouped = frame.groupby("step")[column]
    return grouped.max() if how == "max" else grouped.sum()


def step_totals(
    step: np.ndarray, values: np.ndarray, how: str = "sum", name: str | None = None
) -> pd.Series:
    """step -> sum (or max) of numeric values, in step order. Steps read in order take numpy's
    reduceat over the runs of equal steps, integer sums of dense steps (DuckDB's parallel reads
    come in any order) a bincount: a pandas groupby factorised 2M steps for 0.4 s."""
    if len(step) and bool((step[1:] >= step[:-1]).all()):
        starts = np.flatnonzero(np.concatenate([[True], step[1:] != step[:-1]]))
        reduce = np.maximum if how == "max" else np.add
        return pd.Series(
            reduce.reduceat(values, starts), index=pd.Index(step[starts], name="step"), name=name
        )
    if how == "sum" and len(step) and step.dtype.kind in "iu" and values.dtype.kind in "iu":
        lo, hi = int(step.min()), int(step.max())
        if lo >= 0 and hi - lo < 4 * len(step) + 1_000_000:  # dense steps: one O(n) pass, no sort
            sums = np.bincount(step - lo, weights=values, minlength=hi - lo + 1)
            seen = np.flatnonzero(np.bincount(step - lo, minlength=hi - lo + 1))
            return pd.Series(
                sums[seen].astype(values.dtype), index=pd.Index(seen + lo, name="step"), name=name
            )
    grouped = pd.Series(values, name=name).groupby(step)
    return (grouped.max() if how == "max" else grouped.sum()).rename_axis("step")


def minmax_indices(values: np.ndarray, max_points: int) -> np.ndarray:
    """Indices that keep each bucket's min and max, in order (at most ~max_points of them).

    Stride sampling would drop the one 10 s compile step among 100k 40 ms steps;
    min/max decimation keeps every spike and dip while sending a few thousand points.
    """
    n = len(values)
    if n <= max_points or max_points < 4:
        return np.arange(n)
    width = math.ceil(n / (max_points // 2))
    rows = math.ceil(n / width)
    padded = np.full(rows * width, np.nan)
    padded[:n] = np.asarray(values, dtype=float)
    grid = padded.reshape(rows, width)
    valid = ~np.isnan(grid).all(axis=1)
    filled = np.where(np.isnan(grid), 0.0, grid)
    lo = np.where(np.isnan(grid), np.inf, filled).argmin(axis=1)
    hi = np.where(np.isnan(grid), -np.inf, filled).argmax(axis=1)
    base = np.arange(rows) * width
    picked = np.concatenate([(base + lo)[valid], (base + hi)[valid]])
    return np.unique(picked[picked < n])


def x_window(relayout: dict[str, Any] | None) -> tuple[float, float] | Literal["reset"] | None:
    """The x range a Plotly zoom asked for, 'reset' on autorange, None for other events.

    Drives server-side re-decimation: the browser only ever holds what is in view.
    """
    if not relayout:
        return None
    for axis in ("xaxis", "xaxis2"):  # shared x axes: the zoom may come from either subplot
        if relayout.get(f"{axis}.autorange"):
            return "reset"
        if f"{axis}.range[0]" in relayout and f"{axis}.range[1]" in relayout:
            return float(relayout[f"{axis}.range[0]"]), float(relayout[f"{axis}.range[1]"])
        if isinstance(relayout.get(f"{axis}.range"), list) and len(relayout[f"{axis}.range"]) == 2:
            lo, hi = relayout[f"{axis}.range"]
            return float(lo), float(hi)
    return None
