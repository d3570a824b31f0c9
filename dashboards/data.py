"""The dashboard's only door to the disk: validated run ids and cached table reads.

Every path the dashboard opens is built here from the store root and a run id
that passed `is_valid_run_id` (no separators, no `..`), so no URL or callback
input can name a file outside the store. Tables are cached per run and
re-read only when their part files change, so a live run (new parts every 2 s)
shows new steps on the next page load while a finished one is read once.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from tpuscope.detect.registry import order
from tpuscope.detect.run_analysis import current
from tpuscope.schema import TABLES, Finding
from tpuscope.store import Run, RunStore, read_meta, read_table
from tpuscope.store.parts import read_part
from tpuscope.store.run import ANALYSIS_FILE
from tpuscope.store.runstore import is_valid_run_id

# Tables other parts of tpuscope add (device view); read when present even if this
# version's schema module does not list them yet.
OPTIONAL_TABLES = ("hlo_modules", "hlo_ops", "trace_events", "device_steps", "call_sites", "retraces",
                   "xprof_overview", "xprof_ops")
# Big tables keep dictionary columns as pandas categoricals (1M strings as objects is slow).
_KEEP_CATEGORIES = {"trace_events"}


class RunNotFound(LookupError):
    """A run id that is malformed or not in the store; the message is shown to the user."""


def _signature(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """Names, mtimes and sizes of a folder's part files: changes whenever a writer flushes."""
    if not folder.is_dir():
        return ()
    entries = []
    with os.scandir(folder) as scan:
        for entry in scan:
            if entry.name.startswith("part-") and entry.name.endswith(".parquet"):
                stat = entry.stat()
                entries.append((entry.name, stat.st_mtime_ns, stat.st_size))
    return tuple(sorted(entries))


def _file_signature(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:
        return (0, 0)
    return (stat.st_mtime_ns, stat.st_size)


def _meta_signature(run_dir: Path) -> tuple[Any, ...]:
    meta = run_dir / "meta.json"
    procs = run_dir / "procs"
    procs_sig = tuple(sorted((p.name, p.stat().st_mtime_ns) for p in procs.glob("*.json"))) if procs.is_dir() else ()
    hosts = run_dir / "hosts"  # a run of many hosts: each host's launcher meta
    hosts_sig = tuple(sorted((p.name, p.stat().st_mtime_ns) for p in hosts.glob("*.json"))) if hosts.is_dir() else ()
    return (meta.stat().st_mtime_ns if meta.is_file() else 0, procs_sig, hosts_sig)


def _to_frame(table: pa.Table, keep_categories: bool) -> pd.DataFrame:
    """Strings as Python objects (as tpuscope.store does), except in the big tables.

    pandas 3 reads strings as Arrow arrays, whose per-element iteration (which the
    summary code does) is ~10x slower than objects'; categoricals stay as they are
    in trace_events, where a million rows of objects would be.
    """
    frame = table.to_pandas()
    if not keep_categories:
        for col in frame.columns:
            if isinstance(frame[col].dtype, pd.CategoricalDtype | pd.StringDtype):
                frame[col] = frame[col].astype(object)
    return frame


def _read_parts(folder: Path) -> pa.Table | None:
    """Union of a table's parts for tables without a schema in this version."""
    parts = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
    if not parts:
        return None
    tables = [t for t in map(read_part, parts) if t is not None]  # a damaged part is skipped, named
    return pa.concat_tables(tables, promote_options="default") if tables else None


def when(ns: Any) -> str:
    """Local wall-clock time of an int64 ns timestamp, or '-'."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9)) if ns else "-"


def ended(meta: dict[str, Any]) -> str:
    """How a run ended, as the user reads it: 'finished', 'failed (exit 3)', 'running'."""
    status = str(meta.get("status") or "unknown")
    code = meta.get("exit_code")
    return f"{status} (exit {code})" if code not in (None, 0) and status != "finished" else status


class StoreData:
    """Read-only, cached access to the runs of one store."""

    def __init__(self, root: str | os.PathLike[str] | None = None, cache_size: int = 64) -> None:
        self.store = RunStore(root)
        self.root = self.store.root
        self._cache: OrderedDict[tuple[str, str], tuple[Any, Any]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    # --- paths -----------------------------------------------------------------
    def run_dir(self, run_id: Any) -> Path:
        """The folder of a run id taken from a URL or callback; raises RunNotFound otherwise."""
        if not isinstance(run_id, str) or not is_valid_run_id(run_id):
            raise RunNotFound(f"not a valid run id: {str(run_id)[:80]!r}")
        path = self.root / run_id
        if not (path / "meta.json").is_file():
            raise RunNotFound(f"no run {run_id!r} in the store {self.root}")
        return path

    def run_ids(self) -> list[str]:
        """Every run id, newest first."""
        return [m["run_id"] for m in self.store.list_runs() if is_valid_run_id(str(m.get("run_id", "")))]

    def files(self, run_id: str, patterns: Iterable[str]) -> list[Path]:
        """Files inside the run folder matching glob patterns (for download links)."""
        run_dir = self.run_dir(run_id).resolve()
        found: set[Path] = set()
        for pattern in patterns:
            for path in run_dir.glob(pattern):
                if path.is_file() and run_dir in path.resolve().parents:
                    found.add(path)
        return sorted(found)

    # --- cache -----------------------------------------------------------------
    def _cached(self, key: tuple[str, str], signature: Any, load: Callable[[], Any]) -> Any:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] == signature:
                self._cache.move_to_end(key)
                return hit[1]
        value = load()
        with self._lock:
            self._cache[key] = (signature, value)
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return value

    # --- tables ----------------------------------------------------------------
    def meta(self, run_id: str) -> dict[str, Any]:
        run_dir = self.run_dir(run_id)
        return self._cached((run_id, "meta"), _meta_signature(run_dir), lambda: read_meta(run_dir))

    def has_table(self, run_id: str, name: str) -> bool:
        return bool(_signature(self.run_dir(run_id) / name))

    def table(self, run_id: str, name: str) -> pd.DataFrame:
        """A run's table as a DataFrame (empty with the schema's columns when absent)."""
        if name not in TABLES and name not in OPTIONAL_TABLES:
            raise KeyError(f"unknown table {name!r}")
        run_dir = self.run_dir(run_id)
        keep = name in _KEEP_CATEGORIES

        def load() -> pd.DataFrame:
            if name in TABLES:
                return _to_frame(read_table(run_dir, name), keep)
            table = _read_parts(run_dir / name)
            return pd.DataFrame() if table is None else _to_frame(table, keep)

        return self._cached((run_id, name), _signature(run_dir / name), load)

    def derived(self, run_id: str, key: str, tables: tuple[str, ...], compute: Callable[[], Any]) -> Any:
        """A value computed from some of a run's tables (a figure, an aggregate), cached until
        one of those tables changes. Callers must not mutate what they get back."""
        run_dir = self.run_dir(run_id)
        signature = tuple(_signature(run_dir / name) for name in tables)
        return self._cached((run_id, f"derived:{key}"), signature, compute)

    def findings(self, run_id: str) -> list[Finding]:
        """Stored findings, most severe then costliest first, as every surface lists them
        (the dashboard never re-runs detectors on an ended run)."""
        def load() -> list[Finding]:
            items = [Finding.from_row(row) for row in self.table(run_id, "findings").to_dict("records")]
            for item in items:  # a None location comes back from Parquet as NaN
                if not isinstance(item.location, str) or not item.location:
                    item.location = None
            return sorted(items, key=order)

        return self.derived(run_id, "findings", ("findings",), load)

    def summary(self, run_id: str) -> dict[str, Any]:
        """The run's one analysis (tpuscope.detect.run_analysis: written at the run's end, computed in
        memory for a run still going) plus the counts the pages show."""
        run_dir = self.run_dir(run_id)
        names = ("steps", "compiles", "fallbacks", "findings")
        signature = (_meta_signature(run_dir), _file_signature(run_dir / ANALYSIS_FILE),
                     *(_signature(run_dir / n) for n in names))
        return self._cached((run_id, "summary"), signature, lambda: self._summarize(run_id))

    def _summarize(self, run_id: str) -> dict[str, Any]:
        meta = self.meta(run_id)
        report = current(Run(self.run_dir(run_id)))
        out = dict(report.summary)
        ops = out.get("fallback_ops") or []
        out["fallback_op_kinds"] = len(ops)
        out["fallback_count"] = int(sum(op["count"] for op in ops))
        out["findings"] = len(report.findings)
        out["start_ns"] = meta.get("start_ns")
        out["ended"] = ended(meta)
        return out

    def columns(self, run_id: str, name: str, columns: list[str]) -> pd.DataFrame:
        """Some columns of a table, read without the others (the Runs page reads 6 of ~40)."""
        run_dir = self.run_dir(run_id)
        signature = _signature(run_dir / name)

        def load() -> pd.DataFrame:
            read = (read_part(run_dir / name / part, columns=columns) for part, _, _ in signature)
            parts = [t for t in read if t is not None]  # a damaged part is skipped, named
            if not parts:
                return pd.DataFrame(columns=columns)
            return _to_frame(pa.concat_tables(parts, promote_options="default"), name in _KEEP_CATEGORIES)

        return self._cached((run_id, f"{name}:{','.join(columns)}"), signature, load)

    def header(self, run_id: str) -> dict[str, Any]:
        """Who the run is, from meta alone: name, backend, device, how it ended, command."""
        meta = self.meta(run_id)
        procs = meta.get("processes", [])
        return {
            "run_id": run_id, "name": meta.get("name"), "command": meta.get("command"), "ended": ended(meta),
            "backend": next((p["backend"] for p in procs if p.get("backend")), meta.get("backend")),
            "device_kind": next((p["device_kind"] for p in procs if p.get("device_kind")), meta.get("device_kind")),
        }

    def brief(self, run_id: str) -> dict[str, Any]:
        """The Runs page's figures: the run's summary (a JSON file once the run has ended)."""
        return {**self.header(run_id), **self.summary(run_id)}

    def run_rows(self) -> list[dict[str, Any]]:
        """One row per run for the Runs page; a damaged run gets a row that says so."""
        rows = []
        for run_id in self.run_ids():
            try:
                rows.append(runs_row(self.brief(run_id)))
            except Exception as exc:  # one unreadable run must not hide the others
                rows.append({"run_id": run_id, "name": run_id, "ended": f"unreadable: {exc}"[:120]})
        return rows


def runs_row(summary: dict[str, Any]) -> dict[str, Any]:
    """The Runs page's columns from a summary (plain JSON types for the grid)."""
    sev = summary.get("findings_by_severity", {})
    p50 = summary.get("step_time_p50_ms")
    return {
        "run_id": summary["run_id"],
        "name": summary.get("name") or summary["run_id"],
        "started": when(summary.get("start_ns")),
        "backend": summary.get("backend") or "-",
        "device": summary.get("device_kind") or "-",
        "steps": summary["steps"],
        "p50_ms": None if p50 is None else round(p50, 3),
        "recompiles": summary["recompiles"],
        "fallbacks": summary["fallback_count"],
        "high": sev.get("high", 0),
        "medium": sev.get("medium", 0),
        "low": sev.get("low", 0),
        "ended": summary.get("ended") or "-",
    }
