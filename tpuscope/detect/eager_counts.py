"""How many primitives the judged steps of a JAX run dispatched one by one, outside jit: the
evidence rule op_by_op is built on, and what tells rule tensorcore_underuse that a device idle
in those steps waited for that dispatching (its cause has a card of its own)."""

from __future__ import annotations

import pandas as pd

from tpuscope.analyze.step_stream import has_step_structure
from tpuscope.detect import common
from tpuscope.detect.tables import RunTables

DISPATCH_METRIC = "jax.eager_dispatch_time"  # count = primitives, total = host ns inside them
MIN_EAGER = 10  # primitives per judged step that make a loop op by op


def eager_per_step(tables: RunTables) -> pd.DataFrame:
    """Per judged (process, step): eager dispatches, their host ns, executions and compile ns;
    empty where the run has no eager-dispatch metric."""
    dispatches = tables.metric_rows([DISPATCH_METRIC]) if not tables.metrics.empty else None
    judged = tables.judged
    if dispatches is None or dispatches.empty or judged.empty:
        return pd.DataFrame()
    keys = [k for k in ("host", "pid", "step") if k in judged.columns]
    rows = common.judged_rows(dispatches, judged)
    rows = rows[rows["name"] == DISPATCH_METRIC] if not rows.empty else rows
    eager = (
        rows.groupby(keys, dropna=False)[["count", "total"]].sum().reset_index()
        if not rows.empty
        else pd.DataFrame(columns=[*keys, "count", "total"])
    )
    frame = judged[[*keys, "executions", "compile_ns", "wall_ns"]].merge(eager, on=keys, how="left")
    return frame.fillna({"count": 0, "total": 0.0, "executions": 0, "compile_ns": 0})


def eager_dispatches_per_step(tables: RunTables) -> float:
    """Primitives dispatched outside jit per judged step (0 without the metric)."""
    frame = eager_per_step(tables)
    return float(frame["count"].mean()) if not frame.empty else 0.0


def runs_op_by_op(tables: RunTables) -> bool:
    """Whether rule op_by_op judges this JAX run op by op: a loop (issue 26: a run with no
    per-step structure gets no per-step rule) whose steps dispatch MIN_EAGER primitives or more."""
    if tables.steps.empty or not has_step_structure(common.loop_steps(tables)):
        return False
    return eager_dispatches_per_step(tables) >= MIN_EAGER
