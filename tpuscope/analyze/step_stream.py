"""Does a run have step structure? Read from the execution stream, not from the step count alone.

Per-step rules (`host_sync` "reads per step", `op_by_op` "ops per step") divide by steps. When
the collector saw no loop, a process is one step (the whole program, or one setup step), and
such a rule turns setup into a verdict: a single value read after the work becomes "1.0 reads
per step", an initialisation's eager ops "38 ops per step" (issue 26). The execution stream
says whether the work repeats: an executable run again from the cache (a step's graph, a
`generate()` decode graph, an eager op used twice) means iterations happened inside that one
step, and a per-step rate over it still describes recurring work; a step whose every
executable ran once (executions <= compiles) is one-off work with no steps to judge.

Setup steps: a program's setup sync before its loop ends a step too; the loop is the boundary
that recurs, so the leading steps at a boundary the loop never passes again are setup, not
iterations: a phase of their own ("setup", analyze/judge.phases: the rule is PodSteps' SQL in
analyze/pod_sql.py), not counted as steps.

So a process has step structure when its loop (the steps before the after-the-loop phase)
has two or more steps, or its one step re-ran an executable. Pure: the steps table's
`executions` (executables launched) and `compiles` (new ones) columns, per process.
"""

from __future__ import annotations

import pandas as pd

PROCESS_KEYS = ["host", "pid"]


def has_step_structure(loop: pd.DataFrame) -> bool:
    """True if any process of these loop steps has steps to judge (see the module doc).
    Rows without the `executions` / `compiles` columns (imported evidence) count as structured."""
    if loop.empty:
        return False
    if not {"executions", "compiles"} <= set(loop.columns):
        return True
    keys = [k for k in PROCESS_KEYS if k in loop.columns]
    frame = loop[[*keys, "executions", "compiles"]].fillna(0)
    if keys:
        per = frame.groupby(keys, dropna=False).agg(
            steps=("executions", "size"),
            executions=("executions", "sum"),
            compiles=("compiles", "sum"),
        )
    else:
        per = pd.DataFrame(
            {
                "steps": [len(frame)],
                "executions": [frame["executions"].sum()],
                "compiles": [frame["compiles"].sum()],
            }
        )
    return bool(((per["steps"] >= 2) | (per["executions"] > per["compiles"])).any())
