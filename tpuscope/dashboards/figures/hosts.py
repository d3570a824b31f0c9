"""The Hosts page's figure: step time per host x step, a pod's stragglers as bright rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from .common import base_figure, colorbar, empty_figure


def _color_top(values: np.ndarray) -> float | None:
    """The top of the colour scale: the 95th percentile of the cells (hover shows true values)."""
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, 95)) if finite.size else None


def host_heatmap(record: dict[str, Any] | None) -> go.Figure:
    """Step time (ms) per host and step of the judged steps, from the analysis' `host_steps`
    (analyze/hosts.step_matrix_record: already binned, each host's slowest process)."""
    if not record or not record.get("ms"):
        return empty_figure("No judged steps recorded in this run")
    values = np.array(
        [[np.nan if v is None else v for v in row] for row in record["ms"]], dtype=float
    )
    width, starts = int(record["width"]), record["steps"]
    labels = [f"{s}" if width == 1 else f"{s}-{s + width - 1}" for s in starts]
    custom = np.tile(np.array(labels, dtype=object), (len(values), 1))
    title = "Step time per host and step (ms, judged steps)" + (
        "" if width == 1 else f" ({width} steps per column)"
    )
    fig = base_figure(title, height=max(260, 110 + 22 * len(values)), colorbar=True)
    fig.add_trace(
        go.Heatmap(
            z=values,
            x=starts,
            y=record["hosts"],
            customdata=custom,
            colorscale="Viridis",
            zmax=_color_top(values),  # a few compile steps must not wash out a straggler
            colorbar=colorbar("ms"),
            hovertemplate="%{y}<br>step %{customdata}<br>%{z:.2f} ms<extra></extra>",
            xgap=1,
            ygap=1,
        )
    )
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(autorange="reversed", automargin=True, type="category")
    return fig
