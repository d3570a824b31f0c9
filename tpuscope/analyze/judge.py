"""The rules of judgement every surface shares: judged steps, severity, value reads.

Judged steps. `--warmup N` (meta['warmup'], default 2) first steps of each process
are left out of step-time figures and per-step rates (the first steps compile and
allocate); whether a compile is a recompile does not depend on them (graph families,
analyze/families.py). A run whose steps are fewer than N + 1 keeps its last step
judged, so a short run still has a step time. The trailing step with boundary "end"
(work after the program's last step boundary, recorded when profiling stops) is the
"after the loop" phase: reported, never judged as a step, except in a process that had
no step boundary at all, whose one "end" step is the whole program, judged as one step.

Severity. A finding's cost is measured (or estimated, and it says so) in seconds;
its severity is that cost's share of the wall time it was taken from: a per-step cost
(fallbacks, host syncs) over the judged steps' wall time, a compile cost (recompiles,
wherever they happen) over the whole run's wall time (run_wall_s: every step of every
process, warm-up and the after-the-loop phase included, or the program's duration when
longer), so no share exceeds 100%: high at >= HIGH_SHARE, medium at >= MEDIUM_SHARE, low
below; never high below HIGH_MIN_S (a card that reads "0.00 s lost" is not high). Imported
evidence without wall time is "medium" when it counts something.

Value reads. `aten::_local_scalar_dense` is torch_xla's counter of `.item()`-style
reads: a host sync, never a CPU fallback.
"""

from __future__ import annotations

import pandas as pd

from tpuscope.analyze.step_stream import setup_steps

PROCESS_KEYS = ["host", "pid"]
HIGH_SHARE = 0.10
MEDIUM_SHARE = 0.01
HIGH_MIN_S = 0.01
VALUE_READ_OPS = ("aten::_local_scalar_dense",)
AFTER_LOOP = "end"
NOT_LOOP = ("setup", "after")  # phases that are no step of the loop


def is_value_read(op: object) -> bool:
    return op in VALUE_READ_OPS


def process_keys(frame: pd.DataFrame) -> list[str]:
    return [k for k in PROCESS_KEYS if k in frame.columns]


def phases(steps: pd.DataFrame, warmup: int) -> pd.Series:
    """Per step row: "setup", "warmup", "judged" or "after" (the after-the-loop phase). Setup
    steps (analyze/step_stream.setup_steps) come before the loop and are not its steps; the
    warm-up counts from the loop's first step."""
    if steps.empty:
        return pd.Series(dtype=object, index=steps.index)
    after = (
        steps["boundary"].astype(str).eq(AFTER_LOOP)
        if "boundary" in steps
        else pd.Series(False, index=steps.index)
    )
    setup = setup_steps(steps, after)
    keys = process_keys(steps)
    loop = steps.loc[
        ~(after | setup), [*keys, "step"]
    ]  # only what is read: not a copy of every column
    if keys and not loop.empty:
        grouped = loop.groupby(keys, dropna=False)["step"]
        last, first = grouped.transform("max"), grouped.transform("min")
    else:
        last = loop["step"].max() if not loop.empty else 0
        first = loop["step"].min() if not loop.empty else 0
    limit = (
        (first + warmup).clip(upper=last)
        if isinstance(first, pd.Series)
        else min(first + warmup, last)
    )
    out = pd.Series("after", index=steps.index, dtype=object)
    out.loc[loop.index] = (loop["step"] >= limit).map({True: "judged", False: "warmup"})
    out.loc[setup] = "setup"
    return out.mask(_whole_program(steps, after, keys), "judged")


def in_loop(phase: pd.Series) -> pd.Series:
    """The rows of the loop's steps (warm-up and judged): not setup, not after the loop."""
    return ~phase.isin(NOT_LOOP)


def _whole_program(steps: pd.DataFrame, after: pd.Series, keys: list[str]) -> pd.Series:
    """Rows that are a process's only step and an "end" one: no step boundary was ever seen."""
    if not keys:
        return after & (len(steps) == 1)
    sizes = steps.groupby(keys, dropna=False)["step"].transform("size")
    return after & (sizes == 1)


def judged_steps(steps: pd.DataFrame, warmup: int) -> pd.DataFrame:
    """The steps that step-time figures and per-step rates are taken over."""
    if steps.empty:
        return steps
    return steps[phases(steps, warmup) == "judged"]


def severity(cost_s: float, wall_s: float) -> str:
    """high / medium / low by the cost's share of the wall time (see the module doc)."""
    if wall_s <= 0:
        return "medium" if cost_s > 0 else "low"
    share = cost_s / wall_s
    if share >= HIGH_SHARE and cost_s >= HIGH_MIN_S:
        return "high"
    return "medium" if share >= MEDIUM_SHARE else "low"


def wall_s(steps: pd.DataFrame) -> float:
    """Seconds of wall time in these steps."""
    return float(steps["wall_ns"].sum()) / 1e9 if not steps.empty else 0.0


def run_wall_s(steps: pd.DataFrame, duration_s: float | None = None) -> float:
    """The whole run's wall time: every step of every process (warm-up, after the loop), or the
    program's duration when that is longer and the run is one process. One-off costs such as
    compiles are shares of it: they happen in any step, so their share never exceeds 100%."""
    total = wall_s(steps)
    processes = (
        len(steps.groupby(process_keys(steps), dropna=False))
        if process_keys(steps) and not steps.empty
        else 1
    )
    if duration_s and processes <= 1:
        total = max(total, float(duration_s))
    return total


def share(cost_s: float, wall: float) -> float:
    """cost / wall, never above 1 (a cost measured outside the wall, e.g. clock skew, is all of it)."""
    return min(cost_s / wall, 1.0) if wall > 0 else 0.0
