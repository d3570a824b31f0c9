"""Finish a run's device view: ingest the traces and HLO dumps its processes left in the run folder.

`tpuscope run` calls `ingest_run` after the program exits: xplane files the profiler
windows wrote under `<run>/trace/` (any backend; a pod's host reads only its own) become
trace_events, device_steps and xprof tables, with the run's own steps as windows; `--deep` HLO dumps under `<run>/hlo/`
become hlo_modules and hlo_ops. Doing it once, in the launcher, keeps the parsing cost
out of the profiled program.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tpuscope.ingest import traces as trace_ingest
from tpuscope.parse.hlo import dump_files
from tpuscope.parse.hlo_rows import load_dumps
from tpuscope.store import Run, layout
from tpuscope.store.hosts import file_host
from tpuscope.store.pods import is_pod_run
from tpuscope.user_files import add_program_folders

DUMP_STAGES = ("before_optimizations", "after_optimizations")


def ingest_hlo(
    run: Run, files: list[Path], tag: str | None = None, **fields: Any
) -> tuple[int, list[dict[str, str]]]:
    """Parse HLO text files into the run's hlo tables; (modules written, refusals). The parts
    are named by this host and process (`part-<host>-<pid>-<seq>`, as every writer's), so two
    hosts of a pod ingesting at once never replace each other's, and each ships and merges its own."""
    rows, refused = load_dumps(files, **fields)
    writer = run.writer(tag=tag, host=file_host())
    for table, table_rows in rows.items():
        writer.extend(table, table_rows)
    writer.flush()
    return len(rows["hlo_modules"]), refused


def traced_steps(run: Run) -> pd.DataFrame:
    """The run's steps a profiler window traced (--trace-steps, or the automatic window a
    process records in its own meta). torch_xla runs a step's graph after the step's sync, so
    in the next step's wall time, and its window's first and last steps are opened up so the
    trace's edges belong to them; the JAX and TorchTPU collectors start the profiler before the
    first traced step opens and stop it after the last one ended (collect/trace_steps.py), so
    their steps are taken as they are and the profiler's own start and stop fall in no step."""
    steps = run.steps
    meta = run.meta
    processes = meta.get("processes") or []
    window = meta.get("trace_steps") or next(
        (p["trace_steps"] for p in processes if p.get("trace_steps")), None
    )
    if steps.empty or not window:
        return steps
    mine = steps[(steps["step"] >= window[0]) & (steps["step"] < window[1])].copy()
    backends = {meta.get("backend"), *(p.get("backend") for p in processes)}
    if mine.empty or "torch_xla" not in backends:
        return mine if not mine.empty else steps
    per_process = mine.groupby(["host", "pid"])["step"]
    mine.loc[mine["step"] == per_process.transform("min"), "start_ns"] = np.iinfo(np.int64).min
    mine.loc[mine["step"] == per_process.transform("max"), "end_ns"] = np.iinfo(np.int64).max
    return mine


def own_xplanes(run_dir: Path, host: str | None) -> list[Path]:
    """The xplane files this ingest reads: every one under trace/, or for a host of a pod only
    those its own processes' profiler windows wrote (trace/<backend>-<host>-<pid>/): the
    other hosts of a shared folder ingest theirs."""
    root = run_dir / layout.TRACE
    if host is None:
        return layout.xplane_files(root)
    folders = (
        sorted(p for p in root.iterdir() if p.is_dir() and layout.trace_host(p.name) == host)
        if root.is_dir()
        else []
    )
    return [f for folder in folders for f in layout.xplane_files(folder)]


def keep_only_read(folder: Path, dumps: list[Path]) -> tuple[int, int]:
    """Delete what XLA dumped that tpuscope never reads (issue 29: a 12-step --deep run left
    43 MB in 2,922 files): the module texts it parsed and the `.hlo.pb` beside each (the
    Python frames, parse/hlo_frames) stay. Returns (files removed, bytes removed)."""
    keep = {p.name for p in dumps} | {p.name.removesuffix(".txt") + ".hlo.pb" for p in dumps}
    removed = size = 0
    for path in folder.iterdir():
        if path.name in keep or not path.is_file():
            continue
        try:
            size += path.stat().st_size
            path.unlink()
            removed += 1
        except OSError:
            continue  # a file another host of a shared folder removed first, or read-only
    return removed, size


def ingest_run(run_dir: str | Path) -> list[str]:
    """Ingest what the run's processes left; returns one line per thing found (for the user)."""
    run_dir = Path(run_dir)
    run = Run(run_dir)
    add_program_folders(run.meta)  # the HLO stacks' user lines: this process did not run it
    notes: list[str] = []
    meta: dict[str, Any] = {}
    host = file_host() if is_pod_run(run_dir) else None
    files = own_xplanes(run_dir, host)
    if files:
        traces = trace_ingest.load_traces(files, steps=traced_steps(run), host=host)
        trace_ingest.write(run, traces, f"{file_host()}-{os.getpid()}")
        notes += traces.summary + [
            f"cannot read trace {r['path']}: {r['reason']}" for r in traces.refused
        ]
        meta.update({k: v for k, v in traces.meta.items() if k != "trace_hosts"})
        meta["trace_events"] = traces.rows("trace_events")
    hlo = layout.hlo_dir(run_dir, host)
    dumps = dump_files(hlo, DUMP_STAGES) if hlo.is_dir() else []
    if dumps:
        count, refused = ingest_hlo(run, dumps, host=file_host(), pid=0, rank=0)
        notes.append(f"{count} HLO module(s) parsed from {hlo}")
        notes += [f"cannot parse HLO {r['path']}: {r['reason']}" for r in refused]
        meta["hlo_modules"] = count
        removed, size = keep_only_read(hlo, dumps)
        if removed:
            notes.append(
                f"{removed} dump file(s) tpuscope does not read removed from {hlo} "
                f"({size / 2**20:.1f} MB: LLVM IR, object code, buffer assignments, other passes)"
            )
    if meta:
        run.update_meta(device_view=meta)
    return notes
