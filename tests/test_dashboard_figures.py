"""The dashboard's figures without a browser: figure builders, decimation, shape diffs
(the store reader, router and pages' tables are in test_dashboard_data.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tpuscope.analyze.contract import ShapeChurnFacet
from tpuscope.dashboards.figures.churn import dim_values
from tpuscope.dashboards.figures.common import minmax_indices, x_window
from tpuscope.dashboards.figures.compare import grouped_counts, step_time_histograms
from tpuscope.dashboards.figures.fallbacks import (
    fallback_heatmap,
    fallback_matrix,
    transfers_timeline,
)
from tpuscope.dashboards.figures.steps import compile_bars, step_timeline
from tpuscope.dashboards.figures.tensorcore import (
    busy_idle_bars,
    dot_waste,
    padding_waste_bars,
    weighted_waste,
)
from tpuscope.dashboards.figures.trace import (
    activity_heatmap,
    activity_matrix,
    busy_ns,
    top_ops,
    trace_timeline,
)
from tpuscope.dashboards.pages.churn import churn_buckets
from tpuscope.dashboards.shapes import finding_values, varying_by_step

MS = 1_000_000


def steps_frame(walls_ms: list[float], rank: int = 0) -> pd.DataFrame:
    n = len(walls_ms)
    return pd.DataFrame(
        {
            "host": "h",
            "pid": 1,
            "rank": rank,
            "step": range(n),
            "wall_ns": [int(w * MS) for w in walls_ms],
            "transfers_from_device": ([0, 0] + [2] * n)[:n],
        }
    )


def compiles_frame(rows: list[tuple[int, float, str, list[str] | None]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "step": step,
                "index": i,
                "time_ns": i,
                "duration_ns": int(sec * 1e9),
                "graph_hash": f"h{i}",
                "cause": "user torch_xla.sync",
                "location": loc,
                "frames": ["f"],
                "input_shapes": shapes,
                "num_inputs": 1,
                "num_outputs": 1,
            }
            for i, (step, sec, loc, shapes) in enumerate(rows)
        ]
    )


def fallbacks_frame(rows: list[tuple[int, str, int]]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"step": s, "op": op, "count": c, "location": "train.py:9"} for s, op, c in rows]
    )


# --- decimation -------------------------------------------------------------------


def test_minmax_keeps_every_spike_and_bounds_the_points():
    values = np.full(100_000, 40.0)
    values[[7, 54_321, 99_999]] = [9000.0, 1200.0, 3.0]
    keep = minmax_indices(values, 4000)
    assert len(keep) <= 4000
    assert {7, 54_321, 99_999} <= set(keep.tolist())
    assert np.all(np.diff(keep) > 0)
    assert minmax_indices(values[:100], 4000).tolist() == list(range(100))


@pytest.mark.parametrize(
    ("relayout", "expected"),
    [
        (None, None),
        ({"autosize": True}, None),
        ({"xaxis.autorange": True}, "reset"),
        ({"xaxis.range[0]": 1, "xaxis.range[1]": 5}, (1.0, 5.0)),
        ({"xaxis2.range": [2, 3]}, (2.0, 3.0)),
    ],
)
def test_x_window_reads_plotly_zoom_events(relayout, expected):
    assert x_window(relayout) == expected


# --- step timeline and compiles ------------------------------------------------------


def test_step_timeline_marks_compiles_at_their_step_time_with_cause_and_frame():
    steps = steps_frame([9000, 7000, 40, 41, 1300, 40])
    compiles = compiles_frame(
        [
            (0, 8.9, "train.py:67", None),
            (1, 6.9, "train.py:67", None),
            (4, 1.25, "train.py:70", None),
        ]
    )
    fallbacks = fallbacks_frame(
        [(2, "aten::nonzero", 2), (4, "aten::nonzero", 2), (4, "aten::_local_scalar_dense", 1)]
    )
    fig = step_timeline(steps, compiles, fallbacks, warmup=2)
    line, marks, bars = fig.data
    assert list(line.x) == [0, 1, 2, 3, 4, 5]
    assert list(line.y) == [9000, 7000, 40, 41, 1300, 40]
    assert list(marks.x) == [0, 1, 4] and list(marks.y) == [9000, 7000, 1300]
    assert (
        "cause: user torch_xla.sync" in marks.hovertext[2] and "train.py:70" in marks.hovertext[2]
    )
    assert "1.25 s" in marks.hovertext[2]
    assert list(bars.x) == [2, 4] and list(bars.y) == [
        2,
        2,
    ]  # value reads are host syncs, counted apart
    assert (
        "aten::nonzero x2" in bars.hovertext[1] and "_local_scalar_dense" not in bars.hovertext[1]
    )
    assert fig.layout.yaxis.type == "log"
    assert fig.layout.shapes[0].x1 == 1.5  # warm-up band ends before step 2


def test_step_timeline_of_100k_steps_sends_a_bounded_line_that_keeps_the_spike():
    walls = np.full(100_000, 40.0)
    walls[77_777] = 5000.0
    fig = step_timeline(
        steps_frame(list(walls)), compiles_frame([]), fallbacks_frame([]), 2, max_points=4000
    )
    assert len(fig.data[0].x) <= 4000
    assert 5000.0 in list(fig.data[0].y)
    zoomed = step_timeline(
        steps_frame(list(walls)),
        compiles_frame([]),
        fallbacks_frame([]),
        2,
        max_points=4000,
        x_range=(77_700, 77_800),
    )
    assert list(zoomed.data[0].x) == list(range(77_700, 77_801))


def test_step_timeline_draws_one_line_per_process():
    steps = pd.concat([steps_frame([50, 40, 40]), steps_frame([60, 45, 44], rank=1)])
    fig = step_timeline(steps, compiles_frame([]), fallbacks_frame([]), warmup=1)
    assert [t.name for t in fig.data] == ["rank 0 on h", "rank 1 on h"]


def test_empty_tables_give_a_figure_that_says_why():
    fig = step_timeline(steps_frame([]), compiles_frame([]), fallbacks_frame([]), 2)
    assert "No steps" in fig.layout.annotations[0].text
    assert "No CPU fallbacks" in fallback_heatmap(fallbacks_frame([])).layout.annotations[0].text


def test_compile_bars_split_first_compiles_from_recompiles_and_sum_per_step():
    from tpuscope.analyze.families import graph_families

    compiles = compiles_frame(
        [(0, 9.0, "a", None), (5, 1.0, "a", None), (5, 0.5, "a", None), (6, 2.0, "b", None)]
    )
    first, again = compile_bars(graph_families(compiles)).data
    assert (
        first.name == "first compiles" and list(first.x) == [0, 6] and list(first.y) == [9.0, 2.0]
    )
    assert again.name == "recompiles" and list(again.x) == [5] and list(again.y) == [1.5]


# --- fallbacks ------------------------------------------------------------------------


def test_fallback_matrix_bins_many_steps_and_keeps_every_call():
    rows = [(s, "aten::nonzero", 2) for s in range(1000)] + [
        (s, "aten::_local_scalar_dense", 1) for s in range(0, 1000, 10)
    ]
    fallbacks = fallbacks_frame(rows)
    matrix, width = fallback_matrix(fallbacks, max_columns=200)
    assert width == 5 and matrix.shape[1] == 200
    assert list(matrix.index) == ["aten::nonzero", "aten::_local_scalar_dense"]
    assert int(matrix.to_numpy().sum()) == 2 * 1000 + 100
    heat = fallback_heatmap(fallbacks).data[0]
    assert "5 steps per column" in fallback_heatmap(fallbacks).layout.title.text
    assert heat.customdata[0][0] == "0-4"


def test_fallback_heatmap_colour_bar_counts_from_zero_clear_of_the_modebar():
    """Session 11: the colour bar's labels sat under the vertical modebar (checked in chromium:
    a right margin as wide as both keeps them apart), and a single count of 3 read 2.5..3.5."""
    from tpuscope.dashboards.figures.common import COLORBAR_PX, MODEBAR_PX

    fig = fallback_heatmap(fallbacks_frame([(s, "aten::nonzero", 3) for s in range(4)]))
    heat = fig.data[0]
    assert (
        (heat.zmin, heat.zmax) == (0, 3)
        and heat.colorbar.tickformat == ",d"
        and heat.colorbar.dtick == 1
    )
    assert fig.layout.margin.r == COLORBAR_PX + MODEBAR_PX
    # the Trace page's activity has a colour bar too (session 16: its "busy %" sat under the modebar)
    events = pd.DataFrame(
        {
            "plane": ["p"] * 2,
            "line": ["l"] * 2,
            "name": ["a", "b"],
            "start_ns": [0, 10],
            "dur_ns": [5, 5],
        }
    )
    activity = activity_heatmap(events, 0, bins=4)
    assert activity.layout.margin.r == COLORBAR_PX + MODEBAR_PX
    assert activity.data[0].colorbar.title.side == "right"


def test_transfers_timeline_plots_transfers_per_step():
    fig = transfers_timeline(steps_frame([50, 40, 40, 40]), warmup=2)
    assert list(fig.data[0].y) == [0, 0, 2, 2]


# --- compare --------------------------------------------------------------------------


def test_step_time_histograms_share_bins_and_sum_to_100_percent():
    a = pd.Series(np.full(100, 40 * MS))
    b = pd.Series(np.concatenate([np.full(50, 20 * MS), np.full(50, 80 * MS)]))
    fig = step_time_histograms({"A": a, "B": b}, bins=20)
    assert [t.name for t in fig.data] == ["A", "B"]
    assert list(fig.data[0].x) == list(fig.data[1].x)
    for trace in fig.data:
        assert sum(trace.y) == pytest.approx(100.0)
    counts = grouped_counts(
        {"A": pd.Series({"aten::nonzero": 4}), "B": pd.Series(dtype=float)}, "t", "calls"
    )
    assert list(counts.data[0].x) == [4.0] and list(counts.data[1].x) == [0.0]


# --- TensorCore -----------------------------------------------------------------------


def test_padding_waste_per_generation_is_flop_weighted():
    dots = dot_waste(
        pd.DataFrame(
            {"label": ["a", "b"], "batch": [1, 1], "m": [8, 8], "n": [128, 128], "k": [64, 128]}
        )
    )
    assert dots["waste_v5e"].tolist() == [0.5, 0.0]  # K=64 fills half of a 128-wide pass
    assert dots["waste_v6e"].tolist() == [
        pytest.approx(0.875),
        pytest.approx(0.75),
    ]  # 256x256 array
    # FLOP-weighted: b does twice the work of a, a wastes half on v5e -> 0.5 * 1/3
    assert weighted_waste(dots, "v5e") == pytest.approx(0.5 / 3)
    fig = padding_waste_bars(dots)
    assert [t.name for t in fig.data] == [
        "v5e (128x128)",
        "v5p (128x128)",
        "v6e (256x256)",
        "v7 (256x256)",
    ]
    steps = pd.DataFrame(
        {
            "device": "/device:TPU:0",
            "step": [10, 11],
            "busy_ns": [30 * MS, 32 * MS],
            "idle_ns": [10 * MS, 8 * MS],
        }
    )
    busy, idle = busy_idle_bars(steps).data
    assert list(busy.y) == [30, 32] and list(idle.y) == [10, 8]


# --- trace ----------------------------------------------------------------------------


def test_busy_ns_is_exact_against_brute_force():
    rng = np.random.default_rng(3)
    starts = rng.integers(0, 10_000, 300)
    ends = starts + rng.integers(1, 500, 300)
    edges = np.linspace(0, 11_000, 23).astype(np.int64)
    brute = [
        sum(max(0, min(e, hi) - max(s, lo)) for s, e in zip(starts, ends, strict=True))
        for lo, hi in zip(edges[:-1], edges[1:], strict=True)
    ]
    assert busy_ns(starts, ends, edges).tolist() == brute


def trace_frame(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    dur = rng.integers(100, 10_000, n)
    return pd.DataFrame(
        {
            "plane": pd.Categorical(["/device:TPU:0"] * n),
            "line": pd.Categorical(np.where(np.arange(n) % 4, "XLA Ops", "Steps")),
            "name": pd.Categorical(np.where(np.arange(n) % 2, "fusion.1", "dot.3")),
            "start_ns": 1_000_000 + np.arange(n) * 20_000,
            "dur_ns": dur,
            "step": np.arange(n) // 100,
        }
    )


def test_trace_timeline_shows_only_the_longest_events_of_the_window():
    events = trace_frame(50_000)
    fig = trace_timeline(events, origin_ns=1_000_000, max_events=3000)
    lanes = [
        t for t in fig.data if t.mode == "lines"
    ]  # a trace per (line, colour): start, end, gap per event
    widths = np.concatenate([np.asarray(t.customdata)[::3, 0] for t in lanes])
    assert (
        len(widths) == 3000
        and sum(int(np.isnan(np.asarray(t.x, dtype=float)).sum()) for t in lanes) == 3000
    )
    assert {t.name for t in fig.data} <= set(
        events["plane"].astype(str) + " / " + events["line"].astype(str)
    )
    assert min(widths) * 1e6 >= np.sort(events["dur_ns"].to_numpy())[-3000] - 1
    assert "3,000 longest of 50,000" in fig.layout.title.text
    window = (1_000_000 + 100 * 20_000, 1_000_000 + 200 * 20_000)
    zoomed = trace_timeline(events, 1_000_000, window=window, max_events=3000)
    assert sum(len(t.x) for t in zoomed.data) == 3 * 101
    assert "all 101 events" in zoomed.layout.title.text


def test_trace_hovers_name_a_step_only_where_one_was_recorded():
    events = trace_frame(400).assign(step=lambda f: np.where(np.arange(len(f)) % 2, -1, 7))
    every = trace_timeline(events, 1_000_000, max_events=400)  # segments: every event shown
    labels = [t for tr in every.data for t in tr.text if t]
    assert len(labels) == 400 and sum("<br>step 7" in t for t in labels) == 200
    end = int((events["start_ns"] + events["dur_ns"]).max())
    image = trace_timeline(  # some of the events in view picked: drawn as an image
        events.head(100), 1_000_000, window=(1_000_000, end), in_view=400, pixels=90
    ).data[0]
    cells = [c for row in image.text for c in row if c]
    assert image.type == "heatmap" and cells
    assert not any("step -1" in c or "nan" in c for c in [*labels, *cells])


def test_activity_matrix_and_top_ops_account_for_every_event():
    events = trace_frame(2000)
    t0, t1 = 1_000_000, int((events["start_ns"] + events["dur_ns"]).max())
    lanes, edges, busy = activity_matrix(events, 1_000_000, 50, t0, t1)
    assert set(lanes) == {"/device:TPU:0 / XLA Ops", "/device:TPU:0 / Steps"} and busy.shape == (
        2,
        50,
    )
    width = edges[1] - edges[0]
    assert (busy / 100 * width).sum() == pytest.approx(events["dur_ns"].sum(), rel=0.01)
    ops = top_ops(events)
    assert int(ops["count"].sum()) == 2000
    assert ops["total_ms"].sum() == pytest.approx(events["dur_ns"].sum() / 1e6)


# --- shapes and churn -----------------------------------------------------------------


def judged(compiles: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The compiles as StoreData.compiles_judged gives them: the analysis's families (RunTables)
    and the recompile rule's pick and diff (detect.compile_changes.compile_diffs), with the grid's words."""
    from tpuscope.dashboards.pages.recompiles import diff_text
    from tpuscope.detect import RunTables
    from tpuscope.detect.compile_changes import compile_diffs

    tables = RunTables(
        meta={},
        steps=pd.DataFrame(),
        compiles=compiles,
        fallbacks=pd.DataFrame(),
        metrics=pd.DataFrame(),
    )
    tables.__dict__["families"] = tables.families.reset_index(drop=True)
    diffs = compile_diffs(tables)
    return tables.families, diffs.assign(
        diff=[diff_text(p, c) for p, c in zip(diffs["predecessor"], diffs["changes"], strict=True)]
    )


def test_shape_diff_names_the_changed_argument_against_the_rules_closest_graph():
    compiles = compiles_frame(
        [
            (0, 1, "a.py:1", ["f32[4,41]", "f32[8]"]),
            (1, 1, "b.py:2", ["f32[9]"]),
            (3, 1, "a.py:1", ["f32[4,53]", "f32[9]"]),
            (4, 1, "a.py:1", ["f32[4,41]", "f32[9]"]),
            (5, 1, "a.py:1", ["f32[4,41]", "f32[9]"]),
        ]
    )
    families, diffs = judged(compiles)
    assert diffs.loc[0, "diff"] == "first compile of this graph"
    assert diffs.loc[1, "diff"] == "first compile of this graph"
    assert diffs.loc[2, "changes"] == ["arg 0: f32[4,41] -> f32[4,53]", "arg 1: f32[8] -> f32[9]"]
    # closest earlier graph of the family by tpuscope's shape_distance (the recompile rule's choice):
    # #0 and #2 both differ in one dim; #0's change (8 -> 9) is the smaller one
    from tpuscope.analyze.shapes import shape_distance

    assert shape_distance(["f32[4,41]", "f32[8]"], ["f32[4,41]", "f32[9]"]) < shape_distance(
        ["f32[4,53]", "f32[9]"], ["f32[4,41]", "f32[9]"]
    )
    assert diffs.loc[3, "predecessor"] == 0 and diffs.loc[3, "changes"] == [
        "arg 1: f32[8] -> f32[9]"
    ]
    assert diffs.loc[4, "predecessor"] == 3  # the same shapes compiled again: its own earlier graph
    assert families["recompile"].tolist() == [False, False, True, True, True]


def test_varying_dims_per_step_and_a_churn_findings_values():
    compiles = compiles_frame(
        [
            (s, 1, "a.py:1", [f"s64[8,{n}]", "f32[64,32]"])
            for s, n in [(0, 16), (3, 41), (5, 53), (9, 41)]
        ]
    )
    varying = varying_by_step(judged(compiles)[0])
    assert varying["dim"].unique().tolist() == ["arg 0 dim 1"]
    assert varying["step"].tolist() == [0, 3, 5, 9] and varying["value"].tolist() == [
        16,
        41,
        53,
        41,
    ]
    evidence = ShapeChurnFacet(arg=0, dim=1, graph_hashes=["h1", "h2", "h3"], buckets=[48, 56])
    values = finding_values(compiles, evidence)
    assert values["step"].tolist() == [3, 5, 9] and values["value"].tolist() == [41, 53, 41]
    assert churn_buckets(evidence) == [48, 56]
    fig = dim_values(values, churn_buckets(evidence))
    assert [s.y0 for s in fig.layout.shapes] == [48, 56]
