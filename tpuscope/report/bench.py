"""Render a benchmark: a rich comparison table for people, a JSON list for scripts, a Markdown table for docs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # report/ sits below bench/: the result is only read here
    from tpuscope.bench.harness import BenchResult

NOISE_RULE = (
    "speedup = strict p50 / mode p50 (medians over repeats); range from each mode's "
    "noise interval (min..max of per-repeat p50, or step IQR with 1 repeat); "
    "'real' only when the range excludes 1x. min = fastest step; CPU = process CPU "
    "time per step (p50, all threads); throughput = measured samples / measured time"
)


def _num(value: float | None, digits: int = 1, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{unit}"


def _x(value: float | None) -> str:
    """A ratio with as many digits as it needs: 0.53, 2.31, 66.4, 101."""
    if value is None:
        return "?"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _speedup(row: dict[str, Any]) -> str:
    if row.get("speedup_vs_strict") is None:
        return "-"
    if row.get("verdict") == "baseline":
        return "1.00x (base)"
    low, high = row["speedup_range"]
    return f"{_x(row['speedup_vs_strict'])}x ({_x(low)}-{_x(high)})"


def _verdict(row: dict[str, Any]) -> Text:
    verdict = row.get("verdict") or "-"
    style = {"faster": "bold green", "slower": "bold red", "within noise": "yellow"}.get(
        verdict, ""
    )
    return Text(verdict, style=style)


def _compiles(row: dict[str, Any]) -> str:
    if row.get("compiles") is None:
        return "-"
    return f"{row['compiles']} ({row['compiles_after_warmup']})"


def _first_step_s(row: dict[str, Any]) -> float | None:
    return row["first_step_ms"] / 1e3 if row.get("first_step_ms") is not None else None


# (header, right-aligned, cell) for the two tables: how fast, and what it costs.
SPEED_COLUMNS: list[tuple[str, bool, Any]] = [
    ("p50 ms", True, lambda r: _num(r["step_time_p50_ms"], 2)),
    ("p90 ms", True, lambda r: _num(r["step_time_p90_ms"], 2)),
    ("min ms", True, lambda r: _num(r.get("step_time_min_ms"), 2)),
    ("CPU ms", True, lambda r: _num(r.get("host_cpu_p50_ms"), 1)),
    ("spread", True, lambda r: _num(r.get("spread_pct"), 0, "%")),
    ("vs strict (range)", True, _speedup),
    ("real?", False, _verdict),
]
COST_COLUMNS: list[tuple[str, bool, Any]] = [
    ("samples/s", True, lambda r: _num(r.get("samples_per_s"), 0)),
    ("tokens/s", True, lambda r: _num(r.get("tokens_per_s"), 0)),
    ("1st step s", True, lambda r: _num(_first_step_s(r), 2)),
    ("compiles (after warm-up)", True, _compiles),
    ("compile s", True, lambda r: _num(r.get("compile_s"), 2)),
    ("host MB", True, lambda r: _num(r.get("peak_host_mb"), 0)),
]


def _table(result: BenchResult, title: str, columns: list[tuple[str, bool, Any]]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("backend")
    table.add_column("mode")
    for header, right, _ in columns:
        table.add_column(header, justify="right" if right else "left")
    for row in (r for r in result.rows if r["status"] == "ok"):
        table.add_row(row["backend"], row["mode"], *(cell(row) for _, _, cell in columns))
    return table


def comparison_tables(result: BenchResult) -> list[Table]:
    """Two tables that each fit a terminal: step time and speedup, then throughput and compiles."""
    first = result.rows[0] if result.rows else {}
    title = (
        f"tpuscope bench: {first.get('model', '-')} ({first.get('size', '')}), group {result.group}"
    )
    return [
        _table(result, f"{title}: step time", SPEED_COLUMNS),
        _table(result, f"{title}: throughput and compiles", COST_COLUMNS),
    ]


def notes(result: BenchResult) -> list[str]:
    """Unavailable modes grouped by reason, errors, and how to read the table."""
    lines: list[str] = []
    unavailable: dict[tuple[str, str], list[str]] = {}
    for row in result.rows:
        if row["status"] == "unavailable":
            unavailable.setdefault((row["backend"], row.get("reason") or "?"), []).append(
                row["mode"]
            )
        elif row["status"] != "ok":
            lines.append(f"{row['backend']} {row['mode']}: failed: {row.get('reason')}")
    for (backend, reason), modes in unavailable.items():
        lines.append(f"{backend} {','.join(modes)}: unavailable: {reason}")
    for row in result.rows:
        if row["status"] == "ok" and (row.get("findings") or row.get("analysis_error")):
            found = list(dict.fromkeys(row.get("findings") or []))
            text = "; ".join(found[:3]) + (f"; ... {len(found) - 3} more" if len(found) > 3 else "")
            text = text or f"analysis failed: {row['analysis_error']}"
            lines.append(
                f"{row['backend']} {row['mode']} findings ({len(found)}, tpuscope show "
                f"{row['run_id']}): {text}"
            )
    memory = {
        r.get("device_memory_note")
        for r in result.rows
        if r["status"] == "ok" and r.get("peak_device_mb") is None
    }
    lines += [f"device memory: {memory_words(m)}" for m in sorted(m for m in memory if m)]
    lines.append(NOISE_RULE)
    return lines


def memory_words(note: str) -> str:
    """A runtime's memory error in words: "Bad StatusOr access: UNIMPLEMENTED: GetAllocatorStats"
    is a device that does not report its memory (PJRT's CPU client), not a failure (issue 29)."""
    if "UNIMPLEMENTED" in note or "not implemented" in note.lower():
        backend = note.split(":", 1)[0] if ":" in note else "the runtime"
        return f"not reported: {backend}'s device does not keep memory statistics (PJRT on the CPU does not)"
    return note


def render(result: BenchResult, console: Console) -> None:
    parts: list[Any] = list(comparison_tables(result))
    parts += [Text(line, style="dim") for line in notes(result)]
    parts.append(
        Text(
            f"{len(result.raw)} worker processes in {result.seconds:.0f} s; each is a run in the "
            f"store named bench-<model>-<backend>-<mode> with meta bench_group={result.group} "
            f"(tpuscope ls; --json lists the run ids)",
            style="dim",
        )
    )
    console.print(Group(*parts))


def to_json(result: BenchResult) -> str:
    return json.dumps(result.to_list(), indent=2, default=str)


def json_text(result: BenchResult) -> str:
    return to_json(result) + "\n"


def markdown_text(result: BenchResult) -> str:
    return to_markdown(result) + "\n"


def to_markdown(result: BenchResult) -> str:
    """The comparison as one Markdown table (what docs/benchmarks.md shows), then the notes."""
    columns = SPEED_COLUMNS + COST_COLUMNS
    lines = [
        "| backend | mode | " + " | ".join(h for h, _, _ in columns) + " |",
        "|---|---|" + "|".join("--:" if right else "---" for _, right, _ in columns) + "|",
    ]
    for row in (r for r in result.rows if r["status"] == "ok"):
        cells = [row["backend"], row["mode"], *(str(cell(row)) for _, _, cell in columns)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {line}" for line in notes(result))
