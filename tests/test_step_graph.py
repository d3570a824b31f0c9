"""Which of a device trace's modules are the step's own graphs, and how many steps the trace
holds (tpuscope/analyze/step_graph.py), on module runs laid out as the v5e's traces lay them:
flax's lm1b stages 6 batch leaves a step beside its train step (tests/test_tpu_flax_upstream.py
reads that real run); here the other shapes a loop takes. And rule compile_time's use of them
where the program's own annotations mark the steps."""

from __future__ import annotations

import pandas as pd

from tpuscope.analyze.step_graph import jax_module_name, step_graph_runs, step_graphs
from tpuscope.detect.compile_time import kinds
from tpuscope.detect.tables import RunTables

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
    assert step_graphs(runs) == ["jit_train_step"]
    assert step_graph_runs(runs) == 5  # the old count, the most runs of one module: 30


def test_gradient_accumulation_counts_steps_not_micro_steps() -> None:
    """A big jit called 4 times a step (micro-batches): 5 steps, not 20."""
    assert step_graph_runs(_runs({"jit_micro_step": (4, 3_000), "jit_apply": (1, 500)})) == 5


def test_a_window_edge_step_with_one_run_too_many_still_counts_once() -> None:
    runs = _runs({"jit_train_step": (1, 15_000)})
    extra = runs.iloc[[-1]].assign(step=7.0)  # the next step's run, put in the last one
    assert step_graph_runs(pd.concat([runs, extra], ignore_index=True)) == 6


def test_runs_on_every_device_make_a_per_device_mean() -> None:
    """Four TensorCores each run the step once a step: the count is runs on all of them, so
    that op time summed over the devices divides into one device's time a step."""
    assert step_graph_runs(_runs({"jit_train_step": (1, 9_000)}, planes=4)) == 20


def test_a_step_split_into_two_jits_has_two_graphs() -> None:
    runs = _runs({"jit_grad": (1, 9_000), "jit_update": (1, 2_000), "jit_log": (1, 100)})
    assert step_graphs(runs) == ["jit_grad", "jit_update"]  # jit_log: under a tenth


def test_a_step_recompiled_inside_the_window_is_one_graph() -> None:
    runs = _runs({"jit_train_step": (1, 15_000)}).drop(columns="hlo_module")
    runs.loc[runs.index[-2:], "name"] = "jit_train_step(7)"  # another program id
    assert step_graphs(runs) == ["jit_train_step"] and step_graph_runs(runs) == 5


def test_module_names_as_jax_gives_them() -> None:
    assert jax_module_name("train_step") == "jit_train_step"
    assert jax_module_name("<lambda>") == "jit__lambda"
    assert jax_module_name("train_step", "pmap") == "pmap_train_step"


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
    """A jitted lambda is the step (module `jit__lambda`); the init compiled in the same
    annotated first step is setup."""
    runs = _runs({"jit_stage": (6, 1), "jit__lambda": (1, 15_000)})
    tables = _tables("jax", runs, ["<lambda>", "init"])
    assert list(kinds(tables, tables.compiles)) == ["step", "setup and other"]


def test_torch_xla_steps_keep_the_loop_rule_with_a_trace() -> None:
    """torch_xla's graphs (`SyncTensorsGraph.77`) name no function: compiles inside the
    loop's steps stay the step's, trace or not."""
    runs = _runs({"SyncTensorsGraph.77": (1, 15_000)})
    tables = _tables("torch_xla", runs, [None, None])
    assert list(kinds(tables, tables.compiles)) == ["step", "step"]


def test_runs_outside_any_step_window_are_a_step_each() -> None:
    """An imported trace's runs carry step -1 (the whole run): each run is a step."""
    runs = _runs({"jit_decode_step": (1, 1_600)}).assign(step=-1.0)
    assert step_graph_runs(runs) == 5 and step_graphs(runs) == ["jit_decode_step"]


def test_runs_the_host_windows_spread_unevenly_count_each_once() -> None:
    """cb_print on the v5e: the host's windows put 2, 1, 3 and 1 runs of the step in four
    steps; each run is a step (the median, 1.5, would count 5)."""
    runs = _runs({"jit_update": (1, 2_000)}, steps=4)
    extra = runs.iloc[[0, 2, 2]]
    assert step_graph_runs(pd.concat([runs, extra], ignore_index=True)) == 7
