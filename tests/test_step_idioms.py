"""Steps are the program's iterations, for every torch_xla step idiom, on real torch_xla (CPU).

tests/programs/idioms.py runs a 12-iteration training loop per idiom, one after another
in one process, and writes each loop's wall-clock window and torch_xla's own counters
after every iteration. Two runs (one ending in un-synced work, one in `generate()`
calls) are made once for the module.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, run_tpuscope
from tpuscope.store.parts import read_table

PROGRAM = ROOT / "tests" / "programs" / "idioms.py"
ITERATIONS = 12
# idiom -> the boundary that ends each of its iterations
IDIOMS = {
    "sync": "sync",
    "mark_step": "mark_step",
    "optimizer_step": "optimizer_step",
    "loader_optimizer_step": "MpDeviceLoader",
    "compile_fn": "torch_xla.compile",
    "compile_ctx": "torch_xla.compile",
    "loader": "mark_step",
    "loader_compile": "torch_xla.compile",
    "step_trace": "StepTrace",
    "loader_step_trace": "StepTrace",
    "eager": "sync",
    "eager_mark_step": "mark_step",
    "loader_read": "mark_step",  # last: its last read is carried into what follows the loops
}
LAZY = [name for name in IDIOMS if not name.startswith("eager") and name != "loader_read"]


def line_of(marker: str) -> int:
    return next(i for i, line in enumerate(PROGRAM.read_text().splitlines(), 1) if marker in line)


@pytest.fixture(scope="module")
def idiom_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Path, dict, subprocess.CompletedProcess[str]]]:
    """{"tail": ..., "generate": ...} -> (run folder, the program's own report, process)."""
    store = tmp_path_factory.mktemp("idioms")
    runs = {}
    for name, extra in (("tail", ["--tail"]), ("generate", ["--generate", "4"])):
        out = store / f"{name}.json"
        # the script alone (not "python script"): the child runs this interpreter, so this tpuscope
        proc = run_tpuscope(
            "run",
            "--store",
            str(store),
            "--name",
            name,
            "--quiet",
            str(PROGRAM),
            ",".join(IDIOMS),
            str(out),
            *extra,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        run_dir = next(p for p in store.iterdir() if p.is_dir() and p.name.startswith(f"{name}-"))
        runs[name] = (run_dir, json.loads(out.read_text()), proc)
    return runs


def loop_steps(
    run: tuple[Path, dict, subprocess.CompletedProcess[str]], idiom: str
) -> pd.DataFrame:
    run_dir, report, _ = run
    steps = read_table(run_dir, "steps").to_pandas()
    window = report[idiom]
    return steps[(steps.end_ns >= window["start_ns"]) & (steps.end_ns <= window["end_ns"])]


def after_the_loops(run: tuple[Path, dict, subprocess.CompletedProcess[str]]) -> int:
    """The first step after every idiom's loop."""
    steps = read_table(run[0], "steps").to_pandas()
    return int((steps.end_ns <= max(window["end_ns"] for window in run[1].values())).sum())


@pytest.mark.parametrize("idiom", list(IDIOMS))
def test_twelve_iterations_are_twelve_steps_in_every_run(idiom_runs, idiom: str) -> None:
    for run in idiom_runs.values():
        steps = loop_steps(run, idiom)
        assert len(steps) == ITERATIONS, steps[["step", "boundary", "executions"]]
        assert set(steps.boundary) == {IDIOMS[idiom]}


def test_every_step_of_a_lazy_loop_launched_its_one_graph(idiom_runs) -> None:
    """executions = graphs launched in the step, not async ExecuteComputation landing late."""
    for idiom in LAZY:
        assert list(loop_steps(idiom_runs["tail"], idiom).executions) == [1] * ITERATIONS, idiom


def test_a_read_after_the_sync_in_a_loader_loop_is_the_next_steps(idiom_runs) -> None:
    """Its graph runs after the iteration's mark_step; the loader's next() gives way to the
    loop's own sync, so it is counted in the next iteration's step, not a step of its own."""
    steps = loop_steps(idiom_runs["tail"], "loader_read")
    assert list(steps.executions) == [1] + [2] * (ITERATIONS - 1)
    assert list(steps.transfers_from_device) == [0] + [1] * (ITERATIONS - 1)


def test_eager_executions_per_step_equal_torch_xla_own_counters(idiom_runs) -> None:
    for idiom in ("eager", "eager_mark_step"):
        run = idiom_runs["tail"]
        seen = run[1][idiom]["counters"]
        launched = [
            sum(after[n] - before[n] for n in ("UncachedCompile", "CachedCompile"))
            for before, after in zip(seen, seen[1:], strict=False)
        ]
        executed = [
            after["ExecuteComputation"] - before["ExecuteComputation"]
            for before, after in zip(seen, seen[1:], strict=False)
        ]
        steps = list(loop_steps(run, idiom).executions)
        assert steps == launched == executed, (steps, launched, executed)
        assert min(steps) > 10  # op by op: every op is an execution


def test_work_after_the_last_sync_is_a_trailing_end_step(idiom_runs) -> None:
    run_dir = idiom_runs["tail"][0]
    steps = read_table(run_dir, "steps").to_pandas()
    last = steps.iloc[-1]
    assert last.boundary == "end" and (steps.boundary == "end").sum() == 1
    assert last.compiles >= 3 and last.executions >= 3 and last.transfers_from_device >= 2
    compiles = read_table(run_dir, "compiles").to_pandas()
    markers = ('print("eval loss"', 'print("nonzero"', 'print("cpu"')
    tail_lines = {f"{PROGRAM}:{line_of(marker)}" for marker in markers}
    assert set(compiles[compiles.step == last.step].location) <= tail_lines
    fallbacks = read_table(run_dir, "fallbacks").to_pandas()
    assert "aten::nonzero" in set(fallbacks[fallbacks.step == last.step].op)


def test_host_reads_inside_generate_are_at_the_users_line_with_the_library_frame(
    idiom_runs,
) -> None:
    run_dir = idiom_runs["generate"][0]
    where = f"{PROGRAM}:{line_of('# GENERATE-LINE')}"
    first = after_the_loops(idiom_runs["generate"])  # also holds the loops' last (carried) read
    sites = read_table(run_dir, "call_sites").to_pandas()
    sites = sites[sites.step > first]
    assert len(sites) and set(sites.location) == {where}, sites
    assert all(frame.startswith("transformers/generation/") for frame in sites.library_frame), sites
    fallbacks = read_table(run_dir, "fallbacks").to_pandas().dropna(subset=["location"])
    fallbacks = fallbacks[fallbacks.step > first]
    assert len(fallbacks) and set(fallbacks.location) == {where}
    assert fallbacks.library_frame.str.startswith("transformers/").all()


def test_every_generate_call_is_a_step_the_last_one_with_its_compiles_and_reads(idiom_runs) -> None:
    """A `generate()` call is one iteration of the user's loop (its return is the boundary:
    collect/xla/library_loops.py); the program's sync after a call gives way (its work, the
    outputs' pending graph, goes into the next step), and the last call, with no sync after it,
    is a step of its own, not work after the loop: 4 calls, 4 steps."""
    run_dir = idiom_runs["generate"][0]
    steps = read_table(run_dir, "steps").to_pandas()
    first = after_the_loops(idiom_runs["generate"])
    assert steps[steps.step >= first].boundary.tolist() == ["generate"] * 4
    last = steps.iloc[-1]
    assert last.compiles > 0 and last.fallback_ops > 0
    assert last.transfers_from_device > 0 and last.executions > 0
    compiles = read_table(run_dir, "compiles").to_pandas()
    assert set(compiles[compiles.step == last.step].location) == {
        f"{PROGRAM}:{line_of('# GENERATE-LINE')}"
    }
