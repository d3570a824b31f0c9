"""How many primitives the judged steps of a JAX run dispatched one by one, outside jit: the
evidence rule op_by_op is built on, and what tells rule tensorcore_underuse that a device idle
in those steps waited for that dispatching (its cause has a card of its own)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpuscope.analyze.step_stream import has_step_structure
from tpuscope.detect import common
from tpuscope.detect.compile_kinds import library_step_function, step_sources
from tpuscope.detect.tables import RunTables

DISPATCH_METRIC = "jax.eager_dispatch_time"  # count = primitives, total = host ns inside them
MIN_EAGER = 10  # primitives per judged step that make a loop op by op
BURST = 4  # a step of this many times the median step's primitives or more is a burst
RARE = 0.05  # the share of steps up to which bursts are one-offs, not what the loop does
HOLDS_IDLE = 1 / 3  # the share of the idle time the dispatches of ops beside a step explain


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
    frame = frame.merge(_eager_compiles(tables, keys), on=keys, how="left")
    return frame.fillna(
        {"count": 0, "total": 0.0, "executions": 0, "compile_ns": 0, "eager_compile_ns": 0.0}
    )


def _eager_compiles(tables: RunTables, keys: list[str]) -> pd.DataFrame:
    """Per (process, step): ns compiling ops outside jit (the compiles' `eager` rows), not
    those a host callback's Python made: the compiles inside the eager dispatches."""
    compiles = tables.compiles
    empty = pd.DataFrame(columns=[*keys, "eager_compile_ns"])
    if compiles.empty or "eager" not in compiles or not set(keys) <= set(compiles):
        return empty
    mine = compiles["eager"].fillna(False).astype(bool)
    if "callback" in compiles:
        mine &= compiles["callback"].isna()
    rows = compiles[mine]
    if rows.empty:
        return empty
    return (
        rows.groupby(keys, dropna=False)["duration_ns"]
        .sum()
        .rename("eager_compile_ns")
        .reset_index()
    )


def eager_dispatches_per_step(tables: RunTables) -> float:
    """Primitives dispatched outside jit a steady judged step (0 without the metric)."""
    frame = steady(eager_per_step(tables))
    return float(frame["count"].mean()) if not frame.empty else 0.0


def steady(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame`'s steps (eager_per_step) less rare bursts: steps of more than BURST times the
    median's primitives, where they are RARE of the steps or fewer (more are the loop's own
    pattern: a metric computed eagerly every tenth step). jax-ai-stack's miniGPT tutorial on a
    v5e dispatched 7 primitives a training step, and 525 and 512 in the two steps whose windows
    held its text generation: with them, a mean of 11.1 called every step op by op."""
    if frame.empty:
        return frame
    counts = frame["count"]
    bursts = counts > BURST * max(float(counts.median()), 1.0)
    return frame[~bursts] if bursts.mean() <= RARE else frame


def runs_op_by_op(tables: RunTables) -> bool:
    """Whether rule op_by_op judges this JAX run op by op: a loop (issue 26: a run with no
    per-step structure gets no per-step rule) whose steps dispatch MIN_EAGER primitives or more."""
    if tables.steps.empty or not has_step_structure(common.loop_steps(tables)):
        return False
    return eager_dispatches_per_step(tables) >= MIN_EAGER


def dispatch_s(frame: pd.DataFrame) -> float:
    """Host seconds inside the eager dispatches of `frame`'s steps (eager_per_step), the ops'
    own compiles out (a jitted function's compile is not inside them): the dispatching's own
    time. A step whose eager compiles hold its dispatches' whole time adds nothing: there it is
    not measured (dispatch_measured)."""
    return float((frame["total"] - frame["eager_compile_ns"]).clip(lower=0).sum()) / common.NS


def dispatch_measured(frame: pd.DataFrame) -> bool:
    """Whether any step's dispatches took longer than the ops' compiles inside them (JAX's
    library functions run outside jit, `jnp.where` among them, compile as jitted calls the
    dispatch metric does not time: Flax's Gemma sampler compiled 1.68 s of them in a request
    whose primitives' dispatches took 0.77 s)."""
    return bool((frame["total"] > frame["eager_compile_ns"]).any())


def jit_calls_per_step(frame: pd.DataFrame) -> float:
    """Jitted calls a judged step: its executions less its eager dispatches."""
    return float((frame["executions"] - frame["count"]).clip(lower=0).mean())


def beside_step(meta: dict[str, Any], jit_calls: float) -> str | None:
    """The program's compiled step function where every judged step calls it (the ops run
    beside it: Equinox's ViT example split its dropout keys beside its `eqx.filter_jit` step,
    73 ops a step, docs/tpu.md); None where the step itself is not compiled."""
    names = {match["name"] for match in step_sources(meta)}
    if jit_calls < 0.9 or len(names) != 1 or library_step_function(meta):
        return None
    return names.pop()


def dispatching_holds_idle(tables: RunTables, idle_s_per_step: float) -> bool:
    """Whether the judged steps' eager dispatching is what the device's idle time waited for:
    a step run op by op (no compiled step called every step) always; ops beside a compiled
    step where their dispatches' own host time is HOLDS_IDLE of the idle time or more (the
    Python between the ops goes with them: Equinox's ViT example's 73 ops took 10.75 ms inside
    their dispatches, 0.44 of its 24.32 ms idle, and splitting its keys in one call saved
    14.82 ms, 0.61 of it). Flax's Gemma
    sampler on a v5e dispatched 137 ops a request beside its compiled decoder, 17 ms of host
    time in a 423 ms idle request; its logits copied into Python lists took 338 ms of it
    (docs/tpu.md)."""
    if not runs_op_by_op(tables):
        return False
    frame = steady(eager_per_step(tables))
    if beside_step(tables.meta, jit_calls_per_step(frame)) is None:
        return True
    return dispatch_s(frame) / max(len(frame), 1) >= HOLDS_IDLE * idle_s_per_step
