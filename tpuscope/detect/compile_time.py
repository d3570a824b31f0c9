"""Rule `compile_time`: compiling takes more than SHARE_BOUND of the wall time after warm-up.

A run whose steps past warm-up still spend a large part of their time in the XLA
compiler is not measuring training; the recompile and shape_churn findings say
which compiles, this one says how much of the run they ate. Cost: the compile time
of the judged steps. Needs steps (imported totals have no wall time to compare to).
"""

from __future__ import annotations

from tpuscope.detect import common
from tpuscope.detect.registry import RunTables
from tpuscope.schema import Finding

RULE = "compile_time"
SHARE_BOUND = 0.10
HIGH_SHARE = 0.30
FIX = ("Remove the recompiles first (see the recompile and shape_churn findings). Compiles that must "
       "stay can be cached across runs with torch_xla's persistent cache: call "
       "`torch_xla.runtime.initialize_cache('/path/to/cache', readonly=False)` before the first step.")


def detect_compile_time(tables: RunTables) -> list[Finding]:
    """One finding when compile time after warm-up exceeds SHARE_BOUND of the judged wall time."""
    judged = common.judged_steps(tables)
    if judged.empty:
        return []
    wall = common.wall_s(judged)
    compile_s = float(judged["compile_ns"].fillna(0).sum()) / common.NS
    share = compile_s / wall if wall else 0.0
    if share <= SHARE_BOUND:
        return []
    steps = common.steps_list(judged.loc[judged["compile_ns"].fillna(0) > 0, "step"])
    title = f"Compiling takes {100 * share:.0f}% of the wall time after warm-up"
    detail = (f"{compile_s:.2f} s of the {wall:.2f} s after warm-up ({len(judged)} steps) went to XLA "
              f"compiles, in {len(steps)} steps; the bound is {100 * SHARE_BOUND:.0f}%. Cost: that compile "
              "time (CompileTime of the judged steps).")
    evidence = {"compile_s": compile_s, "wall_s": wall, "share": share, "bound": SHARE_BOUND,
                "judged_steps": len(judged)}
    severity = "high" if share >= HIGH_SHARE else "medium"
    return [Finding(RULE, severity, title, detail, FIX, None, compile_s, steps, evidence)]
