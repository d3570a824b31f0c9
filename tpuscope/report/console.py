"""The terminal report (rich): headline figures, compile causes, fallbacks, findings by cost."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from tpuscope.detect.run_analysis import RunReport
from tpuscope.report.hosts import hosts_table
from tpuscope.schema import Finding
from tpuscope.step_runs import runs_text

_SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan"}


def _fmt(value: Any, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    return f"{value}{unit}"


def where(location: str | None) -> str:
    """A location relative to the current folder when it is inside it, so tables stay narrow."""
    if not isinstance(location, str) or not location:
        return "-"
    relative = os.path.relpath(location, os.getcwd()) if os.path.isabs(location) else location
    return location if relative.startswith("..") else relative


def _compiles_text(summary: dict[str, Any]) -> str:
    total = f"{summary['compiles']} in total ({_fmt(summary['compile_s'], ' s', 2)})"
    if not summary["graph_families"]:  # imported totals: counts without the graphs
        return f"{total}; which graphs is not recorded"
    return (f"{total} of {summary['graph_families']} graph(s); {summary['recompiles']} recompile(s) "
            f"({_fmt(summary['recompile_s'], ' s', 2)}, {_fmt(100 * summary['recompile_share'], '%')} "
            "of the run's wall time)")


def headline(summary: dict[str, Any]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    ended = summary.get("status") or "-"
    if summary.get("exit_code") not in (None, 0):
        ended += f" (exit {summary['exit_code']})"
    rows = [
        ("run", f"{summary.get('run_id')}  [{summary.get('backend') or '-'} on {summary.get('device_kind') or '-'}]"),
        ("ended", ended),
        ("steps", f"{summary['steps']} ({summary['steps_judged']} timed after {summary['warmup']} warm-up)"),
        ("step time", f"p50 {_fmt(summary['step_time_p50_ms'], ' ms', 2)}   p90 {_fmt(summary['step_time_p90_ms'], ' ms', 2)}"),
        ("compiles", _compiles_text(summary)),
        ("host transfers", f"{_fmt(summary['transfers_from_device_per_step'], ' per step', 2)} (device to host)"
                           + (f", {summary['value_reads']} value reads (.item())" if summary.get("value_reads") else "")),
    ]
    after = summary.get("after_loop")
    if after:
        rows.append(("after the loop", f"{_fmt(after['wall_s'], ' s', 2)}: {after['compiles']} compile(s) "
                                       f"({_fmt(after['compile_s'], ' s', 2)}), not a step"))
    cost, p50 = summary.get("profiler_ms_per_step"), summary.get("step_time_p50_ms")
    if cost is not None:
        share = _cost_share(cost, p50)
        rows.append(("tpuscope cost", f"at most {cost:.2f} ms per step{share}: its step hook and flushes, "
                                      "timed in the program"))
    for key, value in rows:
        table.add_row(key, value)
    return table


def _cost_share(cost_ms: float, p50_ms: float | None) -> str:
    """tpuscope's cost against the p50 step: a share while it is one, else a ratio (never "2400%")."""
    if not p50_ms:
        return ""
    if cost_ms <= p50_ms:
        return f" ({100 * cost_ms / p50_ms:.1f}% of the p50 step)"
    return f" ({cost_ms / p50_ms:,.1f} times the p50 step of {p50_ms:.3f} ms)"


def causes_table(causes: list[dict[str, Any]]) -> Table | None:
    if not causes:
        return None
    table = Table(title="Top compile causes", title_justify="left", expand=False)
    for col, kw in (("compiles", {"justify": "right"}), ("recompiles", {"justify": "right"}),
                    ("time (s)", {"justify": "right"}), ("first step", {"justify": "right"}), ("cause", {}),
                    ("where", {})):
        table.add_column(col, **kw)
    for c in causes:
        table.add_row(str(c["count"]), str(c.get("recompiles", 0)), f"{c['seconds']:.3f}", str(c["first_step"]),
                      c["cause"], where(c["location"]))
    return table


def fallbacks_table(ops: list[dict[str, Any]]) -> Table | None:
    if not ops:
        return None
    table = Table(title="CPU fallbacks (aten ops with no XLA lowering)", title_justify="left")
    for col, kw in (("op", {}), ("count", {"justify": "right"}), ("per step", {"justify": "right"}),
                    ("steps", {}), ("where", {})):
        table.add_column(col, **kw)
    for op in ops:
        shown = runs_text(op.get("step_runs") or [], op.get("step_count"), limit=4)
        table.add_row(op["op"], str(op["count"]), f"{op['per_step']:.2f}", shown, where(op["location"]))
    return table


def finding_panel(index: int, finding: Finding) -> Panel:
    style = _SEVERITY_STYLE.get(finding.severity, "")
    body = Text()
    body.append(finding.detail + "\n")
    body.append("fix: ", style="bold green")
    body.append(finding.fix + "\n")
    if finding.location:
        body.append("where: ", style="bold")
        body.append(finding.location + "\n")
    if finding.step_runs:
        body.append("steps: ", style="bold")
        body.append(finding.steps_text + "\n")
    body.append(f"cost: ~{finding.cost_s:.3f} s", style="dim")
    title = Text.assemble((f"{index}. [{finding.severity}] ", style), (finding.rule, "bold"), f"  {finding.title}")
    return Panel(body, title=title, title_align="left", border_style=style or "white")


def lead_line(findings: list[Finding]) -> Text:
    """One line that opens the report: the most severe (then costliest) finding and its fix, or a
    clean bill."""
    if not findings:
        return Text("tpuscope: no findings: no recompile, CPU fallback, host sync or op-by-op loop.",
                    style="green")
    top = findings[0]
    line = Text.assemble(("tpuscope: first: ", "bold"), (f"[{top.severity}] ", _SEVERITY_STYLE.get(top.severity, "")),
                         f"{top.title} (~{top.cost_s:.2f} s)", ("  fix: ", "bold green"), top.fix)
    if len(findings) > 1:
        line.append(f"  (+{len(findings) - 1} more below)", style="dim")
    return line


def render(report: RunReport, console: Console) -> None:
    console.print(lead_line(report.findings))
    parts: list[Any] = [headline(report.summary)]
    for table in (hosts_table(report.summary.get("hosts")), causes_table(report.summary["compile_causes"]),
                  fallbacks_table(report.summary["fallback_ops"])):
        if table is not None:
            parts.append(table)
    console.print(Panel(Group(*parts), title="tpuscope report", title_align="left"))
    for i, finding in enumerate(report.findings, 1):
        console.print(finding_panel(i, finding))
