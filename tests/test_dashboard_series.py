"""The step timeline as DuckDB reduces it (dashboards/series.py), against the run's tables
read whole: the same compile markers and fallback bars, a line that keeps every bucket's
extremes, full detail inside a zoom window, one line per process or the slowest of many.

The runs are synthetic (real Parquet in the store's schemas, split into parts as a live run
flushes them); every expectation is computed here from the tables tpuscope's Run reads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from tests.synthetic import make_run
from tpuscope.analyze.judge import VALUE_READ_OPS
from tpuscope.dashboards import series
from tpuscope.dashboards.data import StoreData
from tpuscope.dashboards.figures.steps import MAX_LANES, step_timeline
from tpuscope.dashboards.pages import overview
from tpuscope.schema import TABLES
from tpuscope.store import Run, RunStore
from tpuscope.store.parts import write_table_atomic

STEPS = 30_000
POINTS = overview.MAX_POINTS


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    store = tmp_path_factory.mktemp("series")
    return Run(
        make_run(store, "long", steps=STEPS, trace_events=0, recompiles=60, device=False, parts=3)
    )


def door(run: Run) -> tuple[StoreData, str]:
    """The run as the pages read it: through its store's StoreData (the one door to the store)."""
    return StoreData(run.loc.as_path().parent), run.run_id


def _traces(fig) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {trace.name: trace for trace in fig.data}


def test_the_reduced_line_keeps_each_buckets_first_last_min_and_max(long_run: Run) -> None:
    line = series.read_timeline(*door(long_run), POINTS)
    steps = long_run.table("steps", ["step", "wall_ns"])
    kept = line.steps.set_index("step")["wall_ns"]
    assert len(kept) <= POINTS and kept.index.is_unique
    assert (steps.set_index("step").loc[kept.index, "wall_ns"] == kept).all()  # real rows only
    lo, span = steps["step"].min(), steps["step"].max() - steps["step"].min() + 1
    buckets = steps.groupby((steps["step"] - lo) * (POINTS // 4) // span)
    for name, pick in (
        ("first", buckets["step"].min()),
        ("last", buckets["step"].max()),
        ("min", steps.loc[buckets["wall_ns"].idxmin(), "step"]),
        ("max", steps.loc[buckets["wall_ns"].idxmax(), "step"]),
    ):
        assert set(pick) <= set(kept.index), name


def test_markers_and_bars_drawn_from_the_reduction_are_those_of_the_whole_tables(
    long_run: Run,
) -> None:
    line = series.read_timeline(*door(long_run), POINTS)
    whole = step_timeline(
        long_run.table("steps", ["host", "rank", "step", "wall_ns"]),
        long_run.table("compiles", series.COMPILE_COLUMNS),
        long_run.table("fallbacks", series.FALLBACK_COLUMNS),
        2,
        POINTS,
    )
    reduced = step_timeline(
        line.steps,
        line.compiles,
        line.fallbacks,
        2,
        POINTS,
        step_walls=line.step_walls,
        slowest_of=line.slowest_of,
    )
    a, b = _traces(whole), _traces(reduced)
    assert a.keys() == b.keys() and len(a) == 3
    for name in a:
        if name == "step time":
            assert max(a[name].y) == max(b[name].y) and min(a[name].y) == min(b[name].y)
            continue
        assert list(a[name].x) == list(b[name].x), name
        assert np.allclose(list(a[name].y), list(b[name].y)), name
        assert list(a[name].hovertext) == list(b[name].hovertext), name
    fallbacks = long_run.table("fallbacks", ["step", "op", "count"])
    fallbacks = fallbacks[~fallbacks["op"].isin(VALUE_READ_OPS)]  # value reads: host syncs, apart
    per_step = fallbacks.groupby("step")["count"].sum()
    drawn = pd.Series(list(b["CPU fallback calls"].y), index=list(b["CPU fallback calls"].x))
    assert (per_step.loc[drawn.index] == drawn).all() and len(drawn) <= 1000


def test_a_zoom_window_reads_only_its_steps_at_full_detail(long_run: Run) -> None:
    window = (12_345.0, 14_000.0)
    line = series.read_timeline(*door(long_run), POINTS, window)
    steps = long_run.table("steps", ["step", "wall_ns"])
    inside = steps[(steps["step"] >= window[0]) & (steps["step"] <= window[1])]
    assert line.steps["step"].tolist() == inside["step"].tolist()  # fewer than POINTS: every one
    compiles = long_run.table("compiles", ["step"])
    assert line.compiles["step"].tolist() == sorted(
        compiles[(compiles["step"] >= window[0]) & (compiles["step"] <= window[1])]["step"]
    )
    assert line.fallbacks["step"].between(*window).all()


def test_the_overview_draws_from_the_reduction_and_counts_rows_from_footers(long_run: Run) -> None:
    data = StoreData(long_run.loc.as_path().parent)
    fig = overview.timeline_figure(data, long_run.run_id)
    assert overview.step_rows(data, long_run.run_id) == STEPS
    line = _traces(fig)["step time"]
    assert len(line.x) <= POINTS and max(line.y) == long_run.table("steps")["wall_ns"].max() / 1e6


def _processes_run(store: Path, ranks: int, steps: int) -> Run:
    """A run of `ranks` processes, rank r's step s taking (s % 7 + r) ms, in two parts."""
    run = Run(RunStore(store).new_run(f"ranks{ranks}"))
    n = ranks * steps
    rank, step = np.repeat(np.arange(ranks), steps), np.tile(np.arange(steps), ranks)
    cols = {
        "host": pa.array(["vm"] * n),
        "pid": pa.array(100 + rank, pa.int32()),
        "rank": pa.array(rank, pa.int32()),
        "step": pa.array(step, pa.int64()),
        "wall_ns": pa.array(((step % 7) + rank + 1) * 1_000_000, pa.int64()),
    }
    schema = TABLES["steps"]
    table = pa.table({f.name: cols.get(f.name, pa.nulls(n, f.type)) for f in schema}).cast(schema)
    for i, part in enumerate((table.slice(0, n // 2), table.slice(n // 2))):
        write_table_atomic(run.loc.as_path() / "steps" / f"part-test-{i:06d}.parquet", part)
    return run


def test_one_line_per_process_and_the_slowest_of_many(tmp_path: Path) -> None:
    two = series.read_timeline(*door(_processes_run(tmp_path, 2, 50)), POINTS)
    assert two.slowest_of is None
    fig = step_timeline(
        two.steps, two.compiles, two.fallbacks, 0, POINTS, step_walls=two.step_walls
    )
    assert sorted(_traces(fig)) == ["rank 0 on vm", "rank 1 on vm"]
    many = MAX_LANES + 1
    run = _processes_run(tmp_path, many, 50)
    line = series.read_timeline(*door(run), POINTS)
    assert line.slowest_of == many
    slowest = run.table("steps", ["step", "wall_ns"]).groupby("step")["wall_ns"].max()
    assert line.steps.set_index("step")["wall_ns"].to_dict() == slowest.to_dict()
    fig = step_timeline(
        line.steps, line.compiles, line.fallbacks, 0, POINTS, slowest_of=line.slowest_of
    )
    assert list(_traces(fig)) == [f"slowest of {many} processes"]


def test_a_run_with_no_rows_gives_empty_series(tmp_path: Path) -> None:
    line = series.read_timeline(*door(Run(RunStore(tmp_path).new_run("empty"))), POINTS)
    assert (
        line.steps.empty and line.compiles.empty and line.fallbacks.empty and line.step_walls.empty
    )


def test_a_damaged_part_makes_the_overview_read_the_tables_whole_without_it(tmp_path: Path) -> None:
    import duckdb

    run_dir = make_run(
        tmp_path, "damaged", steps=200, trace_events=0, recompiles=3, device=False, parts=2
    )
    (run_dir / "steps" / "part-zz-000001.parquet").write_bytes(b"PAR1 not a Parquet file PAR1")
    with pytest.raises(duckdb.Error):
        series.read_timeline(*door(Run(run_dir)), POINTS)
    fig = overview.timeline_figure(StoreData(tmp_path), run_dir.name)
    assert sorted(_traces(fig)["step time"].x) == list(range(200))  # every healthy step, drawn


def test_the_fallbacks_pages_duckdb_aggregates_are_the_pandas_ones(
    long_run: Run, tmp_path: Path
) -> None:
    import shutil

    from tpuscope.dashboards import aggregates
    from tpuscope.dashboards.figures.fallbacks import fallback_matrix
    from tpuscope.dashboards.pages.fallbacks import fallback_sites, fallback_views, site_rows

    long_run = Run(shutil.copytree(long_run.loc.as_path(), tmp_path / long_run.run_id))
    rows = long_run.table("fallbacks", ["step", "op", "count", "location"])
    rows.loc[rows.index[::7], "location"] = None  # ops the tracer could not place
    write_table_atomic(
        long_run.loc.as_path() / "fallbacks" / "part-unplaced-000001.parquet",
        pa.Table.from_pandas(
            rows.iloc[::7].assign(step=rows["step"].iloc[::7] + STEPS), preserve_index=False
        ),
    )
    rows = long_run.table("fallbacks", ["step", "op", "count", "location"])
    expected_sites = fallback_sites(rows).reset_index(drop=True)
    got_sites = site_rows(aggregates.fallback_sites(*door(long_run))).reset_index(drop=True)
    pd.testing.assert_frame_equal(got_sites, expected_sites, check_dtype=False)
    matrix, width = aggregates.fallback_matrix(*door(long_run))
    expected_matrix, expected_width = fallback_matrix(rows[~rows["op"].isin(VALUE_READ_OPS)])
    assert width == expected_width
    pd.testing.assert_frame_equal(matrix, expected_matrix, check_dtype=False, check_names=False)
    data = StoreData(long_run.loc.as_path().parent)
    views = fallback_views(data, long_run.run_id)
    assert fallback_views(data, long_run.run_id) is views  # cached until the table changes


def test_the_reductions_read_a_run_in_an_object_store_as_they_read_it_locally(
    gcs_store, tmp_path: Path
) -> None:
    """DuckDB reads the parts through the store's fsspec filesystem (a real GCS API server)."""
    from tpuscope.dashboards.pages.fallbacks import fallback_views

    run_dir = make_run(
        tmp_path / "runs",
        "remote",
        steps=6_000,
        trace_events=0,
        recompiles=12,
        device=False,
        parts=2,
        analyze=True,
    )
    prefix = f"{gcs_store.bucket}/series-{tmp_path.name}"
    gcs_store.filesystem().put(str(run_dir), f"{prefix}/{run_dir.name}", recursive=True)
    local, remote = (
        StoreData(tmp_path / "runs"),
        StoreData(gcs_store.url(f"series-{tmp_path.name}")),
    )
    here = _traces(overview.timeline_figure(local, run_dir.name))
    there = _traces(overview.timeline_figure(remote, run_dir.name))
    assert here.keys() == there.keys() and len(here) == 3
    for name in here:
        assert list(here[name].x) == list(there[name].x), name
    sites, (matrix, _) = fallback_views(remote, run_dir.name)
    local_sites, (local_matrix, _) = fallback_views(local, run_dir.name)
    pd.testing.assert_frame_equal(sites, local_sites)
    pd.testing.assert_frame_equal(matrix, local_matrix)
