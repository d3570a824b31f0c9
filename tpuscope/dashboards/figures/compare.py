"""Two runs side by side: step-time distributions and per-op fallback counts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .common import COLORS, NS_PER_MS, base_figure, empty_figure

SIDE_COLORS = (COLORS["a"], COLORS["b"])


def shared_log_bins(samples: list[np.ndarray], bins: int) -> np.ndarray:
    """Log-spaced edges covering every sample (step times span decades: 30 ms to 10 s)."""
    values = np.concatenate([s for s in samples if len(s)])
    lo, hi = float(values.min()), float(values.max())
    lo = max(lo, 1e-6)
    if hi <= lo:
        hi = lo * 1.01
    return np.geomspace(lo, hi * 1.0001, bins + 1)


def step_time_histograms(samples: dict[str, pd.Series], bins: int = 50) -> go.Figure:
    """Share of judged steps per step-time bin, one colour per run, with each p50 marked.

    Binned on the server: a 100k-step run sends 50 bars, not 100k values.
    """
    arrays = {label: s.dropna().to_numpy(dtype=float) / NS_PER_MS for label, s in samples.items()}
    if not any(len(a) for a in arrays.values()):
        return empty_figure("No steps after warm-up in either run")
    edges = shared_log_bins(list(arrays.values()), bins)
    centers = np.sqrt(edges[:-1] * edges[1:])
    fig = base_figure("Step time distribution (after warm-up)", height=340)
    for i, (label, values) in enumerate(arrays.items()):
        if not len(values):
            continue
        counts, _ = np.histogram(values, bins=edges)
        color = SIDE_COLORS[i % 2]
        fig.add_trace(
            go.Bar(
                x=centers,
                y=100 * counts / len(values),
                width=np.diff(edges),
                name=label,
                marker_color=color,
                opacity=0.6,
                hovertemplate="%{x:.2f} ms<br>%{y:.1f}% of steps<extra>" + label + "</extra>",
            )
        )
        fig.add_vline(x=float(np.median(values)), line_dash="dash", line_color=color)
    fig.update_layout(barmode="overlay", bargap=0)
    fig.update_xaxes(title_text="step time (ms, log scale)", type="log")
    fig.update_yaxes(title_text="% of steps")
    return fig


def grouped_counts(counts: dict[str, pd.Series], title: str, unit: str) -> go.Figure:
    """Bars per key (op, rule, ...) for each run: which side has more of what."""
    keys = sorted({k for s in counts.values() for k in s.index})
    if not keys:
        return empty_figure(f"{title}: none in either run")
    fig = base_figure(title, height=max(260, 80 + 22 * len(keys)))
    for i, (label, series) in enumerate(counts.items()):
        fig.add_trace(
            go.Bar(
                y=keys,
                x=[float(series.get(k, 0)) for k in keys],
                name=label,
                orientation="h",
                marker_color=SIDE_COLORS[i % 2],
                hovertemplate="%{y}: %{x:,.0f} " + unit + "<extra>" + label + "</extra>",
            )
        )
    fig.update_layout(barmode="group")
    fig.update_xaxes(title_text=unit)
    fig.update_yaxes(autorange="reversed", automargin=True)
    return fig
