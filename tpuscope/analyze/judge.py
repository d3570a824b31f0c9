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
wherever they happen) over the whole run's wall time (run_wall_s: every step of
every process, warm-up and the after-the-loop phase included, or the program's duration when
longer), so no share exceeds 100%: high at >= HIGH_SHARE, medium at >= MEDIUM_SHARE, low
below; never high below HIGH_MIN_S (a card that reads "0.00 s lost" is not high). Imported
evidence without wall time is "medium" when it counts something.

Value reads. `aten::_local_scalar_dense` is torch_xla's counter of `.item()`-style
reads: a host sync, never a CPU fallback.
"""

from __future__ import annotations

import pandas as pd

from tpuscope.schema_consts import AFTER_LOOP as AFTER_LOOP  # the rules read it here too

HIGH_SHARE = 0.10
MEDIUM_SHARE = 0.01
HIGH_MIN_S = 0.01
VALUE_READ_OPS = ("aten::_local_scalar_dense",)
NOT_LOOP = ("setup", "after")  # phases that are no step of the loop


def is_value_read(op: object) -> bool:
    return op in VALUE_READ_OPS


def phases(steps: pd.DataFrame, warmup: int) -> pd.Series:
    """Per step row: "setup", "warmup", "judged" or "after" (the after-the-loop phase). Setup
    steps come before the loop and are not its steps (a process's leading steps at a boundary
    kind its loop passes only once, with at least two steps after them); the warm-up counts
    from the loop's first step. The rule is stated once, in SQL (analyze/pod_sql.PodSteps),
    which labels a pod's rows in its parts and a run's rows in memory alike."""
    if steps.empty:
        return pd.Series(dtype=object, index=steps.index)
    from tpuscope.analyze.pod_sql import PodSteps

    return pd.Series(PodSteps.over_frame(steps, warmup).labels(), index=steps.index, dtype=object)


def in_loop(phase: pd.Series) -> pd.Series:
    """The rows of the loop's steps (warm-up and judged): not setup, not after the loop."""
    return ~phase.isin(NOT_LOOP)


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


def run_wall_s(steps_wall_s: float, processes: int, duration_s: float | None = None) -> float:
    """The whole run's wall time: every step of every process (warm-up, after the loop: its
    steps' wall time, from PodSteps.step_figures), or the program's duration when that is
    longer and the run is one process. One-off costs such as compiles are shares of it: they
    happen in any step, so their share never exceeds 100%."""
    if duration_s and processes <= 1:
        return max(steps_wall_s, float(duration_s))
    return steps_wall_s


def share(cost_s: float, wall: float) -> float:
    """cost / wall, never above 1 (a cost measured outside the wall, e.g. clock skew, is all of it)."""
    return min(cost_s / wall, 1.0) if wall > 0 else 0.0
