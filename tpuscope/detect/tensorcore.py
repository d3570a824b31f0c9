"""Rule `tensorcore_underuse`: matmuls that waste the TPU's matrix units, and idle device time.

Two kinds of evidence, and every finding says which it used:
- estimated: from the run's HLO (`--deep` dumps or an imported dump folder), each
  matmul's padding, precision and size on the `--target` chip (meta 'target',
  default v5e) with the roofline of analyze.mxu: head_dim below the MXU width,
  dims not multiples of it, f32 matmuls, matmuls with too few rows;
- measured (tensorcore_measured.py): xprof's overview of a TPU trace (MXU utilization,
  device duty cycle) and per-op roofline efficiency, and device busy/idle per step from any trace.
Costs are seconds: estimated ones are per graph execution on the target times the
judged steps; measured ones are time in the trace. Thresholds: docs/detectors.md.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpuscope.analyze import judge
from tpuscope.analyze.contract import TensorCoreEvidence
from tpuscope.analyze.cost_compare import target_of
from tpuscope.analyze.mxu import DEFAULT_TARGET, GENERATIONS, chip, fmt_time
from tpuscope.analyze.tensorcore import (
    MatmulProblem,
    is_library_path,
    tensorcore_problems,
    waste_by_generation,
)
from tpuscope.detect.advice import for_backend
from tpuscope.detect.common import file_and_line, judged_severity, judged_wall_s
from tpuscope.detect.read_idle import read_idle
from tpuscope.detect.tables import RunTables
from tpuscope.detect.tensorcore_measured import (
    RULE,
    evidence_keys,
    graph_site,
    idle_finding,
    xprof_figures,
    xprof_mxu_finding,
)
from tpuscope.detect.tensorcore_ops import op_time_findings, while_host_bound
from tpuscope.schema import Finding

MIN_SHARE = (
    0.01  # of the estimated step time on the target: below this, no finding (head_dim always)
)


def _severity(cost_s: float, tables: RunTables) -> str:
    """As for every rule (analyze/judge.severity): the cost's share of the judged steps' wall time,
    here the estimated device time lost over the judged steps. The share of one graph's estimated
    time decides only whether a problem is reported (MIN_SHARE), never how severe it is: 17% of a
    0.2 us step graph is 1 us over a 2 s run, a low card."""
    return judged_severity(cost_s, tables)


def _target(tables: RunTables) -> str:
    return chip_target(tables.meta, tables.extra.get("xprof_overview", pd.DataFrame()))


def chip_target(meta: dict[str, Any], xprof_overview: pd.DataFrame) -> str:
    """The chip estimates are made for: --target, else the chip an imported TPU trace ran on,
    else the default. The summary records it (`target`), so every surface names the same chip."""
    ran_on = target_of(meta, xprof_overview)
    target = str(meta.get("target") or ran_on or DEFAULT_TARGET).lower()
    return target if target in GENERATIONS else DEFAULT_TARGET


def _executions(tables: RunTables) -> int:
    judged = tables.judged
    return max(len(judged), 1)


def _text_ops(info: dict[str, Any]) -> str:
    lines = [file_and_line(x) for x in info.get("lines") or []][:4]
    where = (
        ", ".join(lines) or ", ".join(info.get("module_paths") or []) or "an unknown source line"
    )
    return f"{info['count']} matmul(s), e.g. {', '.join(info['shapes'][:3])}, at {where}"


def _estimated(
    problem: MatmulProblem,
    step_s: float,
    runs: int,
    target: str,
    summary: dict[str, Any],
    measured: dict[str, Any],
    backend: str = "torch_xla",
    wall: float = 0.0,
) -> Finding | None:
    spec, info = chip(target), problem.info
    share = problem.cost_s / step_s if step_s > 0 else 0.0
    if share < MIN_SHARE and problem.kind != "head_dim":
        return None
    edge = spec.mxu
    waste = waste_by_generation(problem.ops)
    roof = (
        f"On {target} the step graph {summary.get('module')} is {summary.get('bound', '?')}-bound "
        f"(est. {fmt_time(summary.get('time_s', 0.0))}: {fmt_time(summary.get('mxu_s', 0.0))} of MXU work, "
        f"{fmt_time(summary.get('hbm_s', 0.0))} of HBM traffic, bytes from {summary.get('bytes_basis')}); "
        f"{100 * summary.get('padding_share', 0.0):.0f}% of its MXU work is padding."
    )
    basis = (
        "Cost figure: estimated from the HLO with the cost model, per-TensorCore peaks (docs/cost_model.md)"
        + (
            f"; measured MXU utilization {measured['mxu_utilization_percent']:.1f}% (xprof)."
            if "mxu_utilization_percent" in measured
            else "."
        )
    )
    title, fix = _wording(problem.kind, info, edge, target, waste, backend)
    hidden = float((problem.ops["mxu_s"] * problem.ops["waste"]).sum())
    of_step = (
        f"{100 * share:.1f}% of the step graph's estimated time"
        if share <= 1
        # no share above 100%
        else "more than the step graph's estimated time: these matmuls run in other graphs too"
    )
    cost = (
        f"Costs {fmt_time(problem.cost_s)} per step on {target} ({of_step}), "
        f"{fmt_time(problem.cost_s * runs)} over {runs} step(s)."
        if problem.cost_s > 0
        else f"Its padding adds {fmt_time(hidden)} of MXU work per step, hidden behind HBM time on {target} at "
        f"this size: no step time lost yet, but it grows with the model (the cost of larger shapes)."
    )
    detail = f"{_text_ops(info)}. {cost} {roof} {basis}"
    evidence = TensorCoreEvidence(
        basis="estimated",
        cost_figure="estimated (cost model)",
        target=target,
        kind=problem.kind,
        share_of_step=round(share, 4),
        padding_share_by_generation=waste,
        **info,
        roofline=_clean(summary),
        **measured,
        key_order=evidence_keys(ESTIMATED_KEYS, info, ["roofline"], measured),
    )
    return Finding(
        RULE,
        judge.severity(problem.cost_s * runs, wall),
        title,
        detail,
        fix,
        info.get("location"),
        problem.cost_s * runs,
        [],
        evidence,
    )


def _wording(
    kind: str, info: dict[str, Any], edge: int, target: str, waste: dict[str, float], backend: str
) -> tuple[str, str]:
    if kind == "head_dim":
        d = info["head_dim"]
        here = waste.get(target, waste["v5e"])
        return (
            f"attention head_dim {d}: {100 * here:.0f}% of its MXU work is padding on {target} "
            f"({100 * waste['v5e']:.0f}% on v5e/v5p, {100 * waste['v6e']:.0f}% on v6e/v7)",
            f"Use head_dim {edge} or a multiple of it (keep d_model, use d_model/{edge} heads), or a fused "
            f"attention kernel that packs heads ({for_backend(backend, 'attention_kernel')}).",
        )
    if kind == "unaligned":
        pairs = ", ".join(f"{a}->{b}" for a, b in zip(info["dims"], info["padded"], strict=True))
        return (
            f"{info['count']} matmul(s) with dims not multiples of {edge} waste the MXU on {target}",
            f"Pad these feature sizes to multiples of {edge} (128 on v5e/v5p, 256 on v6e/v7): {pairs}.",
        )
    if kind == "f32":
        prec = "/".join(info.get("precision") or ["default"])
        return (
            f"{info['count']} matmul(s) run in f32 (precision {prec}) where bf16 would do",
            for_backend(backend, "bf16"),
        )
    return (
        f"{info['count']} matmul(s) stream only {', '.join(map(str, info['rows'][:4]))} rows through "
        f"the {edge}-row MXU on {target}",
        f"Give each matmul at least {edge} rows: a larger batch or sequence per step, or merge small "
        f"matmuls (one fused QKV projection instead of three).",
    )


ESTIMATED_KEYS = (
    "basis",
    "cost_figure",
    "target",
    "kind",
    "share_of_step",
    "padding_share_by_generation",
)


def _clean(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 9) if isinstance(v, float) else v) for k, v in summary.items()}


def _trace_modules(meta: dict[str, Any]) -> dict[str, int]:
    """Events per HLO module in the run's traces (launcher meta, or each imported file's meta)."""
    counts: dict[str, int] = {}
    for source in [meta.get("device_view") or {}, *(meta.get("processes") or [])]:
        for name, count in (source.get("trace_modules") or {}).items():
            counts[name] = counts.get(name, 0) + int(count)
    return counts


def _one_card(findings: list[Finding], site: str | None, tables: RunTables) -> Finding:
    """The estimated problems of one step graph as one card: one root cause, its facets.
    Its line is the first user line a facet's matmuls carry (HLO source metadata), else the
    line where the step graph is cut (graph_site)."""
    ordered = sorted(findings, key=lambda f: -f.cost_s)
    lead = ordered[0]
    user = [f.location for f in ordered if f.location and not is_library_path(f.location)]
    location = user[0] if user else site
    library = sorted({f.location for f in findings if f.location and is_library_path(f.location)})
    evidence = [TensorCoreEvidence.of(f) for f in ordered]
    facets = [
        {
            "title": f.title,
            "cost_s": f.cost_s,
            "fix": f.fix,
            "location": f.location,
            **{k: v for k, v in ev.to_dict().items() if k != "roofline"},
        }
        for f, ev in zip(ordered, evidence, strict=True)
    ]
    share = min(sum(ev.share_of_step or 0.0 for ev in evidence), 1.0)
    others = "; ".join(f.title for f in ordered[1:])
    detail = (
        lead.detail
        + (f" Also in this graph: {others}." if others else "")
        + (
            f" The graph is cut at {file_and_line(site)}; the library's own lines: "
            f"{', '.join(file_and_line(x) for x in library[:3])}."
            if library and site
            else ""
        )
    )
    fix = " ".join(dict.fromkeys(f.fix for f in ordered))
    card = evidence[0].with_values(
        facets=facets,
        kinds=[ev.kind for ev in evidence],
        library_lines=library,
        graph_site=site,
        share_of_step=round(share, 4),
    )
    return Finding(
        RULE,
        _severity(sum(f.cost_s for f in ordered), tables),
        lead.title + (f" (+{len(ordered) - 1} more)" if others else ""),
        detail,
        fix,
        location,
        sum(f.cost_s for f in ordered),
        [],
        card,
    )


def _takes_turns(tables: RunTables, idle: Finding) -> bool:
    """Whether host and device take turns in the idle steps, so a shorter device step shortens
    them: the host waits in a read every traced step, or inside the calls of a step a host
    callback holds (the idle card's measure of it)."""
    reads = read_idle(tables)
    held = getattr(idle.evidence, "idle_in_calls_s_per_step", None)
    return bool(held) or (reads is not None and reads.every_traced_step)


def detect_tensorcore_underuse(tables: RunTables) -> list[Finding]:
    measured = xprof_figures(tables)
    on_chip = op_time_findings(tables, tables.backend)
    if on_chip is not None:  # a TPU trace with its HLO: each op's time was measured, and wins
        idle = idle_finding(tables, {})
        if idle is None:
            return on_chip
        if _takes_turns(tables, idle):  # the device's time is on the step's path
            return [idle, *on_chip]
        return [idle] + [while_host_bound(card) for card in on_chip]
    findings = [
        f
        for f in (xprof_mxu_finding(tables, measured), idle_finding(tables, measured))
        if f is not None
    ]
    for finding in findings:  # measured cards without an op line: the line that cuts the step graph
        finding.location = finding.location or graph_site(tables)
    hlo_ops = tables.extra.get("hlo_ops", pd.DataFrame())
    if hlo_ops.empty:
        return findings
    target = _target(tables)
    trace_modules = _trace_modules(tables.meta)
    problems, summary = tensorcore_problems(
        hlo_ops, tables.extra.get("hlo_modules", pd.DataFrame()), target, trace_modules
    )
    step_s = float(summary.get("time_s") or 0.0)
    runs = _executions(tables)
    estimated = [
        f
        for p in problems
        if (
            f := _estimated(
                p, step_s, runs, target, summary, measured, tables.backend, judged_wall_s(tables)
            )
        )
    ]
    return findings + ([_one_card(estimated, graph_site(tables), tables)] if estimated else [])
