"""Which of a device trace's modules are the step's own graphs, and how many steps it holds.

A traced step runs more than its graph: flax's lm1b stages each of its batch's 6 leaves with
`jnp.array` every step, 6 tiny `jit_stage` runs beside each `jit_train_step` run on a v5e. So
the step's graph is known by its device time, not by its run count: the module that holds the
most of it, and any module that ran in as many traced steps and holds at least a tenth of that
(a step split into two jits, a gradient and an update). Its runs count the steps, each step
counted by the runs it makes (once, or K times under gradient accumulation), so that a run the
host's step windows put one step off still counts once.
"""

from __future__ import annotations

import re

import pandas as pd

from tpuscope.parse.xplane_meta import MODULE_LINE

PARTNER_SHARE = 0.1  # a second graph of the step holds at least this share of the first's time


def module_runs(events: pd.DataFrame) -> pd.DataFrame:
    """The trace's module runs (line "XLA Modules"): one row a run of a compiled program."""
    if events.empty or "line" not in events:
        return events.iloc[0:0]
    return events[events["line"] == MODULE_LINE]


def _names(runs: pd.DataFrame) -> pd.Series:
    """Each run's module name without its program id (a recompiled step is the same graph)."""
    column = "hlo_module" if "hlo_module" in runs else "name"
    return runs[column].astype(str).str.replace(r"\(\d+\)$", "", regex=True)


def step_graphs(runs: pd.DataFrame) -> list[str]:
    """The step's own modules, costliest first: the module with the most device time, then
    those that ran in as many of the traced steps and hold PARTNER_SHARE of its time."""
    if runs.empty or "dur_ns" not in runs:
        return []
    names = _names(runs)
    time = runs["dur_ns"].groupby(names).sum().sort_values(ascending=False, kind="stable")
    ranked = [(str(name), float(ns)) for name, ns in time.items()]
    top, top_ns = ranked[0]
    stepped = runs["step"].where(runs["step"] >= 0) if "step" in runs else None
    if stepped is None or stepped.isna().all():  # no step windows (-1: the whole run)
        return [top]
    steps = {str(k): int(v) for k, v in stepped.groupby(names).nunique().items()}
    return [top] + [
        name
        for name, ns in ranked[1:]
        if steps[name] >= steps[top] and ns >= PARTNER_SHARE * top_ns
    ]


def step_graph_runs(runs: pd.DataFrame) -> int:
    """The steps the module runs hold, counted by the step's own graph: its runs (on every
    device, so that a time summed over devices divides into a per-device mean) over its runs
    a step on one device, the most common count (the smallest of equals): the host's windows
    of a dispatch-bound step put 2, 1, 3 and 1 runs in four steps on the v5e (cb_print)."""
    graphs = step_graphs(runs)
    if not graphs:
        return 0
    mine = runs[_names(runs) == graphs[0]]
    stepped = mine[mine["step"] >= 0] if "step" in mine else mine.iloc[0:0]
    if stepped.empty:  # no step windows (-1: the whole run), each run a step
        return len(mine)
    keys = [k for k in ("host", "pid", "plane") if k in mine] + ["step"]
    per_step = float(stepped.groupby(keys, observed=True).size().mode().iloc[0])
    return max(1, round(len(mine) / max(per_step, 1.0)))


def jax_module_name(function: str, transform: str = "jit") -> str:
    """The module name JAX gives a jitted (or pmapped) function's program: `jit(<lambda>)` ->
    `jit__lambda` (jax._src.interpreters.mlir: sanitize_name, then trailing '_' stripped)."""
    return re.sub(r"[^\w.-]", "_", f"{transform}({function})").rstrip("_")
