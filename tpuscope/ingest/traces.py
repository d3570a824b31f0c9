"""xplane.pb files -> the store's device tables: trace_events, device_steps, xprof_*.

Used at the end of `tpuscope run --trace-steps` (the trace the run captured) and by
`tpuscope import` (xplane files and TensorBoard/xprof log folders). Each file is read
on its own, so one corrupt file is refused by name while the others still load.
Times become epoch ns when the trace records its start (the "Task Environment"
plane's profile_start_time; xplane events are relative to it), so a run's steps and
its trace share one clock and every event gets the step whose window holds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from tpuscope.analyze.device_time import busy_per_window, step_lookup, step_windows
from tpuscope.ingest import trace_chunks as chunks
from tpuscope.ingest import xprof_figures
from tpuscope.parse import hlo_proto, hlo_rows, xprof_tools
from tpuscope.parse.xplane import XSpaceDecodeError, read_xspace, space_info
from tpuscope.schema import TABLES
from tpuscope.store.run import Run

_RELATIVE_LIMIT = 10**17  # ns; trace clocks below this are relative to the profile start


@dataclass
class TraceSet:
    """What a set of xplane files yielded: store tables, what was refused, a summary."""

    tables: dict[str, list[pa.Table]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)

    def add(self, name: str, table: pa.Table) -> None:
        if table.num_rows:
            self.tables.setdefault(name, []).append(table)

    def rows(self, name: str) -> int:
        return sum(t.num_rows for t in self.tables.get(name, []))


def host_of(path: Path, info: dict[str, Any]) -> str:
    hosts = [h for h in info.get("hostnames") or [] if h]
    return hosts[0] if hosts else path.name.removesuffix(".xplane.pb")


def clock_offset(table: pa.Table, info: dict[str, Any]) -> int:
    start = (info.get("planes", {}).get("Task Environment") or {}).get("profile_start_time")
    if not start or table.num_rows == 0:
        return 0
    latest = int(pa.compute.max(table["start_ns"]).as_py() or 0)
    return int(start) if latest < _RELATIVE_LIMIT else 0


def _steps_for(steps: pd.DataFrame | None, host: str) -> pd.DataFrame | None:
    if steps is None or steps.empty or "host" not in steps:
        return steps
    mine = steps[steps["host"].astype(str) == host]
    return mine if not mine.empty else steps


def load_file(
    path: Path, pid: int, steps: pd.DataFrame | None, out: TraceSet, host: str | None = None
) -> bool:
    """Read one xplane into `out`; False (and a refusal naming the file) if it cannot be read.
    `host` labels its rows instead of the machine the trace names (a pod's host: the name its
    steps carry, which a pod simulated on one machine, or a TPU VM's hostname, does not match).
    Memory (at most 3x the file, benchmarks/ingest.py): the reader's table is walked a slice at
    a time (trace_chunks), the pandas frames hold device-work rows only, and the store table
    keeps the reader's columns; only the reader's start_ns (relative times) is dropped."""
    try:
        table = read_xspace(path)
    except XSpaceDecodeError as exc:
        out.refused.append({"path": str(path), "reason": str(exc).removeprefix(f"{path}: ")})
        return False
    info = space_info(table)
    host = host or host_of(path, info)
    offset = clock_offset(table, info)
    ops = chunks.work_ops(table, offset)
    windows = step_windows(
        chunks.step_markers(table, offset),
        ops,
        _steps_for(steps, host),
        chunks.time_span(table, offset),
    )
    busy = busy_per_window(ops, windows).assign(host=host, pid=pid, rank=0)
    devices = sorted({str(d) for d in ops["device"].unique()}) if not ops.empty else []
    del ops
    chunks.count_modules(table, out.meta.setdefault("trace_modules", {}))
    events = chunks.store_events(table, host, pid, offset, step_lookup(windows))
    del table
    out.add("trace_events", events)
    out.add(
        "device_steps",
        pa.Table.from_pandas(busy, schema=TABLES["device_steps"], preserve_index=False),
    )
    out.files.append(str(path))
    planes = info.get("planes", {})
    kinds = sorted(
        {str(p.get("device_type_string")) for p in planes.values() if p.get("device_type_string")}
    )
    out.meta.setdefault("trace_hosts", []).append(host)
    out.meta.setdefault("trace_devices", []).extend(devices)
    if kinds:
        out.meta["device_kind"] = kinds[0]
    out.summary.append(
        f"{path.name}: {events.num_rows:,} events, {len(devices)} device(s)"
        + (f" ({', '.join(kinds)})" if kinds else "")
    )
    if any(
        "TPU" in k for k in kinds
    ):  # CPU runs keep their --deep dumps (the user's HLO, with metadata)
        add_hlo(out, path, {"host": host, "pid": pid, "rank": 0}, "tpu_trace")
    return True


def add_hlo(out: TraceSet, path: Path, fields: dict[str, Any], stage: str) -> None:
    """The HLO modules the trace's metadata plane carries, as hlo_modules / hlo_ops rows."""
    modules, problems = hlo_proto.trace_modules(path, stage)
    out.summary += problems
    if not modules:
        return
    rows = hlo_rows.rows(modules, **fields)
    for name in ("hlo_modules", "hlo_ops"):
        out.add(name, pa.Table.from_pylist(rows[name], schema=TABLES[name]))
    out.summary.append(
        f"{path.name}: {len(modules)} HLO module(s) from its metadata plane (stage {stage})"
    )


def load_traces(
    paths: list[Path],
    steps: pd.DataFrame | None = None,
    xprof: bool = True,
    first_pid: int = 0,
    host: str | None = None,
) -> TraceSet:
    """Read xplane files (each its own pid), then xprof's analyses of those with device planes;
    `host` labels every row (one host of a pod), else each file's own host."""
    out = TraceSet()
    device_files = []
    for i, path in enumerate(paths):
        if load_file(Path(path), first_pid + i, steps, out, host):
            devices = out.meta.get("trace_devices", [])
            if any(d.startswith("/device:") for d in devices):
                device_files.append(Path(path))
    if xprof and device_files and xprof_tools.available():
        sessions: dict[Path, list[Path]] = {}
        for path in device_files:  # one profile = the host files of one session folder
            sessions.setdefault(path.parent, []).append(path)
        for files in sessions.values():
            add_xprof(out, files, host)
    elif device_files and xprof:
        out.summary.append(
            "xprof is not installed: no MXU utilization or duty cycle (pip install xprof)"
        )
    kind = out.meta.get("device_kind") or xprof_figures.device_kind(
        [], out.meta.get("trace_devices")
    )
    if kind:
        out.meta["device_kind"] = kind
    return out


def add_xprof(out: TraceSet, files: list[Path], host: str | None = None) -> None:
    """xprof's analyses of one profile (its hosts' files together), labelled with `host` or its
    first host."""
    result = xprof_tools.run_tools(files)
    host = (
        host or files[0].name.removesuffix(".xplane.pb")
        if len(files) == 1
        else files[0].parent.name
    )
    fields = {"host": host, "pid": 0, "rank": 0}
    kind = out.meta.get("device_kind") or xprof_figures.device_kind(
        result.overview, out.meta.get("trace_devices")
    )
    if kind:
        out.meta["device_kind"] = kind
    result.overview = xprof_figures.overview_rows(result.overview, kind)
    result.ops = xprof_figures.op_rows(result.ops)
    out.add(
        "xprof_overview",
        pa.Table.from_pylist(
            [{**fields, **r} for r in result.overview], schema=TABLES["xprof_overview"]
        ),
    )
    out.add(
        "xprof_ops",
        pa.Table.from_pylist([{**fields, **r} for r in result.ops], schema=TABLES["xprof_ops"]),
    )
    out.summary += result.errors
    figures = {r["name"]: r["value"] for r in result.overview if r["value"] is not None}
    for key in ("mxu_utilization_percent", "device_duty_cycle_percent"):
        if key in figures:
            out.meta[key] = figures[key]


def write(run: Run | Path, traces: TraceSet, tag: str) -> int:
    """Write every table of the set as part files of the run (`part-<tag>-NNNN`), a row group at
    a time (memory: store/row_groups.py); returns the rows written. A run's own ingest tags them
    `<host>-<pid>`, as every writer's parts, so the hosts of a pod never replace each other's."""
    run = run if isinstance(run, Run) else Run(run)
    return sum(
        run.write_arrow(name, f"{tag}-{i:04d}", table)
        for name, tables in traces.tables.items()
        for i, table in enumerate(tables)
    )
