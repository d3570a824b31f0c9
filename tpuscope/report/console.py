"""The terminal report (rich): headline figures, compile causes, fallbacks, findings by cost."""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from tpuscope.analyze.contract import CompileCause, FallbackOp, RunSummary
from tpuscope.detect.run_analysis import RunReport
from tpuscope.report.fit import Col, fits, grid, print_plain
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


def _compiles_text(summary: RunSummary) -> str:
    counted = summary.compiles_counted or 0
    if (
        counted > summary.compiles and not summary.steps
    ):  # imported counters: more than the graphs named
        return (
            f"{counted} counted in the imported files, {summary.compiles} of them with their graph; "
            "recompiles judged from the counts per step marker (see the findings)"
        )
    if not summary.compiles and summary.status == "imported":
        return "none recorded in the imported files"
    total = f"{summary.compiles} in total ({_fmt(summary.compile_s, ' s', 2)})"
    if not summary.graph_families:  # imported totals: counts without the graphs
        return f"{total}; which graphs is not recorded"
    share = (
        f", {_fmt(100 * summary.recompile_share, '%')} of the run's wall time"
        if summary.run_wall_s
        else ""
    )
    families = summary.graph_families
    graphs = (
        f"{summary.graphs} graph(s) in {families} famil{'y' if families == 1 else 'ies'}"
        if summary.graphs
        else f"{families} graph famil{'y' if families == 1 else 'ies'}"  # an analysis before graphs
    )
    return (
        f"{total} of {graphs}; {summary.recompiles} recompile(s) "
        f"({_fmt(summary.recompile_s, ' s', 2)}{share})"
    )


def _steps_text(summary: RunSummary) -> str:
    """How many steps, or what the imported files say of them, in words (never "0" for unknown)."""
    if summary.steps and summary.steps <= summary.warmup:  # judge.phases keeps the last timed
        return f"{summary.steps} (fewer than {summary.warmup} warm-up + 1: the last one timed)"
    if summary.steps:
        return f"{summary.steps} ({summary.steps_judged} timed after {summary.warmup} warm-up)"
    markers = summary.step_markers
    if markers:
        return f"{markers} step markers in the imported files (no time per step)"
    if summary.status == "imported":
        return "none recorded: the imported files have no step markers"
    return "none (the program ended before its first step)"


def _transfers_text(summary: RunSummary) -> str | None:
    """Host reads per timed step and the value reads, or None when neither is known."""
    reads = f"{summary.value_reads} value reads (.item())" if summary.value_reads else ""
    if not summary.steps_judged:
        return reads or None
    return f"{_fmt(summary.transfers_from_device_per_step, ' per step', 2)} (device to host)" + (
        f", {reads}" if reads else ""
    )


def _ran_on(summary: RunSummary) -> str:
    """'[torch_xla on cpu]', or what of it was not recorded, in words."""
    backend, device = summary.backend, summary.device_kind
    if not backend and not device:
        return "[backend and device not recorded]"
    if backend in ("trace", "xprof"):  # an imported profile: what was traced is all that is known
        return f"[profiler trace on {device or 'a device not recorded'}]"
    return f"[{backend or 'backend not recorded'} on {device or 'a device not recorded'}]"


def _batched_text(summary: RunSummary) -> str:
    """Where the lane timed a dispatch-bound loop's steps in batches, the figures say so."""
    if not summary.steps_batched:
        return ""
    return (
        f"   ({summary.steps_batched} steps of plain calls timed in batches, each its batch's "
        "mean: the p90 is of those means)"
    )


def headline_rows(summary: RunSummary) -> list[tuple[str, str]]:
    """(figure, words) of the report's head."""
    ended = summary.status or "-"
    if summary.exit_code not in (None, 0):
        ended += f" (exit {summary.exit_code})"
    rows = [
        ("run", f"{summary.run_id}  {_ran_on(summary)}"),
        ("ended", ended),
        ("steps", _steps_text(summary)),
    ]
    if summary.step_time_p50_ms is not None:
        rows.append(
            (
                "step time",
                f"p50 {_fmt(summary.step_time_p50_ms, ' ms', 2)}   "
                f"p90 {_fmt(summary.step_time_p90_ms, ' ms', 2)}" + _batched_text(summary),
            )
        )
    rows.append(("compiles", _compiles_text(summary)))
    transfers = _transfers_text(summary)
    if transfers:
        rows.append(("host transfers", transfers))
    after = summary.after_loop
    if after:
        rows.append(
            (
                "after the loop",
                f"{_fmt(after.wall_s, ' s', 2)}: {after.compiles} compile(s) "
                f"({_fmt(after.compile_s, ' s', 2)}), not a step",
            )
        )
    cost, p50 = summary.profiler_ms_per_step, summary.step_time_p50_ms
    if cost is not None:
        share = _cost_share(cost, p50)
        per_compile = summary.profiler_ms_per_compile
        compiles = (
            ""
            if per_compile is None
            else (
                f"; {per_compile:.1f} ms per compile (its step's hook and the HLO dump's files deleted)"
            )
        )
        rows.append(
            (
                "tpuscope cost",
                f"at most {cost:.2f} ms per step{share}: {_parts(summary, cost)}, "
                f"timed in the program{_overlap(summary)}{compiles}",
            )
        )
    if summary.profiler_trace_s:
        rows.append(
            (
                "device trace",
                f"{summary.profiler_trace_s:.2f} s once, to start and stop the profiler "
                f"(between steps: no step time holds it){_trace_parts(summary)}",
            )
        )
    untaken = summary.trace_untaken
    if untaken and not summary.profiler_trace_s:
        rows.append(("device trace", _untaken_text(untaken, summary.steps)))
    return rows


def _untaken_text(untaken: dict[str, int], steps: int | None) -> str:
    """What a TPU run whose automatic trace never came did not measure, and how to trace it."""
    start, stop = int(untaken.get("start", 0)), int(untaken.get("stop", 0))
    steps = steps or 0
    return (
        f"none: the run had {steps} step{'s' * (steps != 1)}, and the automatic trace takes "
        f"steps {start}-{stop - 1}, after the warm-up: the device's op times, and so its "
        "TensorCore use, were not measured (`tpuscope run --trace-steps 0` traces step 0, "
        "its compile and all its work: a long step makes a large trace)"
    )


def _trace_parts(summary: RunSummary) -> str:
    """Where a profiler window's time went, where the collector timed its stop: the wait for
    the device to finish the traced steps, and the profiler's own collecting and writing."""
    stop, wait = summary.profiler_trace_stop_s, summary.profiler_trace_wait_s
    if not stop:
        return ""
    waited = f"{wait:.2f} s waiting for the device's pending work, " if wait else ""
    return f"; {waited}{stop - (wait or 0):.2f} s in the profiler's stop (collecting its events)"


def _parts(summary: RunSummary, cost: float) -> str:
    """Which part of the bound runs on the program's thread: a short run's flush thread (its
    reads of a trace, its Parquet writes) can outweigh hooks of a tenth of a millisecond."""
    hooks = summary.profiler_hook_ms_per_step
    if hooks is None:
        return "its step hook and flushes"
    return (
        f"{hooks:.2f} ms in its step hooks on the program's thread, {max(cost - hooks, 0.0):.2f} "
        "ms of its flush thread's CPU beside it"
    )


def _overlap(summary: RunSummary) -> str:
    """Whether the bound is paid: host time in the hooks is hidden while the device is busy
    (asynchronous dispatch) and paid in full by a step that keeps the device waiting. Said
    only where a trace measured the device's busy share (its busy time a step against the
    untraced step, as the idle card reads it: step_idle.step_busy_share)."""
    busy = summary.device_busy_share
    if busy is None:
        return (
            " (a bound: where the device runs asynchronously, part of this host time overlaps "
            "its work; benchmarks/overhead.py measures the effect, paired)"
        )
    if busy >= 0.9:
        return (
            f"; the device was busy {100 * busy:.0f}% of the step, so this host time "
            "overlaps its work and is not added to the step (benchmarks/overhead.py measures it)"
        )
    if busy < 0.5:
        paid = (
            "the hooks' time in full (the flush thread runs beside it)"
            if summary.profiler_hook_ms_per_step is not None
            else "this in full"
        )
        return (
            f"; the device was busy only {100 * busy:.0f}% of the step: the step waits "
            f"on the host, which pays {paid}"
        )
    return (
        f"; the device was busy {100 * busy:.0f}% of the step: part of this host time "
        "overlaps its work"
    )


def headline(summary: RunSummary) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for key, value in headline_rows(summary):
        table.add_row(key, Text(value))  # words, not markup: "[torch_xla on CPU]" is no style tag
    return table


def _cost_share(cost_ms: float, p50_ms: float | None) -> str:
    """tpuscope's cost against the p50 step: a share while it is one, else a ratio (never "2400%")."""
    if not p50_ms:
        return ""
    if cost_ms <= p50_ms:
        return f" ({100 * cost_ms / p50_ms:.1f}% of the p50 step)"
    return f" ({cost_ms / p50_ms:,.1f} times the p50 step of {p50_ms:.3f} ms)"


CAUSE_COLS = (
    Col("compiles", justify="right"),
    Col("recompiles", justify="right"),
    Col("time (s)", justify="right"),
    Col("first step", justify="right"),
    Col("cause", long=True),
    Col("where", whole=True),
)
FALLBACK_COLS = (
    Col("op", whole=True),
    Col("count", justify="right"),
    Col("per step", justify="right"),
    Col("steps"),
    Col("where", whole=True),
)


def causes_table(causes: list[CompileCause], width: int = 10_000) -> RenderableType | None:
    if not causes:
        return None
    rows = [
        (
            str(c.count),
            str(c.recompiles),
            f"{c.seconds:.3f}",
            _step(c.first_step),
            str(c.cause),
            where(c.location),
        )
        for c in causes
    ]
    return grid("Top compile causes", CAUSE_COLS, rows, width)


def _step(step: Any) -> str:
    """A step number, or words when the run has none (an imported report: no step markers)."""
    return (
        "not recorded"
        if step is None or (isinstance(step, int | float) and step < 0)
        else str(step)
    )


def fallbacks_table(ops: list[FallbackOp], width: int = 10_000) -> RenderableType | None:
    if not ops:
        return None
    rows = [
        (
            str(op.op),
            str(op.count),
            f"{op.per_step:.2f}",
            runs_text(op.step_runs or [], op.step_count, limit=4),
            where(op.location),
        )
        for op in ops
    ]
    return grid("CPU fallbacks (ops torch_xla ran on the host)", FALLBACK_COLS, rows, width)


def finding_body(finding: Finding) -> Text:
    """A finding's words: its title, what was seen, the fix, where, which steps, the cost."""
    body = Text()
    body.append(finding.title + "\n", style="bold")
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
    return body


def finding_title(index: int, finding: Finding) -> Text:
    style = _SEVERITY_STYLE.get(finding.severity, "")
    return Text.assemble((f"{index}. [{finding.severity}] ", style), (finding.rule, "bold"))


def finding_panel(index: int, finding: Finding) -> Panel:
    style = _SEVERITY_STYLE.get(finding.severity, "")
    return Panel(
        finding_body(finding),
        title=finding_title(index, finding),
        title_align="left",
        border_style=style or "white",
    )


def lead_line(findings: list[Finding]) -> Text:
    """One line that opens the report: the most severe (then costliest) finding and its fix, or a
    clean bill."""
    if not findings:
        return Text(
            "tpuscope: no findings: no recompile, CPU fallback, host sync, host callback or op-by-op "
            "loop.",
            style="green",
        )
    top = findings[0]
    line = Text.assemble(
        ("tpuscope: first: ", "bold"),
        (f"[{top.severity}] ", _SEVERITY_STYLE.get(top.severity, "")),
        f"{top.title} (~{top.cost_s:.2f} s)",
        ("  fix: ", "bold green"),
        top.fix,
    )
    if len(findings) > 1:
        line.append(f"  (+{len(findings) - 1} more below)", style="dim")
    return line


def _boxed_fits(report: RunReport, parts: list[Any], width: int) -> bool:
    """Whether the boxed report keeps every identity whole at `width`: each table drawn as one,
    and the run id and every finding's location shorter than a box's inside."""
    inside = width - 4
    words = [str(report.summary.run_id or "")] + [f.location or "" for f in report.findings]
    return all(fits(p) for p in parts) and all(len(w) + len("where: ") <= inside for w in words)


def render(report: RunReport, console: Console) -> None:
    """The report: boxed when every identity fits the width, else the same words unboxed and
    without hard line breaks (tpuscope/report/fit.py)."""
    console.print(lead_line(report.findings), soft_wrap=True)
    summary = report.summary
    tables = [
        t
        for t in (
            hosts_table(summary.hosts, console.width - 4),
            causes_table(summary.compile_causes, console.width - 4),
            fallbacks_table(summary.fallback_ops, console.width - 4),
        )
        if t is not None
    ]
    if _boxed_fits(report, tables, console.width):
        console.print(
            Panel(Group(headline(summary), *tables), title="tpuscope report", title_align="left")
        )
        for i, finding in enumerate(report.findings, 1):
            console.print(finding_panel(i, finding))
        return
    console.print(Text("tpuscope report", style="bold"))
    for key, value in headline_rows(summary):
        console.print(Text.assemble((f"{key}: ", "bold"), value), soft_wrap=True)
    for part in tables:
        print_plain(console, part)
    for i, finding in enumerate(report.findings, 1):
        console.print(
            Text.assemble(finding_title(i, finding), "\n", finding_body(finding)), soft_wrap=True
        )
