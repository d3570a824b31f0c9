"""The import path (trace_ingest: load_traces + write) stores exactly what the straightforward
whole-table computation gives: the reader's table as one pandas frame, device_ops,
step_windows, assign_steps and busy_per_window on all of it (what the path did before it
went slice by slice to stay under 3x the file size in memory). Checked on the real TPU v6e
trace, a real torch_xla CPU run (`--trace-steps`: XLA's CPU thunks as the device, the
run's steps as windows) and a synthetic CPU trace with step markers, with slices that cut
the reader's batches at odd places.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import real_trace
from tests.dashboard_browser import TRACED, TRACED_TPUSCOPE
from tpuscope.analyze.device_time import assign_steps, busy_per_window, device_ops, step_windows
from tpuscope.ingest import trace_chunks
from tpuscope.ingest import traces as trace_ingest
from tpuscope.ingest.device import traced_steps
from tpuscope.parse.xplane import XSpace, read_xspace, space_info
from tpuscope.store import Run, layout, read_table
from tpuscope.store.row_groups import write_row_groups_atomic

TPU = "xplane/tpu_inference_2.xplane.pb"
BUSY_COLUMNS = ["device", "step", "start_ns", "end_ns", "busy_ns", "idle_ns", "ops", "window"]
T0 = 1_700_000_000_000_000_000


def reference(
    path: Path, steps: pd.DataFrame | None
) -> tuple[pa.Table, int, np.ndarray, pd.DataFrame]:
    """(reader table, clock offset, step per event, device_steps rows), from one pandas frame."""
    table = read_xspace(path)
    offset = trace_ingest.clock_offset(table, space_info(table))
    frame = table.to_pandas()
    frame["start_ns"] += offset
    ops = device_ops(frame)
    span = (int(frame["start_ns"].min()), int((frame["start_ns"] + frame["dur_ns"]).max()))
    windows = step_windows(frame, ops, steps, span)
    return (
        table,
        offset,
        assign_steps(frame["start_ns"].to_numpy(), windows),
        busy_per_window(ops, windows),
    )


def plain_list(column: pa.ChunkedArray) -> list:
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return column.to_pylist()


def assert_stored_as_reference(
    run_dir: Path, path: Path, steps: pd.DataFrame | None, host: str, pid: int
) -> None:
    table, offset, step, busy = reference(path, steps)
    stored = read_table(run_dir, "trace_events")
    assert stored.num_rows == table.num_rows
    for column in table.column_names:  # the reader's columns the store has (not step_num)
        if column != "start_ns" and column in stored.column_names:
            assert plain_list(stored[column]) == plain_list(table[column]), column
    assert np.array_equal(stored["start_ns"].to_numpy(), table["start_ns"].to_numpy() + offset)
    assert stored["step"].to_pylist() == [s if s >= -1 else None for s in step.tolist()]
    assert set(stored["host"].to_pylist()) == {host} and set(stored["pid"].to_pylist()) == {pid}
    assert set(stored["rank"].to_pylist()) == {0}
    device_steps = read_table(run_dir, "device_steps").to_pandas()
    assert (
        device_steps[BUSY_COLUMNS].astype(object).values.tolist()
        == busy[BUSY_COLUMNS].astype(object).values.tolist()
    )
    assert set(device_steps["host"]) == {host} and set(device_steps["pid"]) == {pid}


def load_and_write(
    path: Path, run_dir: Path, steps: pd.DataFrame | None = None
) -> trace_ingest.TraceSet:
    traces = trace_ingest.load_traces([path], steps=steps, xprof=False, first_pid=3)
    trace_ingest.write(run_dir, traces, "t")
    return traces


def test_tpu_trace_stored_as_the_whole_table_computes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = real_trace(TPU)
    monkeypatch.setattr(
        trace_chunks, "SLICE_ROWS", 1000
    )  # 27 slices across the reader's 135 batches
    traces = load_and_write(path, tmp_path / "run")
    assert traces.rows("trace_events") == 26_723
    assert_stored_as_reference(tmp_path / "run", path, None, "tpu_inference_2", 3)
    counts = pa.compute.value_counts(read_xspace(path)["hlo_module"].combine_chunks()).to_pylist()
    assert list(traces.meta["trace_modules"].items()) == [
        (c["values"], c["counts"]) for c in counts if c["values"]
    ]


def test_tpu_trace_with_run_steps(tmp_path: Path) -> None:
    path = real_trace(TPU)
    table = read_xspace(path)
    offset = trace_ingest.clock_offset(table, space_info(table))
    lo, hi = (
        offset + pa.compute.min(table["start_ns"]).as_py(),
        offset + pa.compute.max(table["start_ns"]).as_py(),
    )
    edges = np.linspace(lo + 1000, hi - 1000, 6).astype(
        np.int64
    )  # events before and after: no step
    steps = pd.DataFrame(
        {
            "host": "elsewhere",
            "pid": 1,
            "step": np.arange(5),
            "start_ns": edges[:-1],
            "end_ns": edges[1:],
        }
    )
    load_and_write(path, tmp_path / "run", steps)
    assert_stored_as_reference(tmp_path / "run", path, steps, "tpu_inference_2", 3)
    stored = read_table(tmp_path / "run", "trace_events")
    assert set(stored["step"].to_pylist()) == {None, 0, 1, 2, 3, 4}


def cpu_space(events_per_thread: int) -> bytes:
    """A CPU trace: XLA thunks (hlo_op) on two worker threads, step_num markers on the Python thread."""
    space = XSpace()
    env = space.planes.add(id=1, name=b"Task Environment")
    env.stat_metadata[1].name = b"profile_start_time"
    env.stats.add(metadata_id=1, uint64_value=T0)
    host = space.planes.add(id=2, name=b"/host:CPU")
    for sid, name in [(1, b"hlo_op"), (2, b"step_num"), (3, b"hlo_module")]:
        host.stat_metadata[sid].name = name
    host.event_metadata[1].name = b"ThunkExecute"
    host.event_metadata[2].name = b"train"
    python = host.lines.add(id=1, name=b"python", timestamp_ns=0)
    for step in range(4):
        event = python.events.add(
            metadata_id=2, offset_ps=(1 + 10 * step) * 10**9, duration_ps=9 * 10**9
        )
        event.stats.add(metadata_id=2, int64_value=step)
    for thread in (2, 3):
        line = host.lines.add(id=thread, name=f"worker/{thread}".encode(), timestamp_ns=thread)
        for i in range(events_per_thread):
            event = line.events.add(
                metadata_id=1, offset_ps=i * 45 * 10**9 // events_per_thread, duration_ps=10**6
            )
            if i % 3:
                event.stats.add(metadata_id=1, str_value=f"fusion.{i % 7}".encode())
                event.stats.add(metadata_id=3, str_value=b"SyncTensorsGraph.9")
    return space.SerializeToString()


def test_cpu_trace_with_step_markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cpu.xplane.pb"
    path.write_bytes(cpu_space(1500))
    monkeypatch.setattr(trace_chunks, "SLICE_ROWS", 700)
    traces = load_and_write(path, tmp_path / "run")
    assert traces.meta["trace_devices"] == ["/host:CPU (XLA ops)"]
    assert_stored_as_reference(tmp_path / "run", path, None, "cpu", 3)
    busy = read_table(tmp_path / "run", "device_steps").to_pandas()
    assert list(busy["step"]) == [0, 1, 2, 3] and set(busy["window"]) == {"trace steps"}
    assert read_table(tmp_path / "run", "trace_events")["start_ns"].to_pylist()[0] == T0 + 10**6


def test_real_torch_xla_run_stored_as_the_whole_table_computes(example_run) -> None:
    run_dir, proc = example_run(*TRACED, tpuscope_args=TRACED_TPUSCOPE)  # the browser tests' run
    assert proc.returncode == 0, proc.stderr
    (path,) = layout.xplane_files(run_dir / "trace")
    host = trace_ingest.host_of(path, space_info(read_xspace(path)))
    steps = trace_ingest._steps_for(traced_steps(Run(run_dir)), host)
    assert_stored_as_reference(run_dir, path, steps, host, 0)


def test_row_groups_and_start_ns_encoding(tmp_path: Path) -> None:
    n = 150_000
    table = pa.table(
        {
            "start_ns": np.arange(n, dtype=np.int64) * 7 + T0,
            "dur_ns": np.arange(n) % 5,
            "plane": pa.DictionaryArray.from_arrays(
                pa.array(np.arange(n) % 2, pa.int8()), ["a", "b"]
            ),
        }
    )
    write_row_groups_atomic(tmp_path / "t" / "part.parquet", table)
    written = pq.ParquetFile(tmp_path / "t" / "part.parquet")
    assert [written.metadata.row_group(i).num_rows for i in range(written.num_row_groups)] == [
        65536,
        65536,
        18928,
    ]
    assert "DELTA_BINARY_PACKED" in written.metadata.row_group(0).column(0).encodings
    assert written.read().equals(table) and written.schema_arrow == table.schema
    assert not list((tmp_path / "t").glob(".*"))  # no temporary file left
