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

Triggers when the judged steps dispatch at least MIN_DISPATCHES_PER_STEP primitives eagerly
on average, rare bursts left out (eager_counts.steady: text generated inside a few steps'
windows is not what the loop does; its lines, primitives and dispatch time are not the card's
either); a run with no step source (one whole-run step) is judged as a
whole. Cost, where a device trace covers judged steps (the default on a TPU): the device's
idle share of the traced steps times the median step, less tpuscope's hooks a step,
times the judged steps. The device waits while Python dispatches
op after op; on a v5e an un-jitted Adam MLP step took 39.8 ms against 1.73 ms jitted, the
device idle for 92% of it (docs/tpu.md). Without a trace: the measured host time inside the
dispatches, minus compile time in the same steps, a lower bound, since jit also removes the
Python work between the ops and fuses them; where the ops' own compiles hold half the
dispatches' time or more (a run whose steps are its first, as Keras's ViT's one-epoch run), that
difference measures nothing and the cost is the steps' time outside compiles, an upper bound.
Where the eager ops are Keras's (detect/keras_fit.py), the fix is Keras's. Severity: the
cost's share of the wall time (analyze/judge). The device-idle card of rule tensorcore_underuse
yields to this one: its cause is the dispatching named here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from tpuscope.analyze import judge
from tpuscope.analyze.contract import OpByOpEvidence
from tpuscope.analyze.step_stream import has_step_structure
from tpuscope.analyze.summary import hook_ms_per_step
from tpuscope.detect import common
from tpuscope.detect.eager_counts import (
    DISPATCH_METRIC,
    MIN_EAGER,
    beside_step,
    dispatch_measured,
    dispatch_s,
    eager_per_step,
    jit_calls_per_step,
    runs_op_by_op,
    steady,
)
from tpuscope.detect.keras_fit import keras_eager_fix, keras_eager_layers
from tpuscope.detect.step_idle import TracedIdle, traced_idle
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding

RULE = "op_by_op"
MIN_DISPATCHES_PER_STEP = MIN_EAGER
XLA_EAGER_METRIC = "EagerOpExecuteTime"
TOP = 5


def _judged(tables: RunTables) -> pd.DataFrame:
    """The judged steps (analyze/judge: a run with no step boundary is one judged step)."""
    return tables.judged


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
    if tables.metric_rows([DISPATCH_METRIC]).empty:
        return _xla_eager(tables)
    if not runs_op_by_op(tables):
        return []
    judged = _judged(tables)
    frame = steady(eager_per_step(tables))  # a burst in a few steps is not the loop's
    per_step = float(frame["count"].mean())
    host_s = dispatch_s(frame)
    wall = judge.wall_s(judged)
    idle = traced_idle(tables, {})
    waited = _waited_s(idle, judged, tables.meta) if idle is not None else None
    outside_s = float((frame["wall_ns"] - frame["compile_ns"]).clip(lower=0).sum()) / common.NS
    eager_compile_s = float(frame["eager_compile_ns"].sum()) / common.NS
    # the ops' own compiles hold most of the dispatches' time: what is left of it is no
    # measure; the steps' time outside compiles is the cost, an upper bound
    upper_bound = (
        waited is None and eager_compile_s >= 0.5 * float(frame["total"].sum()) / common.NS > 0
    )
    jit_calls = jit_calls_per_step(frame)
    layers = keras_eager_layers(tables)
    beside = None if layers is not None else beside_step(tables.meta, jit_calls)
    cost_s = waited * len(frame) if waited is not None else (outside_s if upper_bound else host_s)
    if waited is not None and beside is not None:  # the idle time holds the step's other work
        cost_s = min(host_s, cost_s)
    share = cost_s / wall if wall else 0.0
    sites = tables.extra.get("call_sites", pd.DataFrame())
    if not sites.empty:
        sites = common.judged_rows(sites[sites["kind"] == "eager_dispatch"], frame)
    lines = _top(sites, "location") if not sites.empty else []
    primitives = _top(sites, "name") if not sites.empty else []
    location = next((row["location"] for row in lines if row["location"]), None)
    severity = common.judged_severity(cost_s, tables)
    seen = Dispatched(
        per_step,
        jit_calls,
        host_s,
        idle,
        waited,
        upper_bound,
        eager_compile_s,
        steps=len(frame),
        beside=beside,
        measured=dispatch_measured(frame),
    )
    return [
        _finding(
            seen,
            keras_eager_fix(layers) if layers is not None else _jax_fix(seen.beside),
            cost_s,
            wall,
            share,
            severity,
            location,
            frame["step"],
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


@dataclass
class Dispatched:
    """What the judged steps dispatched one by one: primitives and jitted calls per step, the
    host time inside the dispatches (compiles out), and the device's idle time in the traced
    steps where the run has a device trace."""

    per_step: float
    jit_calls: float
    host_s: float
    idle: TracedIdle | None
    waited_s: float | None  # per step: the device's wait for the program's own dispatching
    upper_bound: bool = False  # no trace, and the ops' compiles hold most of the dispatches'
    # time: the cost is the steps' time outside compiles
    eager_compile_s: float = 0.0  # the judged steps' compiles of ops outside jit
    steps: int = 1  # the judged steps
    beside: str | None = None  # the compiled step function every step calls, the ops beside it
    measured: bool = True  # the dispatches' own time is known: not all of it their compiles


def _waited_s(idle: TracedIdle, judged: pd.DataFrame, meta: dict[str, Any]) -> float:
    """Per step, what the device waited for the program's dispatching: its idle share of the
    traced steps times the median judged step (the traced steps, slowed by the profiler, are
    not the median), less tpuscope's hooks on the program's thread a step, which a bare run
    does not pay; the flush thread runs beside the dispatching. On the v5e, three pairs of the
    un-jitted Adam MLP bare and under tpuscope differed by 2.1 ms a step, its hooks' 2.07 ms
    (the flush thread's 2.75 ms overlapped): docs/tpu.md."""
    median_s = float(judged["wall_ns"].median()) / common.NS
    own_s = (hook_ms_per_step(meta) or 0.0) / 1e3
    return max(idle.share * median_s - own_s, 0.0)


def _cost_words(seen: Dispatched, cost_s: float, share: float) -> str:
    """How the cost was measured: the device's idle time while the host dispatched (a trace),
    else the host's time inside the dispatches (a lower bound)."""
    if seen.idle is not None and seen.waited_s is not None and seen.beside:
        return _beside_words(seen, cost_s)
    if seen.idle is not None and seen.waited_s is not None:
        return (
            f"Cost: {cost_s:.3f} s = {seen.waited_s * 1e3:.2f} ms a step: the device's idle "
            f"share of the traced steps, {seen.idle.share:.0%} ({seen.idle.basis}), of the "
            "median step, less tpuscope's hooks on the program's thread a step (the device "
            "waited for those too), "
            f"times the judged steps: the device waits while Python dispatches the ops one at "
            f"a time" + _fused_words(seen)
        )
    if seen.upper_bound:
        return (
            f"Cost: {cost_s:.3f} s = the steps' time outside compiles ({share:.0%} of their wall "
            f"time), an upper bound: the ops' own compiles ({seen.eager_compile_s:.1f} s) hold "
            "most of the time inside their dispatches, so what the dispatching itself took "
            "cannot be told apart (no device trace)."
        )
    return (
        f"Cost: {cost_s:.3f} s = measured host time inside the eager dispatches ({share:.0%} of "
        "the steps' wall time), compile time excluded; a lower bound, since jit also removes the "
        "Python work between the ops and fuses them."
    )


def _fused_words(seen: Dispatched) -> str:
    return (
        f" ({seen.host_s:.3f} s inside the dispatches). Under jit the step is one dispatch and "
        "its ops fuse, so the device also runs them faster."
    )


def _beside_words(seen: Dispatched, cost_s: float) -> str:
    """Ops beside a compiled step: what the dispatching itself took is the evidence, and the
    device's idle time bounds what moving them into the step could save (the step's other host
    work stays). Equinox's ViT example on a v5e: 73 ops a step, 10.75 ms inside their
    dispatches, 24.32 ms of idle device; split in one call they saved 14.82 ms. Flax's Gemma
    sampler: 137 ops a request, 17 ms inside them, 423 ms of idle device, most of it its logits
    copied into Python lists (docs/tpu.md)."""
    assert seen.idle is not None and seen.waited_s is not None
    inside = seen.host_s / seen.steps * 1e3
    idle = (
        f"The device idled {seen.waited_s * 1e3:.2f} ms a step ({seen.idle.share:.0%} of the "
        f"traced steps, {seen.idle.basis}; tpuscope's hooks out)"
    )
    rest = ": the rest of that idle time is the step's other host work, charged by no card here. "
    if not seen.measured:
        head = (
            f"Cost: not measured: the ops' own compiles ({seen.eager_compile_s:.2f} s in these "
            "steps, each new shape outside jit compiled on its own) hold all the time inside "
            f"their dispatches. {idle}, the most moving them into {seen.beside} could save"
        )
    elif inside <= seen.waited_s * 1e3:
        head = (
            f"Cost: {cost_s:.3f} s = the host's time inside the dispatches, {inside:.2f} ms a "
            f"step, their compiles out: a lower bound (moving them into {seen.beside} also "
            f"removes the Python between them). {idle}, the most it could save"
        )
    else:
        head = (
            f"Cost: {cost_s:.3f} s = the device's idle time, {seen.waited_s * 1e3:.2f} ms a step "
            f"({seen.idle.share:.0%} of the traced steps, {seen.idle.basis}), less than the "
            f"host's {inside:.2f} ms a step inside the dispatches: the host ran ahead of the "
            "device for the rest"
        )
        rest = ". "
    compiled = (
        f" They also compiled for {seen.eager_compile_s:.2f} s in these steps: outside jit each "
        "new shape of an op compiles on its own (inside the step they compile with it)."
        if seen.measured and seen.eager_compile_s >= 0.01
        else ""
    )
    return (
        f"{head}{rest}On a v5e, Equinox's ViT example's 73 ops a step beside its jitted step took "
        "10.75 ms inside their dispatches and 24.32 ms of idle device; split in one call they "
        f"saved 14.82 ms (docs/tpu.md).{compiled}"
    )


JAX_FIX = (
    "Put the step under jax.jit (decorate train_step with @jax.jit, with the jax.grad / "
    "value_and_grad call and the optimizer update inside it) so each step is one compiled "
    "dispatch; keep prints and Python control flow on traced values outside it."
)

BESIDE_STEP_FIX = (
    "Each step already calls the compiled {name}: these ops run beside it, each launched on its "
    "own. Move them into {name} (pass in what they are computed from and compute them inside, "
    "as one compiled program), or make them fewer, larger ops (one `jax.random.split(key, n)` "
    "rather than a list of keys stacked with `jnp.array`; a loader that indexes numpy arrays "
    "rather than device arrays); code of the program's that runs them every step can be put "
    "under jax.jit itself."
)


def _jax_fix(beside: str | None) -> str:
    return BESIDE_STEP_FIX.format(name=beside) if beside else JAX_FIX


def _finding(
    seen: Dispatched,
    fix: str,
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
        if seen.jit_calls == 0
        else f"{seen.jit_calls:.1f} jitted calls per step"
    )
    where = f" from {common.file_and_line(location)}" if location else ""
    return Finding(
        rule=RULE,
        severity=severity,
        title=f"{seen.per_step:.0f} ops per step dispatched one by one outside jit{where}",
        detail=(
            f"{count} steps ran {seen.per_step:.1f} primitives each eagerly ({ops}): each is a "
            f"separate device launch from Python, with no fusion between them; {calls}. "
            + _cost_words(seen, cost_s, share)
        ),
        fix=fix,
        location=location,
        cost_s=cost_s,
        step_runs=runs,
        step_count=count,
        evidence=OpByOpEvidence(
            dispatches_per_step=round(seen.per_step, 1),
            jit_calls_per_step=round(seen.jit_calls, 2),
            eager_dispatch_s=round(seen.host_s, 6),
            device_idle_s_per_step=round(seen.waited_s, 6) if seen.waited_s is not None else None,
            cost_basis=(
                "host dispatch time (beside a compiled step; trace)"
                if seen.idle is not None and seen.beside
                else "device idle (trace)"
            )
            if seen.idle is not None
            else ("time outside compiles" if seen.upper_bound else "host dispatch time"),
            wall_s=round(wall, 6),
            eager_time_share=round(share, 4),
            top_lines=lines,
            top_primitives=primitives,
        ),
    )
