"""Estimate next to measurement for the terminal and JSON: `tpuscope trace RUN` (docs/cost_model.md)."""

from __future__ import annotations

from typing import Any

from tpuscope.analyze.cost_compare import compare, top
from tpuscope.analyze.mxu import fmt_time
from tpuscope.report.fit import Col, grid, print_plain
from tpuscope.store import Run


def cost_view(run: Run, ops: int | None = None) -> dict[str, Any]:
    """The cost model's comparison of a run with device ops ({} without): summary, modules,
    and the ops (all of them, or the `ops` costliest by measured time)."""
    priced, view = compare(
        run.meta, run.trace_events, run.xprof_ops, run.xprof_overview, run.hlo_ops
    )
    if not view:
        return {}
    view["ops"] = top(priced, ops or len(priced))
    return view


COST_COLS = (
    Col("module", whole=True),
    Col("op", whole=True),
    Col("category"),
    Col("measured", justify="right"),
    Col("estimated", justify="right"),
    Col("est/meas", justify="right"),
    Col("bound"),
)


def render(view: dict[str, Any], console: Any, n: int = 8) -> None:
    if not view:
        return
    console.print(
        f"cost model on {view['target']} (estimated from XLA's counts and the op's HLO, peaks: "
        f"{view['peaks']['from']}): estimate within 2x of the measurement for "
        f"{100 * view['share_within_2x']:.1f}% of the measured op time "
        f"(roofline at per-chip peaks alone: {100 * view['roofline_share_within_2x']:.1f}%); "
        f"median estimate/measured {view['median_ratio']:.3f}, time-weighted {view['time_weighted_median_ratio']:.3f}",
        soft_wrap=True,
    )
    rows = []
    for op in view["ops"][:n]:
        ratio = (
            "-" if op["ratio"] is None else f"{op['ratio']:.2f}" + ("" if op["within_2x"] else " !")
        )
        rows.append(
            (
                str(op["module"]),
                str(op["op"]),
                str(op["category"]),
                fmt_time(op["measured_us"] / 1e6),
                fmt_time(op["estimated_us"] / 1e6),
                ratio,
                str(op["bound"]),
            )
        )
    print_plain(
        console,
        grid(
            "ops by measured time: estimated vs measured (all occurrences)",
            COST_COLS,
            rows,
            console.width,
        ),
    )
    console.print("  (! = outside 2x; `--json` gives every op with the rule that priced it)")
    for module in view["modules"][:4]:
        ratio = "-" if module["ratio"] is None else f"{module['ratio']:.2f}"
        console.print(
            f"  module {module['module']}: {module['executions']} run(s), per run estimated "
            f"{fmt_time(module['estimated_us'] / 1e6)}, measured {fmt_time(module['measured_us'] / 1e6)} "
            f"(est/meas {ratio}), mostly {module['bound']}-bound; {100 * module['share_within_2x']:.1f}% of its op "
            "time within 2x",
            soft_wrap=True,
        )
