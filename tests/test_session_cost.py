"""What a session counts of its own cost (collect/profiler_cost.ProfilerCost) and what the report makes
of it (analyze/summary): per-compile flush work apart from the steps' (issue 28's run showed a
12-step run's HLO dump deletions spread over its steps), and one flush at a time, so each flush
counts only its own thread's CPU."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tpuscope.analyze.summary import (
    hook_ms_per_step,
    profiler_ms_per_compile,
    profiler_ms_per_step,
)
from tpuscope.collect.session import Session


def _burn(ms: float) -> None:
    """Spend `ms` of this thread's CPU (a stand-in for deleting a compile's dump files)."""
    end = time.thread_time_ns() + int(ms * 1e6)
    while time.thread_time_ns() < end:
        pass


def test_per_compile_flush_work_is_counted_apart(tmp_path: Path) -> None:
    session = Session(tmp_path / "run")
    session.per_compile_flush.append(lambda: _burn(30))
    session.flush()
    cost = session.cost
    assert cost.compile_flush_cpu_ns >= 30e6 and cost.flushes == 1
    assert 0 <= cost.flush_cpu_ns < 10e6  # the flush's own work only


def test_flushes_from_two_threads_never_overlap(tmp_path: Path) -> None:
    session = Session(tmp_path / "run")
    inside, overlaps = [0], []

    def build_rows() -> None:
        inside[0] += 1
        overlaps.append(inside[0] > 1)
        time.sleep(0.05)
        inside[0] -= 1

    session.before_flush.append(build_rows)
    threads = [threading.Thread(target=session.flush) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == [False, False, False] and session.cost.flushes == 3
    assert session.cost.flush_cpu_ns >= 0


def test_the_report_says_per_step_and_per_compile_apart() -> None:
    cost = {
        "hook_ns": 1_000_000,
        "hook_calls": 10,
        "compile_hook_ns": 4_000_000,
        "compile_hook_calls": 2,
        "flush_cpu_ns": 12_000_000,
        "compile_flush_cpu_ns": 56_000_000,
    }
    meta = {"processes": [{"profiler_cost": cost}]}
    assert profiler_ms_per_step(meta) == pytest.approx(
        0.1 + 1.0
    )  # hooks 0.1 ms, flushes 12 ms / 12 steps
    assert hook_ms_per_step(meta) == pytest.approx(0.1)  # the program's thread's part
    assert profiler_ms_per_compile(meta, compiles=2) == pytest.approx(30.0)
    old = {
        "processes": [
            {"profiler_cost": {k: v for k, v in cost.items() if k != "compile_flush_cpu_ns"}}
        ]
    }
    assert profiler_ms_per_compile(old, compiles=2) is None  # a run made before: its line as it was
