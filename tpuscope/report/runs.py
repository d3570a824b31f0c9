"""The table of runs for `tpuscope ls`, with each run's headline figures from its analysis.json."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.table import Table

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
    return [{**meta, "analysis": None if meta.get("status") == "running" else brief(root / meta["run_id"])}
            for meta in runs]


def _findings(summary: dict[str, Any] | None) -> str:
    sev = (summary or {}).get("findings_by_severity") or {}
    return "-" if not summary else f"{sev.get('high', 0)}/{sev.get('medium', 0)}/{sev.get('low', 0)}"


def runs_table(runs: list[dict[str, Any]]) -> Table:
    table = Table(title="tpuscope runs (newest first)", title_justify="left")
    for col in ("run id", "started", "status", "backend", "hosts", "steps", "p50 ms", "findings h/m/l", "command"):
        table.add_column(col)
    for meta in runs:
        procs = meta.get("processes", [])
        backend = next((p.get("backend") for p in procs if p.get("backend")), meta.get("backend") or "-")
        summary = meta.get("analysis")
        p50 = (summary or {}).get("step_time_p50_ms")
        table.add_row(meta["run_id"], _when(meta.get("start_ns")), str(meta.get("status", "-")),
                      str(backend), hosts_cell(meta), str((summary or {}).get("steps", "-")),
                      "-" if p50 is None else f"{p50:.2f}", _findings(summary), str(meta.get("command", ""))[:60])
    return table


def render(runs: list[dict[str, Any]], console: Any) -> None:
    """`tpuscope ls`: the table of runs."""
    console.print(runs_table(runs))
