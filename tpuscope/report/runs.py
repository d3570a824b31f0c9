"""The table of runs for `tpuscope ls`, with each run's headline figures from its analysis.json."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import RenderableType

from tpuscope.report.fit import Col, grid, print_plain
from tpuscope.report.hosts import hosts_cell
from tpuscope.store.location import Location, LocationError
from tpuscope.store.run import ANALYSIS_FILE

# The figures `ls` shows of a run, as its analysis wrote them at the run's end (no table read:
# a store of a thousand runs lists in a tenth of a second).
BRIEF_KEYS = ("steps", "step_time_p50_ms", "recompiles", "findings_by_severity", "analysis_version")


def _when(ns: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9)) if ns else "-"


def brief(run_dir: str | Path | Location) -> dict[str, Any] | None:
    """The run's headline figures from analysis.json, None when it has none (a run still going,
    one never analysed) or it cannot be read."""
    try:
        summary = json.loads((Location.of(run_dir) / ANALYSIS_FILE).read_text())
    except (OSError, ValueError, LocationError):
        return None
    return {k: summary.get(k) for k in BRIEF_KEYS} if isinstance(summary, dict) else None


def with_briefs(runs: list[dict[str, Any]], store: str | Path | Location) -> list[dict[str, Any]]:
    """Each run's meta with its `analysis` brief (None while it runs or when never analysed)."""
    root = Location.of(store)
    return [
        {
            **meta,
            "analysis": None if meta.get("status") == "running" else brief(root / meta["run_id"]),
        }
        for meta in runs
    ]


def _findings(summary: dict[str, Any] | None) -> str:
    sev = (summary or {}).get("findings_by_severity") or {}
    return (
        "-" if not summary else f"{sev.get('high', 0)}/{sev.get('medium', 0)}/{sev.get('low', 0)}"
    )


RUN_COLS = (
    Col("run id", whole=True),
    Col("started"),
    Col("status"),
    Col("backend"),
    Col("hosts"),
    Col("steps", justify="right"),
    Col("p50 ms", justify="right"),
    Col("findings h/m/l"),
    Col("command", long=True),
)


def backend_text(meta: dict[str, Any]) -> str:
    """The backend the run's processes used, in words when none was recorded."""
    procs = meta.get("processes", [])
    backend = next((p.get("backend") for p in procs if p.get("backend")), meta.get("backend"))
    return str(backend) if backend else "not recorded"


def run_rows(runs: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """One row of cells per run, in RUN_COLS' order."""
    rows: list[tuple[str, ...]] = []
    for meta in runs:
        summary = meta.get("analysis")
        p50 = (summary or {}).get("step_time_p50_ms")
        rows.append(
            (
                str(meta["run_id"]),
                _when(meta.get("start_ns")),
                str(meta.get("status", "-")),
                backend_text(meta),
                hosts_cell(meta),
                str((summary or {}).get("steps", "-")),
                "-" if p50 is None else f"{p50:.2f}",
                _findings(summary),
                str(meta.get("command", "")),
            )
        )
    return rows


def runs_table(runs: list[dict[str, Any]], width: int = 10_000) -> RenderableType:
    """The runs as a table when every id fits whole in `width`, else one record per run."""
    return grid("tpuscope runs (newest first)", RUN_COLS, run_rows(runs), width)


def render(runs: list[dict[str, Any]], console: Any) -> None:
    """`tpuscope ls`: the table of runs (records at widths where an id would be cut)."""
    print_plain(console, runs_table(runs, console.width))
