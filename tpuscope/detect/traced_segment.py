"""The judged steps a device trace speaks for: those that ran the graphs the traced steps ran.

A trace times the executables its steps ran. Where a jitted function recompiled in the loop
(new shapes for a second phase, a changed argument), the steps after that recompile run
another executable, which the trace never saw: their step time is not the traced steps'. So
the steps a traced measurement extends to are the judged steps between the last in-loop
recompile (analyze/families: a graph of a family compiled before) at or before the first
traced step and the next one after the last traced step. A function's first compile (an
evaluation first called at step 100), an eager op's and a host callback's do not end it.
diffrax's neural ODE example on a v5e: steps 3-7 traced at 8.7 ms a step on the first 10% of
each series; from step 500 it trains on whole series at 24-28 ms a step, a graph compiled at
step 500.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from tpuscope.analyze.device_time import STEP_WINDOWS
from tpuscope.detect.tables import RunTables


@dataclass
class TracedSegment:
    """The judged steps that ran the traced steps' graphs, and the compile that ends them."""

    judged: pd.DataFrame
    after: pd.Series | None  # the first in-loop graph compile after the traced steps

    def text(self, all_judged: int) -> str:
        """ "the run's N judged steps", or which of them ran the traced graphs and why."""
        if len(self.judged) == all_judged or self.judged.empty:
            return f"the run's {all_judged} judged steps"
        steps = self.judged["step"]
        span = f"{int(steps.min())}-{int(steps.max())}"
        after = (
            f"; from step {int(self.after['step'])} the loop ran {_graph(self.after)}, compiled "
            "there and not traced"
            if self.after is not None
            else ""
        )
        return (
            f"the {len(self.judged)} of the run's {all_judged} judged steps that ran the traced "
            f"steps' graphs (steps {span}{after})"
        )


def _graph(row: pd.Series) -> str:
    function = row.get("function")
    return f"{function} at new inputs" if isinstance(function, str) else "a new graph"


def run_steps(rows: pd.DataFrame) -> pd.Series:
    """The run's step numbers of device_steps rows: windows that are the run's steps (not a
    trace's own numbering, nor the whole trace's -1)."""
    if rows.empty or "step" not in rows:
        return pd.Series(dtype="int64")
    if "window" in rows:
        rows = rows[rows["window"].isin(STEP_WINDOWS)]
    return rows["step"][rows["step"] >= 0]


def traced_segment(tables: RunTables, traced_steps: pd.Series) -> TracedSegment:
    """The judged steps between the in-loop recompiles around the traced steps (all of them
    when nothing recompiled in the loop, or the steps are not known)."""
    judged = tables.judged
    if traced_steps.empty or judged.empty or tables.compiles.empty or tables.loop.empty:
        return TracedSegment(judged, None)
    families = tables.families
    if "recompile" not in families:
        return TracedSegment(judged, None)
    graphs = families[families["recompile"].fillna(False).astype(bool)]
    if "eager" in graphs:
        graphs = graphs[~graphs["eager"].fillna(False).astype(bool)]
    if "callback" in graphs:
        graphs = graphs[graphs["callback"].isna()]
    loop = tables.loop["step"]
    graphs = graphs[graphs["step"].between(int(loop.min()), int(loop.max()))]
    first, last = int(traced_steps.min()), int(traced_steps.max())
    before = graphs[graphs["step"] <= first]
    after = graphs[graphs["step"] > last]
    start = int(before["step"].max()) if not before.empty else int(judged["step"].min())
    end = int(after["step"].min()) - 1 if not after.empty else int(judged["step"].max())
    inside = judged[judged["step"].between(start, end)]
    return TracedSegment(inside, after.sort_values("step").iloc[0] if not after.empty else None)
