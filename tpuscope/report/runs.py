"""The table of runs for `tpuscope ls`."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table

from tpuscope.report.hosts import hosts_cell


def _when(ns: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9)) if ns else "-"


def runs_table(runs: list[dict[str, Any]]) -> Table:
    table = Table(title="tpuscope runs (newest first)", title_justify="left")
    for col in ("run id", "started", "status", "backend", "hosts", "processes", "command"):
        table.add_column(col)
    for meta in runs:
        procs = meta.get("processes", [])
        backend = next((p.get("backend") for p in procs if p.get("backend")), meta.get("backend") or "-")
        table.add_row(meta["run_id"], _when(meta.get("start_ns")), str(meta.get("status", "-")),
                      str(backend), hosts_cell(meta), str(len(procs)), str(meta.get("command", ""))[:60])
    return table
