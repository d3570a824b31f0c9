"""Which of a device trace's modules are the step's own graphs, and how many steps it holds.

A traced step runs more than its graph: flax's lm1b stages each of its batch's 6 leaves with
`jnp.array` every step, 6 tiny `jit_stage` runs beside each `jit_train_step` run on a v5e. So
the step's graph is known by its device time, not by its run count: the program that holds the
most of it (a program is a module run's name with its program id: two functions JAX names
alike, `jit__fun` for every pmapped function on JAX 0.10, stay apart), and any program that
ran as often as the steps and holds at least a tenth of that (a step split into two jits, a
gradient and an update). Its runs count the steps: each run a step, unless the step's graph
ran K times in most of the traced step windows, empty ones included (gradient accumulation's
micro-steps); the host's windows spread a dispatch-bound step's runs unevenly (2, 0, 4, 1 and
0 runs in five windows on the v5e, `cb_print2`), so an uneven spread is one run a step.
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


def step_graphs(runs: pd.DataFrame) -> list[str]:
    """The step's own programs (module run names, program id included), costliest first: the
    one with the most device time, then those that ran as often as the steps and hold
    PARTNER_SHARE of its time."""
    ranked = _by_time(runs)
    if not ranked:
        return []
    top, top_ns = ranked[0]
    count = _steps(runs, top)
    made = {str(k): int(v) for k, v in runs["name"].astype(str).value_counts().items()}
    return [top] + [
        name for name, ns in ranked[1:] if made[name] >= count and ns >= PARTNER_SHARE * top_ns
    ]


def step_graph_runs(runs: pd.DataFrame) -> int:
    """The traced steps times the devices that ran them (a time summed over the devices
    divides by it into one device's time a step), counted by the step's own graph."""
    ranked = _by_time(runs)
    return _steps(runs, ranked[0][0]) if ranked else 0


def step_graph_devices(runs: pd.DataFrame) -> int:
    """The devices that ran the step's graph (at least 1): step_graph_runs over it is the
    traced steps, as a report says them (a v5e-8 host's 5 steps are 40 step graph runs)."""
    ranked = _by_time(runs)
    if not ranked:
        return 1
    mine = runs[runs["name"].astype(str) == ranked[0][0]]
    devices = [k for k in ("host", "pid", "plane") if k in mine]
    return max(1, len(mine[devices].drop_duplicates())) if devices else 1


def _by_time(runs: pd.DataFrame) -> list[tuple[str, float]]:
    """(program, its device time), the most first."""
    if runs.empty or not {"name", "dur_ns"} <= set(runs.columns):
        return []
    time = runs["dur_ns"].groupby(runs["name"].astype(str)).sum()
    return [
        (str(n), float(ns)) for n, ns in time.sort_values(ascending=False, kind="stable").items()
    ]


def _steps(runs: pd.DataFrame, program: str) -> int:
    """Runs of `program` (on every device) over its runs a step: K where it ran K times in
    most step windows on each device (every window a module ran in, empty ones counted) and
    K agrees with its mean; else 1."""
    mine = runs[runs["name"].astype(str) == program]
    if "step" not in runs or not (runs["step"] >= 0).any():
        return len(mine)  # no step windows (-1: the whole run): each run a step
    windows = sorted(runs.loc[runs["step"] >= 0, "step"].unique())
    devices = [k for k in ("host", "pid", "plane") if k in mine]
    stepped = mine[mine["step"] >= 0]
    counts = stepped.groupby([*devices, "step"], observed=True).size()
    if devices:
        grid = counts.unstack("step", fill_value=0).reindex(columns=windows, fill_value=0)
    else:
        grid = counts.reindex(windows, fill_value=0).to_frame().T
    cells = pd.Series(grid.to_numpy().ravel())
    k = int(cells.mode().min()) if len(cells) else 1
    mean = len(stepped) / max(len(cells), 1)
    if k > 1 and k == int(mean + 0.5):
        return max(1, int(len(mine) / k + 0.5))
    return len(mine)


def program_module(program: str) -> str:
    """A module run's name without its program id: `jit_train_step(1106...)` -> `jit_train_step`."""
    return re.sub(r"\(-?\d+\)$", "", program)


def jax_module_name(function: str) -> str:
    """The module name JAX gives a jitted function's program, trailing '_' stripped (JAX 0.10
    strips them, 0.4.30 did not): `jit(<lambda>)` -> `jit__lambda` (jax._src.interpreters.mlir
    `sanitize_name`). A pmapped function's is `jit__fun` on JAX 0.10: no name to match."""
    return re.sub(r"[^\w.-]", "_", f"jit({function})").rstrip("_")
