"""The one map of a run folder: every name inside a run is spelled here and nowhere else.

    <run>/meta.json                               the launcher's view of the run
    <run>/procs/<host>-<pid>.json                 each profiled process's own view
    <run>/analysis.json                           the summary the last analysis wrote
    <run>/<table>/part-<tag>-<seq>.parquet        rows, appended by any number of processes
    <run>/<table>/part-<tag>-compact-<seq>.parquet   a table's parts merged when the run ended
    <run>/debug/pt_xla_debug-<host>-<pid>.txt     PT_XLA_DEBUG text tpuscope asked for
    <run>/hlo/                                    XLA dumps (--deep); a pod's in hlo/<host>/
    <run>/trace/<backend>-<host>-<pid>/           each process's profiler traces (xplane.pb)

A name starting with a dot is a file being written; readers never look at it.
"""

from __future__ import annotations

from pathlib import Path

META = "meta.json"
META_CORRUPT = "meta.json.corrupt"
PROCS = "procs"
ANALYSIS = "analysis.json"
DEBUG = "debug"
HLO = "hlo"
TRACE = "trace"
FINDINGS_PART = "part-analysis.parquet"  # findings: one part, replaced by each analysis
COMPACT_MARK = "-compact-"
# Files the run's end may still add or change (copied to an object store when the run ends).
ARTIFACT_FOLDERS = (DEBUG, HLO, TRACE)


def hlo_dir(run_dir: Path, host: str | None = None) -> Path:
    """Where `--deep` has XLA dump a run's HLO: `<run>/hlo`, or `<run>/hlo/<host>` for a host of
    a pod (a shared folder: XLA names its dumps module_0001..., the same on every host, so the
    hosts would overwrite each other's files and each would ingest the others')."""
    return Path(run_dir) / HLO / host if host else Path(run_dir) / HLO


def trace_dir(run_dir: Path, backend: str, host: str, pid: int) -> Path:
    """Where a process's profiler window writes its xplane files: a folder named by backend,
    host and pid, so the hosts of a pod in a shared folder never write into each other's."""
    return Path(run_dir) / TRACE / f"{backend}-{host}-{pid}"


def xplane_files(root: str | Path) -> list[Path]:
    """Every *.xplane.pb under a folder, in name order (a profiler's sessions are named by when
    they ran): a process's trace folder, or any TensorBoard log dir (plugins/profile/<session>/);
    a file is itself. The collectors' profiler window and `tpuscope import` both list them here."""
    root = Path(root)
    if root.is_file():
        return [root]
    return sorted(root.rglob("*.xplane.pb")) if root.is_dir() else []


def trace_host(folder: str) -> str | None:
    """The host a trace folder's name carries (`<backend>-<host>-<pid>`: the backend has no
    dash, the pid is read from the right, so a host with dashes stays whole); None for
    another shape (xplanes a user or an importer put there)."""
    backend, sep, rest = folder.partition("-")
    host, sep2, pid = rest.rpartition("-")
    return host if backend and sep and sep2 and host and pid.isdigit() else None


def proc_file(host: str, pid: int | str) -> str:
    return f"{PROCS}/{host}-{pid}.json"


def debug_file(host: str, pid: int | str) -> str:
    return f"{DEBUG}/pt_xla_debug-{host}-{pid}.txt"


def part_name(tag: str, seq: int) -> str:
    return f"part-{tag}-{seq:06d}.parquet"


def compact_name(tag: str, seq: int) -> str:
    return f"part-{tag}{COMPACT_MARK}{seq:06d}.parquet"


def is_part(name: str) -> bool:
    """A table's part file that readers take (not a file being written)."""
    return name.startswith("part-") and name.endswith(".parquet")


def is_compact(name: str) -> bool:
    return is_part(name) and COMPACT_MARK in name
