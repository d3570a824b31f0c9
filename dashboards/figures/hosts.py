"""The Hosts page's figure: step time per host x step, a pod's stragglers as bright rows."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tpuscope.analyze.hosts import step_matrix

from .common import base_figure, empty_figure

MAX_COLUMNS = 200
MAX_HOSTS = 256


def binned_matrix(steps: pd.DataFrame, max_columns: int = MAX_COLUMNS) -> tuple[pd.DataFrame, int]:
    """host x step ms (each host's slowest process), steps binned to at most max_columns columns
    (a bin shows its median: one compile step does not paint a bin of 500 steps)."""
    matrix = step_matrix(steps)
    if matrix.empty:
        return matrix, 1
    lo, hi = int(matrix.columns.min()), int(matrix.columns.max())
    width = max(1, math.ceil((hi - lo + 1) / max_columns))
    if width > 1:
        bins = lo + (matrix.columns.to_numpy() - lo) // width * width
        matrix = matrix.T.groupby(bins).median().T
    return matrix.iloc[:MAX_HOSTS], width


def _color_top(values: np.ndarray) -> float | None:
    """The top of the colour scale: the 95th percentile of the cells (hover shows true values)."""
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, 95)) if finite.size else None


def host_heatmap(steps: pd.DataFrame, max_columns: int = MAX_COLUMNS) -> go.Figure:
    """Step time (ms) per host and step of the judged steps."""
    matrix, width = binned_matrix(steps, max_columns)
    if matrix.empty:
        return empty_figure("No judged steps recorded in this run")
    starts = matrix.columns.to_numpy()
    labels = [f"{s}" if width == 1 else f"{s}-{s + width - 1}" for s in starts]
    custom = np.tile(np.array(labels, dtype=object), (len(matrix), 1))
    title = "Step time per host and step (ms, judged steps)" + (
        "" if width == 1 else f" ({width} steps per column)"
    )
    fig = base_figure(title, height=max(260, 110 + 22 * len(matrix)))
    fig.add_trace(
        go.Heatmap(
            z=matrix.to_numpy(),
            x=starts,
            y=[str(h) for h in matrix.index],
            customdata=custom,
            colorscale="Viridis",
            zmax=_color_top(matrix.to_numpy()),  # a few compile steps must not wash out a straggler
            colorbar={"title": {"text": "ms"}},
            hovertemplate="%{y}<br>step %{customdata}<br>%{z:.2f} ms<extra></extra>",
            xgap=1,
            ygap=1,
        )
    )
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(autorange="reversed", automargin=True, type="category")
    return fig
