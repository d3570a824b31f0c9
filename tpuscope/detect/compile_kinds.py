"""Which of a run's first compiles are the step's own, which are ops compiled one by one
outside `jit`, and which are setup and other (rule compile_time's split, its pod form's too).

JAX: the jitted function whose calls are the loop's steps (boundary `jit:<name>`); where the
program's own `StepTraceAnnotation`s mark the steps, the compiles of the step's own graphs in
the device trace (analyze/step_graph.py). torch_xla, and JAX steps neither names: compiles
inside the loop's steps.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pandas as pd

from tpuscope.analyze.step_graph import jax_module_name, module_runs, program_module, step_graphs
from tpuscope.detect import common
from tpuscope.detect.tables import RunTables
from tpuscope.schema_consts import ANNOTATION_BOUNDARY
from tpuscope.user_files import import_path, is_user_file

STEP, EAGER, OTHER = "step", "eager", "setup and other"
CALLBACK = "callback"  # an op a host callback's Python ran outside jit (detect/callback_ops.py)
# collect/jax/steps.py's meta: "calls of jitted train_step (/work/train.py:17)"; a function
# with no code object is written "(None)"
# where a library's jit of the program's own function is defined: `eqx.filter_jit` passes
# jax.jit its `fun_wrapped`, named after the program's function (Equinox 0.13.8)
OWN_FUNCTION_JITS = ("equinox/_jit.py",)
STEP_SOURCE = re.compile(r"^calls of \S+ (?P<name>\S+) \((?P<path>.*?)(?::(?P<line>\d+))?\)$")
KERAS_TRAINER = f"{os.sep}keras{os.sep}src{os.sep}"  # keras 3's package, wherever installed


def step_sources(meta: dict[str, Any]) -> Iterator[re.Match[str]]:
    """Each JAX process's step function as its meta names it (name, path, line)."""
    for process in meta.get("processes", []) or []:
        match = STEP_SOURCE.match(str(process.get("jax_step_source") or ""))
        if match:
            yield match


def keras_step(meta: dict[str, Any]) -> str | None:
    """Keras's own step function (its `fit` calls `train_step` from keras/src/backend/jax/
    trainer.py), as its import path and line, else None. Keras then runs the loop and builds the
    model, each layer's variables made op by op outside `jit`: what the program could jit or
    compile ahead of the loop is not in its own code. Keras's alone, not any library's step:
    a program whose loop calls optax op by op has optax's most-called jitted function as its
    step, and its own setup to jit."""
    for match in step_sources(meta):
        if KERAS_TRAINER in match["path"]:
            line = f":{match['line']}" if match["line"] else ""
            return f"{import_path(match['path'])}{line}"
    return None


def library_step_function(meta: dict[str, Any]) -> bool:
    """Whether the JAX step function is a library's: a loop that jits nothing of its own has
    its most-called library function as its step (optax's `tree_bias_correction`), which the
    program does not call itself and cannot compile ahead of the loop. Not a jit wrapper's
    (OWN_FUNCTION_JITS): what it compiles is the program's own function, under its name."""
    return any(
        m["line"] and not is_user_file(m["path"]) and not m["path"].endswith(OWN_FUNCTION_JITS)
        for m in step_sources(meta)
    )


def _step_functions(tables: RunTables) -> set[str]:
    """JAX: the jitted functions whose calls are the loop's steps (boundary `jit:<name>`)."""
    loop = common.loop_steps(tables)
    if loop.empty or "boundary" not in loop:
        return set()
    names = loop["boundary"].astype(str)
    # a boundary names the function as jax.jit saw it (maybe qualified), a compile by its name
    return {
        n.split(":", 1)[1].rsplit(".", 1)[-1]
        for n in names.unique()
        if n.startswith(("jit:", "pmap:"))
    }


def _traced_step_compiles(tables: RunTables, rows: pd.DataFrame) -> pd.Series | None:
    """JAX steps marked by the program's own `StepTraceAnnotation`s, with a device trace: the
    compiles of the step's own graphs (analyze/step_graph.py), by the module name JAX gives
    each function's program. Flax's lm1b compiles its init, eval and decoding jits inside its
    annotated loop's first steps too; they are not the step. None where this cannot say (no
    trace, another backend or step marker, a graph no compile names: a pmapped step)."""
    loop = common.loop_steps(tables)
    annotated = "boundary" in loop and (loop["boundary"] == ANNOTATION_BOUNDARY).any()
    if tables.backend != "jax" or "function" not in rows or not annotated:
        return None
    runs = module_runs(tables.extra.get("trace_events", pd.DataFrame()))
    modules = {program_module(p).rstrip("_") for p in step_graphs(runs)}
    step = (
        rows["function"]
        .astype(object)
        .map(lambda f: isinstance(f, str) and jax_module_name(f) in modules)
        .astype(bool)
    )
    return step if step.any() else None


def kinds(tables: RunTables, rows: pd.DataFrame) -> pd.Series:
    """Each compile's kind: the step's own, an eager op (JAX, outside jit), an op a host
    callback ran, or setup and other."""
    out = pd.Series(OTHER, index=rows.index, dtype=object)
    if rows.empty:
        return out
    eager = rows["eager"].fillna(False).astype(bool) if "eager" in rows else out.eq("")
    functions = _step_functions(tables)
    traced = None if functions else _traced_step_compiles(tables, rows)
    if functions and "function" in rows:
        step = rows["function"].isin(functions)
    elif traced is not None:
        step = traced
    else:  # torch_xla, or JAX steps not marked by a jitted call: compiled inside a loop step
        loop = common.loop_steps(tables)
        keys = [k for k in ("host", "pid") if k in rows and k in loop]
        if loop.empty:
            step = out.eq("")
        else:
            marked = rows[[*keys, "step"]].merge(
                loop[[*keys, "step"]].drop_duplicates(), "left", indicator=True
            )
            step = pd.Series((marked["_merge"] == "both").to_numpy(), index=rows.index)
    out[step & ~eager] = STEP
    out[eager] = EAGER
    if "callback" in rows:
        out[rows["callback"].notna().to_numpy()] = CALLBACK
    return out
