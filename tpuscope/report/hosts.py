"""The hosts of a pod run in the terminal report and in `tpuscope ls`."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import RenderableType

from tpuscope.analyze.contract import HostSummary
from tpuscope.report.fit import Col, grid

HOST_COLS = (
    Col("host", whole=True),
    Col("procs", justify="right"),
    Col("steps", justify="right"),
    Col("p50 (ms)", justify="right"),
    Col("vs pod (ms)", justify="right"),
    Col("ended"),
    Col("findings naming it"),
)


def hosts_table(hosts: list[HostSummary] | None, width: int = 10_000) -> RenderableType | None:
    """One row per host: processes, steps, median step, excess over the pod, how it ended, and the
    rules whose findings name it (not all hosts); records where a host name would be cut. A
    straggler's row is marked."""
    if not hosts:
        return None
    rows = []
    for h in hosts:
        excess = h.excess_ms
        rows.append(
            (
                str(h.host) + (" (straggler)" if h.straggler else ""),
                str(h.processes),
                str(h.steps),
                f"{h.p50_ms:.2f}" if h.p50_ms is not None else "-",
                f"{excess:+.2f}" if excess is not None else "-",
                str(h.status or "-"),
                ", ".join(h.rules or []) or "-",
            )
        )
    return grid(f"Hosts ({len(hosts)})", HOST_COLS, rows, width)


def hosts_cell(meta: dict[str, Any]) -> str:
    """`tpuscope ls`: how many hosts wrote the run and how they ended ("4: 3 finished, 1 lost")."""
    hosts = meta.get("hosts")
    if hosts:
        ended = Counter(str(h.get("status") or "unknown").split(" (")[0] for h in hosts)
        return f"{len(hosts)}: " + ", ".join(f"{n} {status}" for status, n in ended.most_common())
    names = {p.get("host") for p in meta.get("processes", []) if p.get("host")}
    return str(len(names) or 1)
