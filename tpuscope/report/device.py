"""The device view of a run for the terminal: where the traces are, busy/idle per device, xprof's figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from tpuscope.analyze.frames import json_records
from tpuscope.report.cost import cost_view
from tpuscope.report.cost import render as render_cost
from tpuscope.report.fit import Col, grid, print_plain
from tpuscope.store import Run, layout

XPROF_FIGURES = (
    "device_type",
    "device_core_count",
    "mxu_utilization_percent",
    "device_duty_cycle_percent",
    "device_idle_time_percent",
    "hbm_utilization_percent",
    "flop_rate_utilization_relative_to_roofline",
    "peak_flop_rate_gflops",
    "peak_hbm_bw_gibps",
)


def log_dirs(run_dir: Path | Any) -> list[Path]:
    """Folders xprof/TensorBoard take as --logdir: each holds plugins/profile/<session>/*.xplane.pb
    (local runs: xprof opens folders; a run in an object store has none to name)."""
    if not isinstance(run_dir, Path):
        return []
    found = {
        p.parent.parent.parent.parent
        for p in (run_dir / layout.TRACE).rglob("*.xplane.pb")
        if p.parent.parent.name == "profile" and p.parent.parent.parent.name == "plugins"
    }
    return sorted(found)


def busy_idle(device_steps: pd.DataFrame) -> list[dict[str, Any]]:
    """Per host and device: windows, busy and idle ms, duty cycle %."""
    if device_steps.empty:
        return []
    out = []
    for (host, device), group in device_steps.groupby(["host", "device"], sort=True):
        busy, idle = float(group["busy_ns"].sum()), float(group["idle_ns"].sum())
        out.append(
            {
                "host": host,
                "device": device,
                "windows": len(group),
                "window": str(group["window"].iloc[0]),
                "busy_ms": busy / 1e6,
                "idle_ms": idle / 1e6,
                "duty_cycle_percent": 100 * busy / (busy + idle) if busy + idle else 0.0,
            }
        )
    return out


def xprof_figures(overview: pd.DataFrame) -> list[dict[str, Any]]:
    """xprof's headline figures per analysed profile (one per host or session)."""
    out = []
    for host, rows in overview.groupby("host", sort=True) if not overview.empty else []:
        figures: dict[str, Any] = {"host": host}
        for name in XPROF_FIGURES:
            found = rows[rows["name"] == name]
            if not found.empty:
                value = found["value"].dropna()
                figures[name] = (
                    float(value.iloc[0]) if not value.empty else str(found["text"].iloc[0])
                )
        out.append(figures)
    return out


def top_ops(xprof_ops: pd.DataFrame, n: int = 5) -> list[dict[str, Any]]:
    if xprof_ops.empty:
        return []
    top = xprof_ops.sort_values("self_time_us", ascending=False).head(n)
    cols = [
        "hlo_op",
        "category",
        "self_time_percent",
        "bound_by",
        "flops_utilization",
        "source_info",
    ]
    return json_records(top[cols])


def device_view(run: Run) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "trace_events": len(run.trace_events),
        "log_dirs": [str(p) for p in log_dirs(run.path)],
        "devices": busy_idle(run.device_steps),
        "xprof": xprof_figures(run.xprof_overview),
        "top_ops": top_ops(run.xprof_ops),
        "cost_model": cost_view(run),
    }


DEVICE_COLS = (
    Col("host", whole=True),
    Col("device", whole=True),
    Col("windows", justify="right"),
    Col("busy ms", justify="right"),
    Col("idle ms", justify="right"),
    Col("duty cycle", justify="right"),
)


def render(view: dict[str, Any], console: Any) -> None:
    if view["devices"]:
        rows = [
            (
                str(d["host"]),
                str(d["device"]),
                f"{d['windows']} ({d['window']})",
                f"{d['busy_ms']:.2f}",
                f"{d['idle_ms']:.2f}",
                f"{d['duty_cycle_percent']:.1f}%",
            )
            for d in view["devices"]
        ]
        print_plain(
            console,
            grid("device busy / idle (from the trace's XLA ops)", DEVICE_COLS, rows, console.width),
        )
    for figures in view["xprof"]:
        console.print(
            f"xprof (measured, {figures['host']}): "
            + ", ".join(
                f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                for k, v in figures.items()
                if k != "host"
            ),
            soft_wrap=True,
        )
    for op in view["top_ops"]:
        bound = f"{op['bound_by']}-bound" if op.get("bound_by") else "bound not measured"
        console.print(
            f"  {op['hlo_op']} ({op['category']}): {op['self_time_percent']:.1f}% of op time, {bound}"
            + (f", at {op['source_info']}" if op.get("source_info") else ""),
            soft_wrap=True,
            markup=False,
        )
    render_cost(view.get("cost_model") or {}, console)


def render_with_tools(view: dict[str, Any], console: Any) -> None:
    """`tpuscope trace`: the device view, then how to open the trace in xprof, TensorBoard and
    Perfetto (the trace file, when one was written, is named in view["perfetto_trace"])."""
    render(view, console)
    for logdir in view["log_dirs"]:
        console.print(
            f"xprof:       xprof --logdir {logdir} --port 8791   (then open http://localhost:8791)",
            soft_wrap=True,
        )
        console.print(
            f"TensorBoard: tensorboard --logdir {logdir}   (Profile tab; needs the xprof plugin)",
            soft_wrap=True,
        )
    if view.get("perfetto_trace"):
        console.print(
            f"Perfetto:    open https://ui.perfetto.dev, 'Open trace file', pick {view['perfetto_trace']}",
            soft_wrap=True,
        )
