"""Step-time timeline with compile and fallback markers, and compile-time bars."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tpuscope.analyze.judge import VALUE_READ_OPS

from .common import (
    COLORS,
    NS_PER_MS,
    NS_PER_S,
    PALETTE,
    base_figure,
    empty_figure,
    minmax_indices,
    per_step,
)

MAX_LANES = 8  # beyond this many processes the timeline shows the slowest rank per step
MAX_MARKERS = 2000
MAX_BARS = 1000  # about a bar per pixel: each carries its hover text, 4000 of them were 330 KB


def _lanes(steps: pd.DataFrame, slowest_of: int | None = None) -> dict[str, pd.DataFrame]:
    """One series per process (host/rank), or the slowest process per step when there are many
    (`slowest_of`: `steps` is that series already, of so many processes)."""
    if slowest_of:
        return {f"slowest of {slowest_of} processes": steps}
    if "rank" not in steps or (
        steps["rank"].nunique(dropna=False) <= 1 and steps["host"].nunique(dropna=False) <= 1
    ):
        return {"step time": steps}
    groups = dict(tuple(steps.groupby(["host", "rank"], sort=True, observed=True)))
    if len(groups) > MAX_LANES:
        slowest = steps.groupby("step")["wall_ns"].max().reset_index()
        return {f"slowest of {len(groups)} processes": slowest}
    return {f"rank {rank} on {host}": frame for (host, rank), frame in groups.items()}


def _in_range(frame: pd.DataFrame, x_range: tuple[float, float] | None) -> pd.DataFrame:
    if x_range is None or frame.empty:
        return frame
    lo, hi = x_range
    return frame[(frame["step"] >= lo) & (frame["step"] <= hi)]


def _step_wall_ms(steps: pd.DataFrame) -> pd.Series:
    """Step -> wall time (ms) of the slowest process, to place markers on the line."""
    return per_step(steps, "wall_ns", "max") / NS_PER_MS


def _compile_markers(compiles: pd.DataFrame, wall: pd.Series) -> go.Scatter | None:
    if compiles.empty:
        return None
    shown = compiles
    if len(shown) > MAX_MARKERS:
        shown = shown.nlargest(MAX_MARKERS, "duration_ns")
    label = (
        "compile"
        if len(shown) == len(compiles)
        else f"compiles ({len(shown):,} longest of {len(compiles):,})"
    )
    text = [
        f"compile at step {int(r.step)}: {r.duration_ns / NS_PER_S:.2f} s<br>"
        f"cause: {r.cause or 'unknown'}<br>at {r.location or 'unknown frame'}<br>"
        f"graph {str(r.graph_hash or '')[:16]}"
        for r in cast(Iterable[Any], shown.itertuples())  # rows with the columns' names
    ]
    return go.Scatter(
        x=shown["step"],
        y=shown["step"].map(wall),
        mode="markers",
        name=label,
        marker={"symbol": "triangle-up", "size": 11, "color": COLORS["compile"]},
        hovertext=text,
        hoverinfo="text",
    )


def fallback_bars(fallbacks: pd.DataFrame, max_points: int) -> go.Bar | None:
    """Host-run op calls per step (min/max decimated) with the ops and the busiest call site on
    hover (ordered by count, then name: the same text whatever order the rows are read in)."""
    if not fallbacks.empty:  # value reads are host syncs, counted apart (analyze/judge)
        fallbacks = fallbacks[~fallbacks["op"].astype(str).isin(VALUE_READ_OPS)]
    if fallbacks.empty:
        return None
    counts = per_step(fallbacks, "count")
    counts = counts.iloc[minmax_indices(counts.to_numpy(), min(max_points, MAX_BARS))]
    shown = fallbacks[fallbacks["step"].isin(counts.index)]
    by_op = (
        shown.groupby(["step", "op"], as_index=False, observed=True)["count"]
        .sum()
        .sort_values(["step", "count", "op"], ascending=[True, False, True])
    )  # a total order: rows come in any order
    ops: dict[int, list[str]] = {}
    for step, op, count in zip(
        by_op["step"].tolist(), by_op["op"].tolist(), by_op["count"].tolist(), strict=True
    ):
        ops.setdefault(step, []).append(
            f"{op} x{count}"
        )  # a plain loop: 10x faster than groupby.agg
    located = shown.dropna(subset=["location"]).sort_values(
        ["step", "count", "location"], ascending=[True, False, True]
    )
    where = located.groupby("step")["location"].first().to_dict()  # each step's busiest call site
    text = [
        f"step {s}: {n} host-run op calls<br>"
        + "<br>".join(ops.get(s, [])[:6])
        + (f"<br>at {where[s]}" if s in where else "")
        for s, n in zip(counts.index.tolist(), counts.tolist(), strict=True)
    ]
    return go.Bar(
        x=counts.index,
        y=counts.to_numpy(),
        name="CPU fallback calls",
        marker_color=COLORS["fallback"],
        hovertext=text,
        hoverinfo="text",
    )


def step_timeline(
    steps: pd.DataFrame,
    compiles: pd.DataFrame,
    fallbacks: pd.DataFrame,
    warmup: int,
    max_points: int = 4000,
    x_range: tuple[float, float] | None = None,
    step_walls: pd.Series | None = None,
    slowest_of: int | None = None,
) -> go.Figure:
    """Step wall time per step (log scale: compile steps dwarf the steady state).

    The frames are the run's tables, or what dashboards.series reduced them to: then
    `step_walls` (step -> slowest wall_ns at the compile steps) places the compile markers,
    and `slowest_of` says `steps` is the slowest process per step of that many."""
    if steps.empty:
        return empty_figure("No steps recorded in this run")
    steps = _in_range(
        steps if steps["step"].is_monotonic_increasing else steps.sort_values("step"), x_range
    )
    bars = fallback_bars(_in_range(fallbacks, x_range), max_points)
    fig = base_figure("Step time", height=380 if bars is None else 470)
    if bars is not None:
        fig.set_subplots(
            rows=2, cols=1, shared_xaxes=True, row_heights=[0.76, 0.24], vertical_spacing=0.06
        )
    top = {"row": 1, "col": 1} if bars is not None else {}
    for i, (label, lane) in enumerate(_lanes(steps, slowest_of).items()):
        keep = minmax_indices(lane["wall_ns"].to_numpy(), max_points)
        fig.add_trace(
            go.Scatter(
                x=lane["step"].to_numpy()[keep],
                y=lane["wall_ns"].to_numpy()[keep] / NS_PER_MS,
                mode="lines+markers" if len(keep) < 200 else "lines",
                name=label,
                line={"color": PALETTE[i % len(PALETTE)] if i else COLORS["step"], "width": 1.5},
                marker={"size": 5},
                hovertemplate="step %{x}<br>%{y:.2f} ms<extra></extra>",
            ),
            **top,
        )
    walls = _step_wall_ms(steps) if step_walls is None else step_walls / NS_PER_MS
    markers = _compile_markers(_in_range(compiles, x_range), walls)
    if markers is not None:
        fig.add_trace(markers, **top)
    if warmup > 0 and (x_range is None or x_range[0] < warmup):
        fig.add_vrect(
            x0=steps["step"].min() - 0.5,
            x1=warmup - 0.5,
            fillcolor=COLORS["warmup"],
            line_width=0,
            annotation_text="warm-up",
            annotation_position="top left",
            **top,
        )
    wall_ms = steps["wall_ns"] / NS_PER_MS
    decades = np.log10(max(wall_ms.max(), 1e-3) / max(wall_ms.min(), 1e-3))
    fig.update_yaxes(
        title_text="step time (ms, log scale)", type="log", dtick=1 if decades > 2 else None, **top
    )
    if bars is not None:
        fig.add_trace(bars, row=2, col=1)
        fig.update_yaxes(title_text="fallback calls", rangemode="tozero", row=2, col=1)
        fig.update_xaxes(title_text="step", row=2, col=1)
    else:
        fig.update_xaxes(title_text="step")
    return fig


def compile_bars(families: pd.DataFrame, max_points: int = 4000) -> go.Figure:
    """Compile time per step: first compiles of each graph family in grey, recompiles (further
    compiles of a family, tpuscope.analyze.families) in red."""
    if families.empty:
        return empty_figure("No XLA compiles recorded in this run")
    frame = families.assign(recompile=families["recompile"].astype(bool))
    per_step = frame.groupby(["step", "recompile"], as_index=False).agg(
        seconds=("duration_ns", "sum"), count=("duration_ns", "size")
    )
    per_step["seconds"] /= NS_PER_S
    keep = minmax_indices(per_step["seconds"].to_numpy(), max_points)
    per_step = per_step.iloc[keep]
    fig = base_figure("Compile time per step", height=300)
    for again, name, color in (
        (False, "first compiles", "#9aa5b1"),
        (True, "recompiles", COLORS["compile"]),
    ):
        part = per_step[per_step["recompile"] == again]
        if part.empty:
            continue
        fig.add_trace(
            go.Bar(
                x=part["step"],
                y=part["seconds"],
                name=name,
                marker_color=color,
                customdata=np.stack([part["count"]], axis=-1),
                hovertemplate="step %{x}<br>%{y:.3f} s in %{customdata[0]} compile(s)<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="compile time (s)")
    return fig
