"""The dashboard's only door to the disk: validated run ids and cached table reads.

Every path the dashboard opens is built here from the store root and a run id
that passed `is_valid_run_id` (no separators, no `..`), so no URL or callback
input can name a file outside the store. Tables are cached per run and
re-read only when their part files change, so a live run (new parts every 2 s)
shows new steps on the next page load while a finished one is read once.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from tpuscope.detect.registry import order
from tpuscope.detect.run_analysis import RunReport, current, stored_summary
from tpuscope.schema import TABLES, Finding
from tpuscope.store import Run, RunStore, read_meta, read_table
from tpuscope.store.parts import read_part
from tpuscope.store.run import ANALYSIS_FILE
from tpuscope.store.runstore import StoreError, is_valid_run_id

# Tables other parts of tpuscope add (device view); read when present even if this
# version's schema module does not list them yet.
OPTIONAL_TABLES = ("hlo_modules", "hlo_ops", "trace_events", "device_steps", "call_sites", "retraces",
                   "xprof_overview", "xprof_ops")
# Tables whose change makes a run's summary stale (any table part newer than analysis.json
# does; these are the ones a summary is computed from, and findings, which analysis writes).
SUMMARY_TABLES = ("steps", "compiles", "fallbacks", "metrics", "findings", "call_sites", "retraces")
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
    """meta.json's mtime and size and the procs folder's mtime: every process file is written
    by a rename into that folder, which changes its mtime (two stats, not one per file)."""
    return (_file_signature(run_dir / "meta.json"), _file_signature(run_dir / "procs"))


def _folder_mtime(folder: Path) -> int:
    """A table folder's mtime: parts appear, are replaced and removed by renames, each of which
    changes it. One stat instead of one per part (a long live run writes thousands of parts)."""
    try:
        return folder.stat().st_mtime_ns
    except OSError:
        return 0


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


_SAID: set[str] = set()


def _warn_once(message: str) -> None:
    """On stderr once per process (the dashboard lists runs on every Runs-page request)."""
    if message not in _SAID:
        _SAID.add(message)
        print(f"tpuscope: {message}", file=sys.stderr)


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

    def __init__(self, root: str | os.PathLike[str] | None = None, cache_size: int = 64,
                 small_cache_size: int = 8192) -> None:
        self.store = RunStore(root)
        self.root = self.store.root
        # Two LRU caches: tables and figures (big, few) and per-run metas and summaries (a few KB
        # each, one pair per run: the Runs page of 200 runs must not evict its own entries).
        self._cache: OrderedDict[tuple[str, str], tuple[Any, Any]] = OrderedDict()
        self._small: OrderedDict[tuple[str, str], tuple[Any, Any]] = OrderedDict()
        self._cache_size = cache_size
        self._small_size = small_cache_size
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
        """Every run id, newest first (metas cached: a request re-reads only runs that changed)."""
        metas = []
        for path in self.store.run_dirs():
            if not is_valid_run_id(path.name):
                continue
            try:
                metas.append(self.meta(path.name))
            except StoreError as exc:
                _warn_once(f"skipped a run: {exc}")
        return [m["run_id"] for m in sorted(metas, key=lambda m: m.get("start_ns") or 0, reverse=True)]

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
    def _cached(self, key: tuple[str, str], signature: Any, load: Callable[[], Any], small: bool = False) -> Any:
        cache, size = (self._small, self._small_size) if small else (self._cache, self._cache_size)
        with self._lock:
            hit = cache.get(key)
            if hit is not None and hit[0] == signature:
                cache.move_to_end(key)
                return hit[1]
        value = load()
        with self._lock:
            cache[key] = (signature, value)
            cache.move_to_end(key)
            while len(cache) > size:
                cache.popitem(last=False)
        return value

    # --- tables ----------------------------------------------------------------
    def meta(self, run_id: str) -> dict[str, Any]:
        run_dir = self.run_dir(run_id)
        return self._cached((run_id, "meta"), _meta_signature(run_dir), lambda: read_meta(run_dir), small=True)

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

        run_dir = self.run_dir(run_id)
        return self._cached((run_id, "derived:findings"), _signature(run_dir / "findings"), load, small=True)

    def _report(self, run_id: str) -> RunReport:
        """The run's one analysis (tpuscope.detect.run_analysis: written at the run's end, computed
        in memory for a run still going), cached until the run's rows, meta or analysis change."""
        run_dir = self.run_dir(run_id)
        signature = (_meta_signature(run_dir), _file_signature(run_dir / ANALYSIS_FILE),
                     *(_folder_mtime(run_dir / n) for n in SUMMARY_TABLES))
        return self._cached((run_id, "report"), signature, lambda: current(Run(run_dir)))

    def live_findings(self, run_id: str) -> list[Finding]:
        """The findings of the analysis so far (a live run has none stored yet)."""
        findings = sorted(self._report(run_id).findings, key=order)
        for item in findings:
            if not isinstance(item.location, str) or not item.location:
                item.location = None
        return findings

    def summary(self, run_id: str) -> dict[str, Any]:
        """The run's one analysis (see _report) plus the counts the pages show."""
        run_dir = self.run_dir(run_id)
        signature = (_meta_signature(run_dir), _file_signature(run_dir / ANALYSIS_FILE),
                     *(_folder_mtime(run_dir / n) for n in SUMMARY_TABLES))
        return self._cached((run_id, "summary"), signature, lambda: self._summarize(run_id), small=True)

    def _summarize(self, run_id: str) -> dict[str, Any]:
        """The written summary of an ended run (analysis.json, no table read; findings counted
        from it), else the analysis computed now (a live run, or one changed since)."""
        meta = self.meta(run_id)
        run = Run(self.run_dir(run_id))
        run.__dict__["meta"] = meta  # read once (cached above), not again by Run.meta
        out = stored_summary(run)
        if out is None:
            report = self._report(run_id)
            out = {**report.summary, "findings": len(report.findings)}
        else:
            out = {**out, "findings": int(sum((out.get("findings_by_severity") or {}).values()))}
        ops = out.get("fallback_ops") or []
        out["fallback_op_kinds"] = len(ops)
        out["fallback_count"] = int(sum(op["count"] for op in ops))
        out["start_ns"] = meta.get("start_ns")
        out["ended"] = ended(meta)
        return out

    def columns(self, run_id: str, name: str, columns: list[str], categories: bool = False) -> pd.DataFrame:
        """Some columns of a table, read without the others (the timeline reads 4 of 15 step
        columns); with `categories`, dictionary columns stay pandas categoricals (2M op names
        as Python strings cost 0.5 s to make, and their groupbys more)."""
        run_dir = self.run_dir(run_id)
        signature = _signature(run_dir / name)

        def load() -> pd.DataFrame:
            read = (read_part(run_dir / name / part, columns=columns) for part, _, _ in signature)
            parts = [t for t in read if t is not None]  # a damaged part is skipped, named
            if not parts:
                return pd.DataFrame(columns=columns)
            table = pa.concat_tables(parts, promote_options="default")
            return _to_frame(table, categories or name in _KEEP_CATEGORIES)

        key = f"{name}:{','.join(columns)}" + (":categories" if categories else "")
        return self._cached((run_id, key), signature, load)

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
        "live": summary.get("ended") == "running",
    }
