"""Rule `op_by_op`: a hot loop that runs operations one by one instead of one compiled program.

torch_xla strict eager (`torch_xla.experimental.eager_mode(True)`): per step, the
`EagerOpExecuteTime` samples count the device programs run one op each; at
MIN_DISPATCHES_PER_STEP or more per judged step the finding names the count and the
fused alternative (`torch_xla.compile`). Its cost is an upper bound (the steps' wall
time outside compiles), said so in the card; `tpuscope bench` measures the real gap.

JAX:
Evidence comes from the JAX collector (docs/backends.md): per step, the metric
`jax.eager_dispatch_time` (count = primitives run outside jit, total = host ns
spent inside those dispatches), the counter `jax.jit_calls`, and the table
`call_sites` (kind `eager_dispatch`: primitive and user line, counted per step).
Each eager dispatch is a separate device program, launched from Python, with no
fusion between them; `jax.jit` turns the step into one compiled program.

Triggers when the judged steps dispatch at least MIN_DISPATCHES_PER_STEP primitives
eagerly on average; a run with no step source (one whole-run step) is judged as a
whole. Cost: the measured host time inside those dispatches, minus compile time in
the same steps: a lower bound, since jit also removes Python overhead between the ops
and fuses them. Severity: the cost's share of the wall time (analyze/judge).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpuscope.analyze import judge
from tpuscope.analyze.contract import OpByOpEvidence
from tpuscope.analyze.step_stream import has_step_structure
from tpuscope.detect import common
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding

RULE = "op_by_op"
MIN_DISPATCHES_PER_STEP = 10
DISPATCH_METRIC = "jax.eager_dispatch_time"
XLA_EAGER_METRIC = "EagerOpExecuteTime"
TOP = 5


def _judged(tables: RunTables) -> pd.DataFrame:
    """The judged steps (analyze/judge: a run with no step boundary is one judged step)."""
    return tables.judged


def _per_step(metrics: pd.DataFrame, judged: pd.DataFrame) -> pd.DataFrame:
    """Per judged (process, step): eager dispatches, their host ns, executions and compile ns."""
    keys = [k for k in ("host", "pid", "step") if k in judged.columns]
    rows = common.judged_rows(metrics, judged)
    rows = rows[rows["name"] == DISPATCH_METRIC] if not rows.empty else rows
    eager = (
        rows.groupby(keys, dropna=False)[["count", "total"]].sum().reset_index()
        if not rows.empty
        else pd.DataFrame(columns=[*keys, "count", "total"])
    )
    frame = judged[[*keys, "executions", "compile_ns", "wall_ns"]].merge(eager, on=keys, how="left")
    return frame.fillna({"count": 0, "total": 0.0, "executions": 0, "compile_ns": 0})


def _top(frame: pd.DataFrame, by: str, n: int = TOP) -> list[dict[str, Any]]:
    grouped = frame.groupby(by, dropna=False)["count"].sum().sort_values(ascending=False).head(n)
    return [
        {by: key if key == key else None, "count": int(count)} for key, count in grouped.items()
    ]


def detect_op_by_op(tables: RunTables) -> list[Finding]:
    """One finding when the judged steps run many ops one by one (JAX outside jit, torch_xla eager)."""
    metrics = tables.metrics
    if tables.steps.empty or metrics.empty:
        return []
    if not has_step_structure(common.loop_steps(tables)):  # issue 26 (xsteps): no per-step rule
        return []
    dispatches = tables.metric_rows([DISPATCH_METRIC])
    if dispatches.empty:
        return _xla_eager(tables)
    judged = _judged(tables)
    if judged.empty:
        return []
    frame = _per_step(dispatches, judged)
    per_step = float(frame["count"].mean())
    if per_step < MIN_DISPATCHES_PER_STEP:
        return []
    cost_s = float((frame["total"] - frame["compile_ns"]).clip(lower=0).sum()) / common.NS
    wall = judge.wall_s(judged)
    share = cost_s / wall if wall else 0.0
    jit_calls = float((frame["executions"] - frame["count"]).clip(lower=0).mean())
    sites = tables.extra.get("call_sites", pd.DataFrame())
    if not sites.empty:
        sites = common.judged_rows(sites[sites["kind"] == "eager_dispatch"], judged)
    lines = _top(sites, "location") if not sites.empty else []
    primitives = _top(sites, "name") if not sites.empty else []
    location = next((row["location"] for row in lines if row["location"]), None)
    severity = common.judged_severity(cost_s, tables)
    return [
        _finding(
            per_step,
            jit_calls,
            cost_s,
            wall,
            share,
            severity,
            location,
            judged["step"],
            lines,
            primitives,
        )
    ]


def _xla_eager(tables: RunTables) -> list[Finding]:
    """torch_xla strict eager: every op its own execution (EagerOpExecuteTime samples per step)."""
    judged = _judged(tables)
    if judged.empty or tables.backend != "torch_xla":
        return []
    eager = common.metric_per_step(
        common.judged_rows(tables.metric_rows([XLA_EAGER_METRIC]), judged),
        [XLA_EAGER_METRIC],
        "count",
    )
    per_step = float(eager["count"].sum()) / len(judged)
    if per_step < MIN_DISPATCHES_PER_STEP:
        return []
    cost = (
        float((judged["wall_ns"] - judged["compile_ns"].fillna(0)).clip(lower=0).sum()) / common.NS
    )
    runs, count = Finding.of_steps(judged["step"])
    return [
        Finding(
            rule=RULE,
            severity=common.judged_severity(cost, tables),
            title=f"{per_step:.0f} ops per step executed one by one (torch_xla eager mode)",
            detail=(
                f"{len(judged)} steps executed {per_step:.1f} device programs each "
                f"({XLA_EAGER_METRIC} samples): under torch_xla.experimental.eager_mode(True) every op is "
                "compiled and launched on its own, with no fusion between them. Cost (upper bound): the "
                f"steps' wall time outside compiles, {cost:.3f} s, all of which runs op by op; the fused "
                "alternative runs the same step as one graph (measure both with "
                "`tpuscope bench --script FILE:make_step --modes strict,fused`)."
            ),
            fix=(
                "Fuse the step: wrap the training step function with torch_xla.compile "
                "(`step = torch_xla.compile(train_step)`), which traces it into one graph even in eager mode, "
                "or turn eager mode off (torch_xla.experimental.eager_mode(False)) and end each step with "
                "torch_xla.sync()."
            ),
            location=_eager_mode_at(tables.meta),
            cost_s=cost,
            step_runs=runs,
            step_count=count,
            evidence=OpByOpEvidence(
                executions_per_step=round(per_step, 1),
                source=XLA_EAGER_METRIC,
                wall_s=round(judge.wall_s(judged), 6),
                backend="torch_xla",
            ),
        )
    ]


def _eager_mode_at(meta: dict[str, Any]) -> str | None:
    """The user's line that turned eager mode on (collect/xla_eager), when a process saw it."""
    return next(
        (p["eager_mode_at"] for p in meta.get("processes", []) if p.get("eager_mode_at")), None
    )


def _finding(
    per_step: float,
    jit_calls: float,
    cost_s: float,
    wall: float,
    share: float,
    severity: str,
    location: str | None,
    steps: pd.Series,
    lines: list[dict[str, Any]],
    primitives: list[dict[str, Any]],
) -> Finding:
    runs, count = Finding.of_steps(steps)
    ops = ", ".join(str(p["name"]) for p in primitives[:3] if p["name"]) or "various"
    calls = (
        "no jitted function was called in these steps"
        if jit_calls == 0
        else f"{jit_calls:.1f} jitted calls per step"
    )
    where = f" from {common.file_and_line(location)}" if location else ""
    return Finding(
        rule=RULE,
        severity=severity,
        title=f"{per_step:.0f} ops per step dispatched one by one outside jit{where}",
        detail=(
            f"{count} steps ran {per_step:.1f} primitives each eagerly ({ops}): each is a separate "
            f"device launch from Python, with no fusion between them; {calls}. Cost: {cost_s:.3f} s = "
            f"measured host time inside the eager dispatches ({share:.0%} of the steps' wall time), "
            "compile time excluded; a lower bound, since jit also removes the Python work between "
            "the ops and fuses them."
        ),
        fix=(
            "Put the step under jax.jit (decorate train_step with @jax.jit, with the jax.grad / "
            "value_and_grad call and the optimizer update inside it) so each step is one compiled "
            "dispatch; keep prints and Python control flow on traced values outside it."
        ),
        location=location,
        cost_s=cost_s,
        step_runs=runs,
        step_count=count,
        evidence=OpByOpEvidence(
            dispatches_per_step=round(per_step, 1),
            jit_calls_per_step=round(jit_calls, 2),
            eager_dispatch_s=round(cost_s, 6),
            wall_s=round(wall, 6),
            eager_time_share=round(share, 4),
            top_lines=lines,
            top_primitives=primitives,
        ),
    )
