"""Shape churn: the observed values of each varying dimension over steps, with buckets."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from .common import PALETTE, base_figure, empty_figure


def dim_values(
    values: pd.DataFrame, buckets: list[int] | None = None, title: str = "Observed sizes"
) -> go.Figure:
    """`values` has columns dim, step, value; bucket sizes are drawn as dashed lines.

    One marker per compiled graph, at the step that compiled it (between compiles
    cached graphs run, so no line joins them); each distinct value is one more XLA
    graph, the dashed lines the padded sizes a bucketing fix would compile instead.
    """
    if values.empty:
        return empty_figure("No per-step values recorded for this call site")
    fig = base_figure(title, height=300)
    for i, (dim, rows) in enumerate(values.sort_values("step").groupby("dim", sort=False)):
        fig.add_trace(
            go.Scatter(
                x=rows["step"],
                y=rows["value"],
                mode="markers",
                name=str(dim),
                marker={"size": 9, "color": PALETTE[i % len(PALETTE)]},
                hovertemplate="step %{x}<br>size %{y}<extra>" + str(dim) + "</extra>",
            )
        )
    for size in sorted(set(buckets or [])):
        fig.add_hline(
            y=size,
            line_dash="dot",
            line_color="#3a9a5b",
            annotation_text=f"bucket {size}",
            annotation_position="top left",
        )
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="dimension size")
    return fig
