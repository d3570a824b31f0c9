"""Rule `tensorcore_underuse`'s measured evidence: what the device's own profile says.

- device idle time: xprof's duty cycle of a TPU trace, else busy/idle per step from any trace's
  XLA ops (device_steps), over the judged steps;
- MXU utilization: xprof's overview and per-op statistics (hlo_stats, op_profile) of a TPU
  trace; low utilization is a problem where matmuls take the device time, else a note of
  where the time goes.
The estimated evidence (from the HLO, on the --target chip) is tensorcore.py's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from tpuscope.analyze.compiling import compile_spans
from tpuscope.analyze.contract import TensorCoreEvidence
from tpuscope.analyze.host_time import NNX_GRAPH, HostPart, host_parts
from tpuscope.analyze.mxu import fmt_time
from tpuscope.detect.advice import for_backend
from tpuscope.detect.compile_kinds import keras_step
from tpuscope.detect.eager_counts import dispatching_holds_idle
from tpuscope.detect.held_idle import callback_hold, hold_text
from tpuscope.detect.host_sync import detect_host_sync
from tpuscope.detect.jax_advice import NNX_GRAPH_FIX, keras_host_fix, own_function_fix
from tpuscope.detect.program_code import jitted_functions, program_files
from tpuscope.detect.read_idle import read_idle
from tpuscope.detect.step_idle import (
    median_step_s,
    step_idle,
    traced_idle,
)
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding

RULE = "tensorcore_underuse"
IDLE_SHARE = 0.20  # device idle share of traced steps that is a finding
LOW_MXU = 50.0  # measured MXU utilization (%) below which xprof's figures are a finding


def xprof_figures(tables: RunTables) -> dict[str, Any]:
    """xprof's overview figures of the run's TPU trace (MXU utilization, duty cycle, idle %):
    the measured facts every finding of this rule carries beside its own evidence."""
    overview = tables.extra.get("xprof_overview", pd.DataFrame())
    if overview.empty:
        return {}
    values = overview.dropna(subset=["value"]).groupby("name")["value"].mean()
    return {
        k: float(values[k])
        for k in (
            "mxu_utilization_percent",
            "device_duty_cycle_percent",
            "device_idle_time_percent",
        )
        if k in values
    }


def evidence_keys(*parts: Iterable[str]) -> tuple[str, ...]:
    """The keys a shape of this rule's evidence writes, in order: its own, then the problem's
    figures or xprof's measurements it carries (TensorCoreEvidence declares them all)."""
    return tuple(dict.fromkeys(key for part in parts for key in part))


def idle_finding(tables: RunTables, measured: dict[str, Any]) -> Finding | None:
    """The device idle for IDLE_SHARE or more of the step: the step is host-bound. Not a card
    where the steps' dispatching one op at a time is what the device waited for
    (eager_counts.dispatching_holds_idle): rule op_by_op's card names that cause (a step run op
    by op: this idle time is its cost; ops beside a compiled step: their dispatches' time, the
    idle time the bound it states, the rest charged by no card), nor where a value read in every traced step is the whole
    idle time: rule host_sync's card measures it (detect/read_idle)."""
    idle = traced_idle(tables, measured)
    if idle is None or dispatching_holds_idle(tables, idle.share * median_step_s(tables)):
        return None
    reads = read_idle(tables)
    if reads is not None and reads.explains_idle and detect_host_sync(tables):
        return None  # rule host_sync's card stands, its cost this idle time
    rows, basis = idle.rows, idle.basis
    runs, count, segment, untraced = step_idle(tables, idle)
    share = untraced[0] if untraced else idle.share
    if share < IDLE_SHARE:
        return None
    devices = sorted({str(d) for d in rows["device"]}) if not rows.empty else []
    traced = (
        f"{count} traced step(s)" if count else "the traced time (no step markers in the trace)"
    )
    if untraced:
        _, per_step, step_s, busy_s = untraced
        judged = len(segment.judged)
        cost, runs = per_step * judged, []
        busy = (
            f"XLA ops kept {', '.join(devices[:4]) or 'the device'} busy {fmt_time(busy_s)} a "
            f"step ({traced}, from the trace's XLA ops) of the {fmt_time(step_s)} median step of "
            f"{segment.text(len(tables.judged))}, timed outside the trace (a trace slows the "
            "host: in the traced steps themselves the device idled "
            f"{100 * idle.share:.0f}%)"
        )
        cost_text = f"Cost = {fmt_time(per_step)} a step x {judged} judged step(s)."
    else:
        cost = idle.share * idle.total_ns / 1e9
        busy = (
            f"XLA ops kept {', '.join(devices[:4]) or 'the device'} busy "
            f"{100 * (1 - share):.0f}% of {traced} ({basis})"
        )
        cost_text = "Cost = idle time in those steps."
    events = tables.extra.get("trace_events", pd.DataFrame())
    parts = host_parts(
        events,
        program_files(tables),
        count,
        jitted_functions(tables),
        compile_spans(tables.compiles),
    )
    hold = callback_hold(tables, count) if count else None
    fix = _host_bound_fix(tables.backend, parts, keras_step(tables.meta))
    # the line of the part that held the most host time; the dispatch and NNX's traversal
    # have none of their own: they are the step's call (Flax's toy examples spent 47 of 1,660
    # us a step in their `dataset` generator, the rest in those two)
    named = [p for p in parts if not p.label.startswith(MODULE_CODE)]  # a module's is all
    where = (
        (named[0].location if named else None)
        or graph_site(tables)
        or next((p.location for p in named if p.location), None)
    )
    held: dict[str, Any] = {}
    if hold is not None:  # the host waited inside the calls of a step with a host callback
        fix = f"Take the host callback out of the step (rule host_callback's card). {fix}"
        where = hold.callback.location or where
        held = {"idle_in_calls_s_per_step": round(float(hold.held.inside_s), 9)}
    return Finding(
        RULE,
        "high" if share >= 0.5 else "medium",
        f"device idle {100 * share:.0f}% of the "
        + (
            "step: the step is host-bound"
            if count
            else "traced time: the device waits for the host"
        ),
        f"{busy}; the rest the device waited for the host (Python, graph tracing, input, host "
        f"syncs). {hold_text(hold) if hold else ''}{_where_host(parts)}{cost_text}",
        fix,
        where,
        cost,
        runs,
        TensorCoreEvidence(
            basis=basis,
            cost_figure="measured",
            idle_share=round(share, 4),
            devices=devices,
            **held,
            **measured,
            key_order=evidence_keys(
                ["basis", "cost_figure", "idle_share", "devices"], held, measured
            ),
        ),
        count,
    )


NNX_LEADS = 0.25  # a part's share of the parts shown that puts its own fix first


MODULE_CODE = "<module>"  # a script's top-level code: the whole program, no part of it to name


def _host_bound_fix(backend: str, parts: list[HostPart], keras: str | None = None) -> str:
    """The host-bound advice, led by what held a quarter or more of the traced host time
    shown, the larger first: nnx.jit's graph traversal, Flax NNX's own fix (on the NNX
    tutorial's CNN: 5.65 of 6.80 ms a traced step); a function of the program's own, named
    (jax_advice.own_function_fix). Keras's own where its `fit` runs the loop (`keras`: its step function's
    line)."""
    if backend == "jax" and keras:
        return keras_host_fix(keras)
    fix = for_backend(backend, "host_bound")
    if backend != "jax":
        return fix
    shown = parts[:4]
    total = sum(p.s_per_step for p in shown)
    nnx = sum(p.s_per_step for p in shown if p.label == NNX_GRAPH)
    own = max(
        (p for p in shown if p.location and not p.label.startswith(MODULE_CODE)),
        key=lambda p: p.s_per_step,
        default=None,
    )
    leads = [(nnx, NNX_GRAPH_FIX)] if nnx >= NNX_LEADS * total > 0 else []
    if own is not None and own.s_per_step >= NNX_LEADS * total:
        leads.append((own.s_per_step, own_function_fix(own, own.s_per_step / total)))
    return " ".join([text for _, text in sorted(leads, key=lambda lead: -lead[0])] + [fix])


def _where_host(parts: list[HostPart]) -> str:
    if not parts:
        return (
            "Where the host's time went is not known: the trace's traced steps hold no Python "
            "call in the program's files tpuscope saw. "
        )
    return (
        "Where the host's time went in the traced steps, as JAX's Python tracer recorded it (it "
        "slows what it traces: shares, not the untraced step's times; a function's time holds "
        "the dispatches it makes): "
        + "; ".join(f"{p.label} {fmt_time(p.s_per_step)} a step" for p in parts[:4])
        + ". "
    )


_MATMUL_CATEGORY = r"convolution|dot|matmul|einsum|gemm"


def _known(bound: Any) -> bool:
    """An op's bound as xprof measured it (not null, "?" or "Unknown": issue 29)."""
    return isinstance(bound, str) and bound.strip().lower() not in (
        "",
        "?",
        "unknown",
        "nan",
        "none",
    )


def xprof_mxu_finding(tables: RunTables, measured: dict[str, Any]) -> Finding | None:
    """Measured MXU utilization from xprof: a problem when matmuls take device time at low
    utilization; when the device time goes to other ops, a low-severity note of where."""
    mxu = measured.get("mxu_utilization_percent")
    kind = str(tables.meta.get("device_kind") or "TPU")
    if (
        mxu is None or mxu >= LOW_MXU or "TPU" not in kind.upper()
    ):  # the MXU is a TPU's: a GPU has none
        return None
    ops = tables.extra.get("xprof_ops", pd.DataFrame())
    if not ops.empty:
        ops = ops.sort_values("self_time_us", ascending=False)
    is_mm = (
        ops["category"].astype(str).str.contains(_MATMUL_CATEGORY)
        if not ops.empty
        else pd.Series(dtype=bool)
    )
    matmul = ops[is_mm] if not ops.empty else ops
    share = float(matmul["self_time_percent"].sum()) if not matmul.empty else 0.0
    top = (matmul if share >= 10 else ops).head(5)
    names = (
        ", ".join(
            f"{r.hlo_op} ({r.category}, "
            + (f"{r.bound_by}-bound, " if _known(r.bound_by) else "")
            + f"{r.self_time_percent:.0f}% of op time)"
            for r in top.itertuples()
        )
        or "no per-op statistics"
    )
    location = next(
        (str(s) for s in top.get("source_info", pd.Series(dtype=object)).dropna()), None
    )
    duty = measured.get("device_duty_cycle_percent")
    evidence = TensorCoreEvidence(
        basis="measured (xprof overview_page, hlo_stats, op_profile)",
        cost_figure="measured",
        matmul_time_percent=share,
        top_ops=top[["hlo_op", "category", "bound_by"]].to_dict("records") if not top.empty else [],
        **measured,
        key_order=evidence_keys(
            ["basis", "cost_figure", "matmul_time_percent", "top_ops"], measured
        ),
    )
    head = f"xprof's overview_page: MXU utilization {mxu:.1f}%" + (
        f", device duty cycle {duty:.1f}%. "
        if duty is not None
        else " (no device duty cycle measured). "
    )
    if share >= 10:
        used = matmul["flops_utilization"].fillna(mxu / 100).clip(0, 1)
        cost = float((matmul["self_time_us"] * (1 - used)).sum()) / 1e6
        return Finding(
            RULE,
            "high" if mxu < 20 else "medium",
            f"MXU utilization {mxu:.1f}% while matmuls take {share:.0f}% of device time (measured by xprof)",
            head
            + f"Matmul ops: {names}. Cost = their self time times (1 - their FLOP utilization), "
            "summed over cores.",
            "Feed the MXU bigger, aligned matmuls: bf16 operands, dims in multiples of 128 (256 on "
            "v6e/v7), larger batch per step; see the estimated findings for the shapes.",
            location,
            cost,
            [],
            evidence,
        )
    bounds = (
        top["bound_by"][top["bound_by"].map(_known)] if not top.empty else pd.Series(dtype=object)
    )
    bound = str(bounds.mode().iloc[0]) if not bounds.empty else ""
    return Finding(
        RULE,
        "low",
        f"MXU idle ({mxu:.1f}% utilization, measured by xprof): device time goes to "
        + (
            f"{bound}-bound non-matmul ops"
            if bound
            else "non-matmul ops (their bound not measured)"
        ),
        head
        + f"Matmuls take {share:.0f}% of op time; the time goes to: {names}. No cost estimated: "
        "a program without matmuls has nothing for the MXU to do.",
        "If this step should be matmul-heavy, look at these ops first: "
        + (
            "cut HBM traffic (fewer copies and host offloads, bf16 activations, fusable ops)."
            if bound.upper() == "HBM"
            else "they bound the step, not the MXU."
        ),
        location,
        0.0,
        [],
        evidence,
    )


def graph_site(tables: RunTables) -> str | None:
    """The user's line of the step graph: where the longest compile (the training step's
    graph, not a setup graph or an eager op) was cut. HLO metadata names only the innermost
    Python frame, which for torch.nn layers is torch's own code."""
    families = tables.families
    if families.empty:
        return None
    graphs = families[~families["eager"].astype(bool) & families["location"].notna()]
    if graphs.empty:
        return None
    return str(graphs.sort_values("duration_ns", na_position="first")["location"].iloc[-1])
