"""The Trace page's DuckDB queries (dashboards/trace_view.py) against the events they read:
busy time is exact, every event is counted once, the timeline keeps one event per line and
pixel-wide bucket, a zoom re-reads its window."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.synthetic import make_run
from tpuscope.dashboards import trace_view as trace
from tpuscope.dashboards.data import StoreData


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> tuple[StoreData, str, pd.DataFrame]:
    store = tmp_path_factory.mktemp("trace-sql")
    run_dir = make_run(store, "t", steps=50, trace_events=6000, recompiles=2)
    return StoreData(store), run_dir.name, pd.read_parquet(Path(run_dir) / "trace_events")


def test_busy_ops_and_summary_account_for_every_event(
    synth: tuple[StoreData, str, pd.DataFrame],
) -> None:
    data, run_id, events = synth
    t0, t1 = int(events["start_ns"].min()), int((events["start_ns"] + events["dur_ns"]).max())
    plane = trace._plane(False)
    con = data.duckdb(run_id, ["trace_events"])
    try:
        head, ops = trace._head(con.sql(trace._head_sql()).df())
        grid = con.sql(trace._grid_sql(plane, t0, t1)).to_arrow_table()
    finally:
        con.close()
    busy = trace._busy(grid, t0, t1)
    assert busy["busy"].sum() == pytest.approx(events["dur_ns"].sum(), rel=1e-9)
    assert set(busy["b"]) <= set(range(trace.BINS))
    # each bin's busy ns against the events' overlaps with it, computed here in pandas
    width = (t1 - t0) / trace.BINS
    lane = events["plane"].astype(str) + " / " + events["line"].astype(str)
    start = events["start_ns"] - t0  # relative: ns since 1970 as floats are 256 ns apart
    end = start + events["dur_ns"]
    for b in (0, 7, trace.BINS - 1):
        lo, hi = b * width, (b + 1) * width
        overlap = (end.clip(upper=hi) - start.clip(lower=lo)).clip(lower=0)
        rows = busy[busy["b"] == b]
        mine = rows.set_index(rows["plane"] + " / " + rows["line"])["busy"]
        expected = overlap.groupby(lane).sum()
        assert mine.reindex(expected.index, fill_value=0).to_numpy() == pytest.approx(
            expected.to_numpy(), rel=1e-9, abs=1e-3
        )
    assert int(grid["n"].to_numpy().sum()) == len(events)
    assert ops["count"].sum() == len(events) and ops["total"].sum() == events["dur_ns"].sum()
    assert (head["events"], int(head["t0"]), int(head["t1"])) == (len(events), t0, t1)
    view = trace.overview(data, run_id)
    assert view["events"] == len(events) and view["lines"] == len(
        events[["plane", "line"]].drop_duplicates()
    )


def test_the_timeline_keeps_one_event_per_line_and_pixel_and_a_zoom_reads_its_window(
    synth: tuple[StoreData, str, pd.DataFrame],
) -> None:
    data, run_id, events = synth
    t0, t1 = int(events["start_ns"].min()), int((events["start_ns"] + events["dur_ns"]).max())
    (shown,) = trace._query(
        data, run_id, [trace._timeline_sql(trace._plane(False), t0, t1, 1000, pixels=300)]
    )
    px = (t1 - t0) / 300
    every = events.assign(
        b=((events["start_ns"] - t0) // px).astype(int),
        plane=events["plane"].astype(str),
        line=events["line"].astype(str),
    )
    longest = every.groupby(["plane", "line", "b"])["dur_ns"].max()
    assert len(shown) == min(1000, len(longest)) and int(shown["in_view"].iloc[0]) == len(events)
    picked = shown.assign(b=((shown["start_ns"] - t0) // px).astype(int)).set_index(
        ["plane", "line", "b"]
    )["dur_ns"]
    assert picked.index.is_unique and (picked == longest.loc[picked.index]).all()
    lo, hi = t0 + 5_000_000, t0 + 6_000_000
    in_view = events[(events["start_ns"] <= hi) & (events["start_ns"] + events["dur_ns"] >= lo)]
    fig = trace.timeline(data, run_id, (5.0, 6.0))
    assert f"all {len(in_view):,} events in view" in fig.layout.title.text
