"""Which of a device trace's modules are the step's own graphs, and how many steps the trace
holds (tpuscope/analyze/step_graph.py), on module runs laid out as the v5e's traces lay them:
flax's lm1b stages 6 batch leaves a step beside its train step (tests/test_tpu_flax_upstream.py
reads that real run); here the other shapes a loop takes. And rule compile_time's use of them
where the program's own annotations mark the steps."""

from __future__ import annotations

import pandas as pd

from tpuscope.analyze.step_graph import (
    jax_module_name,
    program_module,
    step_graph_devices,
    step_graph_runs,
    step_graphs,
)
from tpuscope.detect.compile_kinds import kinds
from tpuscope.detect.tables import RunTables
from tpuscope.detect.tensorcore_ops import traced_text

US = 1_000


def _runs(per_step: dict[str, tuple[int, int]], steps: int = 5, planes: int = 1) -> pd.DataFrame:
    """Module runs: each module `name` -> (runs a step, duration of a run in us)."""
    rows = []
    for plane in range(planes):
        for step in range(3, 3 + steps):
            for name, (count, us) in per_step.items():
                rows += [
                    {
                        "line": "XLA Modules",
                        "plane": f"/device:TPU:{plane}",
                        "name": f"{name}(42)",
                        "hlo_module": name,
                        "step": float(step),
                        "dur_ns": us * US,
                    }
                ] * count
    return pd.DataFrame(rows)


def test_staged_leaves_beside_the_step_do_not_count_as_steps() -> None:
    runs = _runs({"jit_stage": (6, 1), "jit_train_step": (1, 15_000)})
    assert step_graphs(runs) == ["jit_train_step(42)"]
    assert step_graph_runs(runs) == 5  # the count before, the most runs of one module: 30


def test_gradient_accumulation_counts_steps_not_micro_steps() -> None:
    """A big jit called 4 times a step (micro-batches): 5 steps, not 20."""
    assert step_graph_runs(_runs({"jit_micro_step": (4, 3_000), "jit_apply": (1, 500)})) == 5


def test_runs_on_every_device_make_a_per_device_mean() -> None:
    """Four TensorCores each run the step once a step: the count is runs on all of them, so
    that op time summed over the devices divides into one device's time a step."""
    runs = _runs({"jit_train_step": (1, 9_000)}, planes=4)
    assert step_graph_runs(runs) == 20
    # a card says the steps, not the (step, device) runs
    assert step_graph_devices(runs) == 4 and step_graph_devices(runs.iloc[:0]) == 1
    assert traced_text(20, 4) == "5 traced step(s) on each of 4 devices"
    assert traced_text(5, 1) == "5 traced step(s)"


def test_a_step_split_into_two_jits_has_two_graphs() -> None:
    runs = _runs({"jit_grad": (1, 9_000), "jit_update": (1, 2_000), "jit_log": (1, 100)})
    assert step_graphs(runs) == ["jit_grad(42)", "jit_update(42)"]  # jit_log: under a tenth


def test_two_functions_jax_names_alike_stay_apart() -> None:
    """JAX 0.10 names every pmapped function's module `jit__fun`: the step (program 1) and an
    eval (program 2) in the same windows are two programs; the steps are 5, not 10."""
    runs = _runs({"jit__fun": (1, 9_000)})
    evals = runs.assign(name="jit__fun(2)", dur_ns=500 * US)
    both = pd.concat([runs.assign(name="jit__fun(1)"), evals], ignore_index=True)
    assert step_graphs(both) == ["jit__fun(1)"] and step_graph_runs(both) == 5


def _spread(counts: list[int]) -> pd.DataFrame:
    """The step's runs spread over the windows as the host's windows put them, beside a
    module that ran once in each (so every window is known)."""
    runs = _runs({"jit_stage": (1, 1)}, steps=len(counts))
    step = runs.iloc[[0]].assign(name="jit_update(42)", hlo_module="jit_update", dur_ns=2e6)
    spread = [step.assign(step=float(3 + i)) for i, n in enumerate(counts) for _ in range(n)]
    return pd.concat([runs, *spread], ignore_index=True)


def test_windows_the_step_left_empty_count_too() -> None:
    """The v5e's cb_print2 put its step's runs 2, 0, 4, 1, 0 in five windows, cb_print 2, 1,
    3, 1, 0: each run a step (the mode of the windows holding runs alone would be a tie of 2, 4
    and 1). Lagging runs, and an asynchronous loop whose runs all land in its last window,
    too; micro-steps with one window lagging stay micro-steps."""
    assert step_graph_runs(_spread([2, 0, 4, 1, 0])) == 7
    assert step_graph_runs(_spread([2, 1, 3, 1, 0])) == 7
    assert step_graph_runs(_spread([2, 0, 2, 0, 1])) == 5
    assert step_graph_runs(_spread([2, 0, 4, 2, 0])) == 8
    assert step_graph_runs(_spread([0, 0, 0, 0, 5])) == 5
    assert step_graph_runs(_spread([4, 4, 8, 0, 4])) == 5


def test_runs_outside_any_step_window_are_a_step_each() -> None:
    """An imported trace's runs carry step -1 (the whole run): each run is a step."""
    runs = _runs({"jit_decode_step": (1, 1_600)}).assign(step=-1.0)
    assert step_graph_runs(runs) == 5 and step_graphs(runs) == ["jit_decode_step(42)"]


def test_module_names_as_jax_gives_them() -> None:
    assert jax_module_name("train_step") == "jit_train_step"
    assert jax_module_name("<lambda>") == "jit__lambda"
    assert program_module("jit_train_step(1106)") == "jit_train_step"


def _tables(backend: str, runs: pd.DataFrame, functions: list[str | None]) -> RunTables:
    steps = pd.DataFrame(
        {
            "host": "h",
            "pid": 1,
            "step": range(8),
            "boundary": "StepTraceAnnotation" if backend == "jax" else "mark_step",
            "wall_ns": 10**7,
        }
    )
    compiles = pd.DataFrame(
        {
            "host": "h",
            "pid": 1,
            "step": 0,
            "function": functions,
            "eager": False,
            "duration_ns": 10**9,
            "location": "/w/train.py:9",
        }
    )
    meta = {"processes": [{"host": "h", "pid": 1, "backend": backend}], "warmup": 2}
    extra = {"trace_events": runs.assign(host="h", pid=1)}
    return RunTables(meta, steps, compiles, pd.DataFrame(), pd.DataFrame(), extra)


def test_annotated_jax_steps_are_the_traced_step_graph_s_compiles() -> None:
    """A jitted lambda is the step (module `jit__lambda_` as JAX 0.4.30 names it); the init
    compiled in the same annotated first step is setup."""
    runs = _runs({"jit_stage": (6, 1), "jit__lambda_": (1, 15_000)})
    tables = _tables("jax", runs, ["<lambda>", "init"])
    assert list(kinds(tables, tables.compiles)) == ["step", "setup and other"]


def test_a_traced_step_no_compile_names_keeps_the_loop_rule() -> None:
    """A pmapped step's module is `jit__fun` on JAX 0.10: no compile's function names it, so
    the compiles inside the loop's steps stay the step's."""
    tables = _tables("jax", _runs({"jit__fun": (1, 15_000)}), ["train_step", "init"])
    assert list(kinds(tables, tables.compiles)) == ["step", "step"]


def test_torch_xla_steps_keep_the_loop_rule_with_a_trace() -> None:
    """torch_xla's graphs (`SyncTensorsGraph.77`) name no function: compiles inside the
    loop's steps stay the step's, trace or not."""
    runs = _runs({"SyncTensorsGraph.77": (1, 15_000)})
    tables = _tables("torch_xla", runs, [None, None])
    assert list(kinds(tables, tables.compiles)) == ["step", "step"]
