"""Trace views that stay responsive at millions of events.

The browser never gets the raw events: the activity heatmap bins every event
exactly, and the timeline draws only the longest events of the visible window,
re-queried on zoom. The Trace page aggregates with DuckDB over the store
(dashboards/trace_view.py) and hands the results to activity_figure, ops_table and
trace_timeline(in_view=...); the frame versions (activity_heatmap: prefix sums over
sorted starts and ends; top_ops) serve callers holding events in memory.
Expected columns: plane, line, name, start_ns, dur_ns (optional: step, hlo_op).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .common import NS_PER_MS, PALETTE, base_figure, colorbar, empty_figure

MAX_EVENTS = 3000
MAX_LANES = 40
OP_COLUMNS = ["plane", "name", "count", "total_ms", "mean_us", "max_us"]


def lane_label(plane: object, line: object) -> str:
    return f"{plane} / {line}"


def in_window(events: pd.DataFrame, t0: int | None, t1: int | None) -> pd.DataFrame:
    """Events overlapping [t0, t1] (absolute ns); the whole table when no window is set."""
    if t0 is None and t1 is None:
        return events
    start = events["start_ns"].to_numpy()
    end = start + events["dur_ns"].to_numpy()
    mask = np.ones(len(events), dtype=bool)
    if t1 is not None:
        mask &= start <= t1
    if t0 is not None:
        mask &= end >= t0
    return events[mask]


def longest(events: pd.DataFrame, n: int) -> pd.DataFrame:
    """The n longest events (the ones wide enough to see), in time order."""
    if len(events) > n:
        dur = events["dur_ns"].to_numpy()
        events = events.iloc[np.argpartition(-dur, n - 1)[:n]]
    return events.sort_values("start_ns")


def busy_ns(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Exact busy time per bin [edges[i], edges[i+1]) of the union-free sum of intervals.

    F(x) = sum over events of overlap([s, e], (-inf, x]) = sum_{s<x}(x-s) - sum_{e<x}(x-e);
    with sorted starts/ends and prefix sums each edge costs two binary searches.
    """
    s, e = (
        np.sort(starts, kind="stable"),
        np.sort(ends, kind="stable"),
    )  # adaptive: traces come sorted
    cs = np.concatenate([[0], np.cumsum(s)])
    ce = np.concatenate([[0], np.cumsum(e)])
    i = np.searchsorted(s, edges, side="left")
    j = np.searchsorted(e, edges, side="left")
    covered = (i * edges - cs[i]) - (j * edges - ce[j])
    return np.diff(covered)


def _codes(column: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer codes and labels of a column (categoricals as stored; others factorized)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy().astype(np.int64), [str(c) for c in column.cat.categories]
    codes, labels = pd.factorize(column)
    return codes.astype(np.int64), [str(c) for c in labels]


def lane_keys(events: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """One integer per event naming its (plane, line) lane, and each key's label.

    Numpy on dictionary codes instead of a pandas groupby over two columns:
    a million events group in milliseconds.
    """
    planes, plane_names = _codes(events["plane"])
    lines, line_names = _codes(events["line"])
    keys = planes * max(1, len(line_names)) + lines
    labels = [lane_label(p, li) for p in plane_names for li in line_names]
    return keys, labels


def activity_matrix(
    events: pd.DataFrame, origin_ns: int, bins: int, t0: int, t1: int, max_lanes: int = MAX_LANES
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(lane labels, bin edges in ns since origin, busy % per lane and bin), busiest lanes first."""
    edges = np.linspace(t0 - origin_ns, t1 - origin_ns, bins + 1).astype(np.int64)
    keys, labels = lane_keys(events)
    dur = events["dur_ns"].to_numpy()
    start = events["start_ns"].to_numpy() - origin_ns
    totals = np.bincount(keys, weights=dur, minlength=len(labels))
    present = np.bincount(keys, minlength=len(labels)) > 0
    lanes = [k for k in np.argsort(-totals, kind="stable") if present[k]][:max_lanes]
    order = np.argsort(keys, kind="stable")
    bounds = np.searchsorted(keys[order], np.arange(len(labels) + 1))
    width = max(1, int(edges[1] - edges[0])) if bins else 1
    rows = []
    for k in lanes:
        idx = order[bounds[k] : bounds[k + 1]]
        rows.append(
            np.minimum(100.0, 100.0 * busy_ns(start[idx], start[idx] + dur[idx], edges) / width)
        )
    return [labels[k] for k in lanes], edges, np.array(rows) if rows else np.zeros((0, bins))


def activity_heatmap(
    events: pd.DataFrame, origin_ns: int, bins: int = 300, window: tuple[int, int] | None = None
) -> go.Figure:
    """Busy % of every trace line over time, computed from all events (no sampling)."""
    if events.empty:
        return empty_figure("No trace events in this run")
    t0, t1 = window or (
        int(events["start_ns"].min()),
        int((events["start_ns"] + events["dur_ns"]).max()),
    )
    lanes, edges, busy = activity_matrix(in_window(events, t0, t1), origin_ns, bins, t0, t1)
    return _heatmap(lanes, (edges[:-1] + edges[1:]) / 2 / NS_PER_MS, busy, len(events))


def activity_figure(
    busy: pd.DataFrame, events: int, t0: int, t1: int, bins: int, max_lanes: int = MAX_LANES
) -> go.Figure:
    """The heatmap from busy ns per (plane, line, bin b) aggregated elsewhere (the Trace page's
    SQL): bins of equal width from t0 (the origin) to t1, busiest lanes first."""
    if not events or busy.empty:
        return empty_figure("No trace events in this run")
    width = max(1.0, (t1 - t0) / bins)
    labels = [lane_label(p, li) for p, li in zip(busy["plane"], busy["line"], strict=True)]
    keys, lanes = pd.factorize(pd.Series(labels))
    matrix = np.zeros((len(lanes), bins))
    np.add.at(
        matrix, (keys, busy["b"].to_numpy(dtype=np.int64)), busy["busy"].to_numpy(dtype=float)
    )
    order = np.argsort(-matrix.sum(axis=1), kind="stable")[:max_lanes]
    centers = (np.arange(bins) + 0.5) * width / NS_PER_MS
    return _heatmap(
        [str(lanes[k]) for k in order],
        centers,
        np.minimum(100.0, 100.0 * matrix[order] / width),
        events,
    )


def _heatmap(lanes: list[str], centers_ms: np.ndarray, busy: np.ndarray, events: int) -> go.Figure:
    fig = base_figure(
        f"Activity of every event ({events:,} events, busy % per line)",
        height=max(220, 90 + 22 * len(lanes)),
        colorbar=True,
    )
    fig.add_trace(
        go.Heatmap(
            z=busy,
            x=centers_ms,
            y=lanes,
            colorscale="Blues",
            zmin=0,
            zmax=100,
            colorbar=colorbar("busy %"),
            hovertemplate="%{y}<br>%{x:.3f} ms<br>%{z:.0f}% busy<extra></extra>",
        )
    )
    fig.update_xaxes(title_text="time since trace start (ms)")
    fig.update_yaxes(autorange="reversed", automargin=True)
    return fig


# Each lane is drawn as line segments, one SVG path per (lane, colour), not a bar per event:
# Plotly lays out and paints every bar (and every marker) as its own element, which made the
# Trace page take ~3.5 s to settle in Chromium at 3,000 events (segments: ~1.5 s, same events,
# same machine). Hover is on a segment's ends (the name on its start) from numbers the figure
# carries, in float32 where precision allows: a hover string per event was 70% of a 700 KB page.
HOVER = "%{text}<br>%{fullData.name}<br>at %{x:.3f} ms<br>duration %{customdata[0]:.4f} ms"
LANE_WIDTH_PX = 14
LANE_GAP_PX = 12  # between an image's lanes (28 px a lane, as the segments: 14 px wide)


def event_steps(shown: pd.DataFrame) -> np.ndarray:
    """Each event's step as floats, NaN where none was recorded (no column, or the store's -1
    for an event outside every step): a hover never shows "step -1" (issue 29)."""
    if "step" not in shown:
        return np.full(len(shown), np.nan)
    steps = shown["step"].to_numpy(dtype=float)
    return np.where(steps >= 0, steps, np.nan)


def _segments(
    shown: pd.DataFrame,
    mask: np.ndarray,
    start: np.ndarray,
    dur: np.ndarray,
    row: int,
    label: str,
    color: str,
) -> go.Scatter:
    """One line trace: start, end, gap (NaN breaks the line) per event, hover at both ends."""
    n = int(mask.sum())
    gap = np.full(n, np.nan)
    x = np.column_stack([start[mask], start[mask] + dur[mask], gap]).ravel()
    y = np.column_stack([np.full((n, 2), row), gap]).ravel().astype(np.float32)
    steps = event_steps(shown)[mask]
    custom = np.repeat(dur[mask].astype(np.float32)[:, None], 3, axis=0)
    labels = [  # the step in words only where one was recorded (no "step nan")
        name if np.isnan(k) else f"{name}<br>step {k:.0f}"
        for name, k in zip(shown["name"].astype(str).to_numpy()[mask], steps, strict=True)
    ]
    names = np.column_stack([np.asarray(labels, dtype=object), np.full((n, 2), "")]).ravel()
    return go.Scatter(
        x=x,
        y=y,
        mode="lines",
        name=label,
        line={"width": LANE_WIDTH_PX, "color": color},
        text=names,
        customdata=custom,
        hovertemplate=HOVER + "<extra></extra>",
    )


def _image(
    shown: pd.DataFrame,
    keys: np.ndarray,
    lanes: list[str],
    colors: np.ndarray,
    window: tuple[float, float],
    pixels: int,
) -> go.Heatmap:
    """The picked events as cells of a lanes x `pixels` image over `window` (ms since the
    origin): each event fills the cells it covers, the longest one a cell's owner; empty cells
    are gaps. One picture for Plotly to paint, where a segment per event was an SVG path each
    (2,000 paths cost the renderer ~0.8 s of its ~1.4 s, issue 30). Hover: the cell's event."""
    start = shown["start_ns"].to_numpy()  # ms since the origin here (trace_timeline)
    dur = shown["dur_ns"].to_numpy()
    width = max((window[1] - window[0]) / pixels, 1e-12)
    first = np.clip(((start - window[0]) / width).astype(np.int64), 0, pixels - 1)
    last = np.clip(((start + dur - window[0]) / width).astype(np.int64), first, pixels - 1)
    count = last - first + 1
    event = np.repeat(np.arange(len(shown)), count)
    cell = (
        keys[event] * pixels
        + first[event]
        + np.arange(len(event))
        - np.repeat(np.cumsum(count) - count, count)
    )
    order = np.lexsort((dur[event], cell))  # by cell, the longest last
    cell, event = cell[order], event[order]
    owner = np.r_[cell[1:] != cell[:-1], True]
    cell, event = cell[owner], event[owner]
    z = np.full(len(lanes) * pixels, np.nan)
    z[cell] = colors[event] + 0.5
    steps = event_steps(shown)
    hover = [
        f"{name}<br>at {s:.3f} ms<br>duration {d:.4f} ms"
        + ("" if np.isnan(k) else f"<br>step {k:.0f}")
        for name, s, d, k in zip(shown["name"].astype(str), start, dur, steps, strict=True)
    ]
    text = np.full(len(lanes) * pixels, "", dtype=object)
    text[cell] = np.asarray(hover, dtype=object)[event]
    scale = [[(i + edge) / len(PALETTE), c] for i, c in enumerate(PALETTE) for edge in (0, 1)]
    return go.Heatmap(  # float32 (colour codes) and x0/dx: a smaller payload than float64 and x
        z=z.astype(np.float32).reshape(len(lanes), pixels),
        x0=window[0] + 0.5 * width,
        dx=width,
        y=lanes,
        text=text.reshape(len(lanes), pixels),
        colorscale=scale,
        zmin=0,
        zmax=len(PALETTE),
        showscale=False,
        hoverongaps=False,
        ygap=LANE_GAP_PX,
        hovertemplate="%{text}<br>%{y}<extra></extra>",
    )


def trace_timeline(
    events: pd.DataFrame,
    origin_ns: int,
    window: tuple[int, int] | None = None,
    max_events: int = MAX_EVENTS,
    in_view: int | None = None,
    pixels: int | None = None,
) -> go.Figure:
    """The longest events in the window as segments, one row per trace line (busiest on top),
    coloured by name; zoom re-queries. Each event is three points of a line trace (start, end, gap).
    `in_view`: the events were picked already (the Trace page's SQL: the longest of each line's
    pixel-wide buckets) out of that many in the window. `pixels` (with a window): when only
    some of the events in view are shown, they are drawn as an image of that many columns."""
    if events.empty:
        return empty_figure("No trace events in this run")
    if in_view is None:
        visible = in_window(events, *(window or (None, None)))
        shown, in_view = longest(visible, max_events), len(visible)
        how = "zoom in for more"
    else:
        shown, how = (
            events.sort_values("start_ns"),
            "the longest per pixel of each line; zoom in for more",
        )
    title = (
        f"Timeline: all {in_view:,} events in view"
        if len(shown) == in_view
        else f"Timeline: the {len(shown):,} longest of {in_view:,} events in view ({how})"
    )
    keys, labels = lane_keys(shown)
    totals = np.bincount(keys, weights=shown["dur_ns"].to_numpy(), minlength=len(labels))
    order = [k for k in np.argsort(-totals, kind="stable") if (keys == k).any()]
    fig = base_figure(title, height=max(260, 100 + 28 * len(order)))
    colors = pd.factorize(shown["name"].astype(str))[0] % len(PALETTE)
    start = (shown["start_ns"].to_numpy() - origin_ns) / NS_PER_MS
    dur = shown["dur_ns"].to_numpy() / NS_PER_MS
    if pixels and window and len(shown) < in_view:
        rows = np.empty(len(labels), dtype=np.int64)
        rows[order] = np.arange(len(order))
        ms = ((window[0] - origin_ns) / NS_PER_MS, (window[1] - origin_ns) / NS_PER_MS)
        lanes = [labels[k] for k in order]
        picked = shown.assign(start_ns=start, dur_ns=dur)
        fig.add_trace(_image(picked, rows[keys], lanes, colors, ms, pixels))
        fig.update_yaxes(autorange="reversed", automargin=True)
    else:
        for row, key in enumerate(order):
            lane = keys == key
            for color in np.unique(colors[lane]):
                mask = lane & (colors == color)
                fig.add_trace(_segments(shown, mask, start, dur, row, labels[key], PALETTE[color]))
        fig.update_yaxes(
            tickmode="array",
            tickvals=list(range(len(order))),
            ticktext=[labels[k] for k in order],
            range=[len(order) - 0.5, -0.5],
            automargin=True,
        )
    if window:
        fig.update_xaxes(
            range=[(window[0] - origin_ns) / NS_PER_MS, (window[1] - origin_ns) / NS_PER_MS]
        )
    fig.update_layout(showlegend=False, hovermode="closest")
    fig.update_xaxes(title_text="time since trace start (ms)")
    return fig


def ops_table(stats: pd.DataFrame) -> pd.DataFrame:
    """The op table's columns from (plane, name, count, total ns, longest ns) per op."""
    count, total = stats["count"].to_numpy(), stats["total"].to_numpy(dtype=float)
    return pd.DataFrame(
        {
            "plane": stats["plane"].astype(str),
            "name": stats["name"].astype(str),
            "count": count.astype(int),
            "total_ms": total / NS_PER_MS,
            "mean_us": total / count / 1e3,
            "max_us": stats["longest"].to_numpy(dtype=float) / 1e3,
        },
        columns=OP_COLUMNS,
    )


def top_ops(events: pd.DataFrame, n: int = 50) -> pd.DataFrame:
    """Time per event name and plane, most total time first (an op profile of the window)."""
    if events.empty:
        return pd.DataFrame(columns=OP_COLUMNS)
    planes, plane_names = _codes(events["plane"])
    names, op_names = _codes(events["name"])
    keys = planes * len(op_names) + names
    stats = (
        pd.Series(events["dur_ns"].to_numpy()).groupby(keys).agg(["size", "sum", "max"])
    )  # one int key: fast
    stats = stats.nlargest(n, "sum")
    top = stats.index.to_numpy()
    return ops_table(
        pd.DataFrame(
            {
                "plane": [plane_names[k // len(op_names)] for k in top],
                "name": [op_names[k % len(op_names)] for k in top],
                "count": stats["size"].to_numpy(),
                "total": stats["sum"].to_numpy(),
                "longest": stats["max"].to_numpy(),
            }
        )
    )
