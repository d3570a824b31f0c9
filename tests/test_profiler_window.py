"""The JAX collector's profiler window on real CPU runs: a window that starts at step 0 (which
opens and closes in one hooked call) still traces; the program's own jax.profiler trace inside
tpuscope's window runs as it does bare (tpuscope's window gives way), the program's output the
same; and the window's start and stop fall in no step (collect/trace_steps.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, run_tpuscope
from tpuscope.store import Run, read_meta

PROGRAM = ROOT / "tests" / "programs" / "jax_own_profiler.py"


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Run]:
    store = tmp_path / "store"
    proc = run_tpuscope("run", "--store", str(store), "--quiet", *args, "python", str(PROGRAM))
    return proc, Run(next(store.iterdir()))


def test_a_window_from_step_0_traces(tmp_path: Path) -> None:
    proc, run = _run(tmp_path, "--trace-steps", "0:3")
    assert proc.returncode == 0, proc.stderr
    meta = read_meta(run.path)
    assert any(p.get("trace_files") for p in meta["processes"])
    assert not run.trace_events.empty


def test_the_programs_own_trace_inside_the_window_runs_as_bare(tmp_path: Path) -> None:
    own = tmp_path / "own"
    bare = subprocess.run(
        [sys.executable, str(PROGRAM), "--own-trace", str(tmp_path / "bare")],
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    store = tmp_path / "store"
    proc = run_tpuscope(
        "run",
        "--store",
        str(store),
        "--quiet",
        "--trace-steps",
        "2:9",
        "python",
        str(PROGRAM),
        "--own-trace",
        str(own),
    )
    assert proc.returncode == 0 == bare.returncode, proc.stderr
    assert proc.stdout == bare.stdout
    assert list(own.glob("plugins/profile/*/*.xplane.pb"))  # the program's own trace was written
    run = Run(next(store.iterdir()))
    meta = read_meta(run.path)
    assert any(p.get("trace_files") for p in meta["processes"])  # tpuscope's, cut short


def test_the_profilers_start_and_stop_are_in_no_step(tmp_path: Path) -> None:
    proc, run = _run(tmp_path, "--trace-steps", "3:6")
    assert proc.returncode == 0, proc.stderr
    steps = run.steps.set_index("step").sort_index()
    costs = [p["profiler_cost"] for p in read_meta(run.path)["processes"]]
    assert sum(c["trace_ns"] for c in costs) > 0
    # the stop is timed apart, and the wait for the device inside it (the report splits them)
    for c in costs:
        assert 0 < c["trace_wait_ns"] <= c["trace_stop_ns"] < c["trace_ns"]
    # the profiler starts after step 2 ended and before step 3 opens; it stops after step 5
    # ended (its outputs ready) and before step 6 opens: both sit between steps
    # (the stop waits for step 5's outputs, which the helper may note ready only as it returns)
    start_gap = steps.loc[3, "start_ns"] - steps.loc[2, "end_ns"]
    stop_gap = steps.loc[6, "start_ns"] - steps.loc[5, "end_ns"]
    assert start_gap >= 0 and stop_gap >= 0 and start_gap + stop_gap > 0
