"""`tpuscope run --trace-steps A:B` on real torch_xla CPU runs: the window, the kept xplane,
ingestion with the run's own steps, and `tpuscope trace`."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_tpuscope
from tpuscope.store import Run, read_meta

# The same arguments as tests/test_mxu.py: example_run makes this run once per session.
HD64_ARGS = ("--steps", "5", "--seq", "128", "--d-model", "128", "--batch", "2", "--vocab", "128")
HD64_TPUSCOPE = ("--deep", "--trace-steps", "2:4")


@pytest.fixture(scope="module")
def traced(example_run) -> Path:
    run_dir, proc = example_run(
        "transformer_head_dim64.py", *HD64_ARGS, tpuscope_args=HD64_TPUSCOPE
    )
    assert proc.returncode == 0, proc.stderr
    return run_dir


def test_xplane_kept_in_the_run(traced: Path) -> None:
    files = list((traced / "trace").glob("xla-*/plugins/profile/*/*.xplane.pb"))
    assert len(files) == 1 and files[0].stat().st_size > 10_000
    meta = read_meta(traced)
    assert meta["trace_steps"] == [2, 4]
    proc_meta = meta["processes"][0]
    assert proc_meta["trace_files"] == [str(files[0])] and proc_meta["profiler_port"] > 0
    assert meta["device_view"]["trace_events"] > 1000


def test_trace_covers_exactly_the_window_on_the_runs_clock(traced: Path) -> None:
    run = Run(traced)
    events, steps = run.trace_events, run.steps.set_index("step")
    assert set(events["step"].dropna().astype(int)) == {2, 3}
    # epoch ns: each event sits inside its step's wall-clock window; the last traced step also
    # owns the tail after its sync, where the device finishes its graph before the trace stops
    step2, step3 = events[events["step"] == 2], events[events["step"] == 3]
    assert (
        steps.loc[2, "start_ns"]
        <= step2["start_ns"].min()
        <= step2["start_ns"].max()
        < steps.loc[2, "end_ns"]
    )
    assert step3["start_ns"].min() >= steps.loc[3, "start_ns"]
    ran = set(events["hlo_module"].dropna())
    assert ran and ran <= set(
        run.hlo_modules["module"]
    )  # the graphs the trace ran are the dumped ones


def test_device_busy_and_idle_per_step(traced: Path) -> None:
    run = Run(traced)
    device = run.device_steps.set_index("step")
    assert list(device.index) == [2, 3] and set(device["window"]) == {"steps"}
    assert set(device["device"]) == {"/host:CPU (XLA ops)"}
    steps = run.steps.set_index("step")
    # windows: the steps clipped to the traced time (the profiler starts just after step 2 opens;
    # step 3's window runs on to the trace's end, while the device finishes step 3's graph)
    assert (
        steps.loc[2, "start_ns"]
        <= device.loc[2, "start_ns"]
        < device.loc[2, "end_ns"]
        == steps.loc[2, "end_ns"]
    )
    assert device.loc[3, "start_ns"] == steps.loc[3, "start_ns"] < device.loc[3, "end_ns"]
    for step in (2, 3):
        window = device.loc[step]
        assert window["busy_ns"] + window["idle_ns"] == window["end_ns"] - window["start_ns"]
        assert window["idle_ns"] >= 0
    assert (
        device.loc[3, "busy_ns"] > 0 and device.loc[3, "ops"] > 0
    )  # step 2's graph runs as step 3 opens


def test_trace_command_prints_how_to_open_and_writes_perfetto(traced: Path) -> None:
    proc = run_tpuscope("trace", "--store", str(traced.parent), traced.name)
    assert proc.returncode == 0, proc.stderr
    logdir = next((traced / "trace").glob("xla-*"))
    assert f"xprof --logdir {logdir} --port 8791" in proc.stdout
    assert f"tensorboard --logdir {logdir}" in proc.stdout and "ui.perfetto.dev" in proc.stdout
    written = traced / "trace" / f"{traced.name}.trace.json.gz"
    with gzip.open(written, "rt") as handle:
        chrome = json.load(handle)
    complete = [e for e in chrome["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(Run(traced).trace_events)
    assert {e["args"]["step"] for e in complete if "step" in e.get("args", {})} == {2, 3}


def test_program_ending_inside_the_window_still_gets_its_trace(tmp_path: Path) -> None:
    program = ROOT / "tests" / "programs" / "steps.py"
    proc = run_tpuscope(
        "run",
        "--store",
        str(tmp_path / "store"),
        "--quiet",
        "--trace-steps",
        "3:100",
        "python",
        str(program),
        "5",
        str(tmp_path / "out.json"),
    )
    assert proc.returncode == 0, proc.stderr
    run = Run(next((tmp_path / "store").iterdir()))
    assert set(run.trace_events["step"].dropna().astype(int)) == {3, 4}
    assert "trace of steps" not in proc.stderr  # no profiler error


def test_no_trace_is_a_clear_error(tmp_path: Path) -> None:
    run_dir = tmp_path / "store" / "empty-run"
    run_dir.mkdir(parents=True)
    (run_dir / "meta.json").write_text('{"run_id": "empty-run"}')
    proc = run_tpuscope("trace", "--store", str(tmp_path / "store"), "empty-run")
    assert proc.returncode == 2 and proc.stderr.startswith("tpuscope: run empty-run has no trace")
