"""The dashboard's only door to the store: validated run ids and cached table reads.

No other module of tpuscope.dashboards imports tpuscope.store (tests/test_dashboard_data.py
checks): the pages and their DuckDB reductions (series.py, aggregates.py, trace_view.py) read
through `StoreData`'s methods (`table`, `columns`, `query`, `duckdb`, `files`), the zoo page
through `sweep_records`, and `tpuscope dashboard` checks its store with `check_store`.

Every run the dashboard opens is `store.Run` (the one reader of run folders, local or in an
object store) at the store root joined with a run id that passed `is_valid_run_id` (no
separators, no `..`), so no URL or callback input can name a file outside the store.
Tables are cached per run and re-read only when their part files change (a listing, one
request per table on an object store), so a live run (new parts every 2 s) shows new steps
on the next page load while a finished one is read once.
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
from duckdb import DuckDBPyConnection

from tpuscope.detect.registry import order
from tpuscope.detect.run_analysis import RunReport, current, stored_findings, stored_summary
from tpuscope.schema import TABLES, Finding
from tpuscope.store import Run, RunStore, layout, read_meta, sql
from tpuscope.store.files import StoreError, is_valid_run_id
from tpuscope.store.location import Location, LocationError
from tpuscope.store.run import table_to_frame

# Tables other parts of tpuscope add (device view), all in the schema module now.
OPTIONAL_TABLES = (
    "hlo_modules",
    "hlo_ops",
    "trace_events",
    "device_steps",
    "call_sites",
    "retraces",
    "xprof_overview",
    "xprof_ops",
)
# Tables whose change makes a run's summary stale (any table part newer than analysis.json
# does; these are the ones a summary is computed from, and findings, which analysis writes).
SUMMARY_TABLES = ("steps", "compiles", "fallbacks", "metrics", "findings", "call_sites", "retraces")
# Big tables keep dictionary columns as pandas categoricals (1M strings as objects is slow).
_KEEP_CATEGORIES = {"trace_events"}
LOOP_COLUMNS = ("host", "pid", "rank", "step", "boundary")  # what the loop's end is judged from


class RunNotFound(LookupError):
    """A run id that is malformed or not in the store; the message is shown to the user."""


class StoreMissing(LookupError):
    """A store root that is not there, not a folder, or not reachable; the message says which."""


def check_store(root: str | os.PathLike[str]) -> None:
    """A store that is there and a folder (a local path or an fsspec URL); StoreMissing else."""
    try:
        loc = Location.of(root)
        there, folder = loc.fs.exists(loc.path), loc.is_dir()
    except (LocationError, OSError) as exc:
        raise StoreMissing(str(exc)) from None
    if not there:
        raise StoreMissing(
            f"no run store at {root} (make a run first: tpuscope run --store {root} python train.py)"
        )
    if not folder:
        raise StoreMissing(f"the store {root} is not a folder")


def _signature(run: Run, name: str) -> tuple[tuple[str, int, int], ...]:
    """Names, mtimes and sizes of a table's part files: changes whenever a writer flushes."""
    return tuple((e.name, e.mtime_ns, e.size) for e in run.parts(name))


def _file_signature(run: Run, name: str) -> tuple[int, int]:
    """A file's mtime and size: one stat in a local run (listing the folder to find it cost the
    Runs page of 200 runs ~2,000 fsspec calls), the folder's listing in an object store."""
    if run.local:
        return _stat(run.path / name)
    entry = next((e for e in run.loc.entries() if e.name == name), None)
    return (0, 0) if entry is None else (entry.mtime_ns, entry.size)


def _meta_signature(run: Run) -> tuple[Any, ...]:
    """meta.json's mtime and size and the process files': in a local run, the procs folder's
    mtime stands for them (each is written by a rename into it: two stats, not one per file)."""
    if run.local:  # and a pod's hosts folder: each host's launcher keeps its own meta there
        return (
            _stat(run.path / layout.META),
            _stat(run.path / layout.PROCS),
            _stat(run.path / "hosts"),
        )
    procs = tuple((e.name, e.mtime_ns) for e in (run.loc / layout.PROCS).entries())
    return (_file_signature(run, layout.META), procs)


def _stat(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:
        return (0, 0)
    return (stat.st_mtime_ns, stat.st_size)


def _table_stamp(run: Run, name: str) -> Any:
    """What changes when a table does: a local table folder's mtime (parts appear, are replaced
    and removed by renames: one stat, not one per part of a long live run), else its listing."""
    if run.local:
        return _stat(run.path / name)[0]
    return _signature(run, name)


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
    """Read-only, cached access to the runs of one store (a folder or an fsspec URL)."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        cache_size: int = 64,
        small_cache_size: int = 8192,
    ) -> None:
        self.store = RunStore(root)
        self.root = self.store.root
        # Two LRU caches: tables and figures (big, few) and per-run metas and summaries (a few KB
        # each, one pair per run: the Runs page of 200 runs must not evict its own entries).
        self._cache: OrderedDict[tuple[str, str], tuple[Any, Any]] = OrderedDict()
        self._small: OrderedDict[tuple[str, str], tuple[Any, Any]] = OrderedDict()
        self._cache_size = cache_size
        self._small_size = small_cache_size
        self._lock = threading.Lock()

    # --- runs ------------------------------------------------------------------
    def run(self, run_id: Any) -> Run:
        """The run of an id taken from a URL or callback; raises RunNotFound otherwise."""
        if not isinstance(run_id, str) or not is_valid_run_id(run_id):
            raise RunNotFound(f"not a valid run id: {str(run_id)[:80]!r}")
        loc = self.store.loc / run_id
        if not (loc / layout.META).is_file():
            raise RunNotFound(f"no run {run_id!r} in the store {self.root}")
        return Run(loc)

    def run_dir(self, run_id: Any) -> Path | Location:
        """The run's folder (a Path when the store is local)."""
        return self.run(run_id).path

    def run_ids(self) -> list[str]:
        """Every run id, newest first (metas cached: a request re-reads only runs that changed)."""
        metas = []
        for loc in self.store.run_dirs():
            if not is_valid_run_id(loc.name):
                continue
            try:
                metas.append(self.meta(loc.name))
            except (StoreError, RunNotFound) as exc:
                _warn_once(f"skipped a run: {exc}")
        return [
            m["run_id"] for m in sorted(metas, key=lambda m: m.get("start_ns") or 0, reverse=True)
        ]

    def files(self, run_id: str, patterns: Iterable[str]) -> dict[str, Path]:
        """Files inside a local run folder matching glob patterns (for download links): their
        names in the run folder (posix) -> paths under `run_dir(run_id)`, in name order; none in
        an object store. A store reached through a symlink keeps its own path (the containment
        check alone resolves links: none may lead out of the run folder)."""
        run = self.run(run_id)
        if not run.local:
            return {}
        run_dir = Path(run.path)
        inside = run_dir.resolve()
        found: set[Path] = set()
        for pattern in patterns:
            for path in run_dir.glob(pattern):
                if path.is_file() and inside in path.resolve().parents:
                    found.add(path)
        return {path.relative_to(run_dir).as_posix(): path for path in sorted(found)}

    # --- cache -----------------------------------------------------------------
    def _cached(
        self, key: tuple[str, str], signature: Any, load: Callable[[], Any], small: bool = False
    ) -> Any:
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

    def clear(self) -> None:
        """Forget everything read (the next request reads the store as a fresh server does)."""
        with self._lock:
            self._cache.clear()
            self._small.clear()

    # --- tables ----------------------------------------------------------------
    def meta(self, run_id: str) -> dict[str, Any]:
        run = self.run(run_id)
        return self._cached(
            (run_id, "meta"), _meta_signature(run), lambda: read_meta(run.loc), small=True
        )

    def has_table(self, run_id: str, name: str) -> bool:
        return self.run(run_id).has_table(name)

    def table(self, run_id: str, name: str) -> pd.DataFrame:
        """A run's table as a DataFrame (empty with the schema's columns when absent)."""
        if name not in TABLES:
            raise KeyError(f"unknown table {name!r}")
        run = self.run(run_id)
        keep = name in _KEEP_CATEGORIES
        return self._cached(
            (run_id, name), _signature(run, name), lambda: run.table(name, keep_categories=keep)
        )

    def derived(
        self, run_id: str, key: str, tables: tuple[str, ...], compute: Callable[[], Any]
    ) -> Any:
        """A value computed from some of a run's tables (a figure, an aggregate), cached until
        one of those tables changes. Callers must not mutate what they get back."""
        run = self.run(run_id)
        signature = tuple(_signature(run, name) for name in tables)
        return self._cached((run_id, f"derived:{key}"), signature, compute)

    def query(self, run_id: str, text: str, tables: list[str]) -> pa.Table:
        """SQL over some of a run's tables (each a view named after it), as an Arrow table:
        the door the DuckDB reductions (series.py, aggregates.py) read the store through."""
        return sql.query(self.run(run_id).loc, text, tables=tables)

    def duckdb(self, run_id: str, tables: list[str]) -> DuckDBPyConnection:
        """A DuckDB connection with views over some of a run's tables, for several statements
        over one listing; the caller closes it (`with data.duckdb(...) as con:`)."""
        return sql.views(self.run(run_id).loc, tables)

    def compiles_judged(self, run_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The compiles as the analysis judges them: in time order with their graph family and
        verdict (`RunTables.families`, the loop's end from the steps), and each one's closest
        earlier compile and what changed (`detect.compile_changes.compile_diffs`). The rule's own
        functions, so the pages say what the findings say; cached until a table changes."""

        def build() -> tuple[pd.DataFrame, pd.DataFrame]:
            from tpuscope.detect import RunTables
            from tpuscope.detect.compile_changes import compile_diffs

            steps = self.columns(run_id, "steps", list(LOOP_COLUMNS))
            tables = RunTables(
                meta=self.meta(run_id),
                steps=steps,
                compiles=self.table(run_id, "compiles"),
                fallbacks=pd.DataFrame(),
                metrics=pd.DataFrame(),
            )
            families = tables.families.reset_index(drop=True)
            tables.__dict__["families"] = families
            return families, compile_diffs(tables)

        return self.derived(run_id, "compiles-judged", ("compiles", "steps"), build)

    def findings(self, run_id: str) -> list[Finding]:
        """Stored findings, most severe then costliest first, as every surface lists them
        (the dashboard never re-runs detectors on an ended run)."""
        run = self.run(run_id)
        return self._cached(
            (run_id, "derived:findings"),
            _signature(run, "findings"),
            lambda: stored_findings(run),
            small=True,
        )

    def _analysis_signature(self, run: Run) -> tuple[Any, ...]:
        return (
            _meta_signature(run),
            _file_signature(run, layout.ANALYSIS),
            *(_table_stamp(run, n) for n in SUMMARY_TABLES),
        )

    def _report(self, run_id: str) -> RunReport:
        """The run's one analysis (tpuscope.detect.run_analysis: written at the run's end, computed
        in memory for a run still going), cached until the run's rows, meta or analysis change."""
        run = self.run(run_id)
        return self._cached((run_id, "report"), self._analysis_signature(run), lambda: current(run))

    def live_findings(self, run_id: str) -> list[Finding]:
        """The findings of the analysis so far (a live run has none stored yet)."""
        return sorted(self._report(run_id).findings, key=order)

    def summary(self, run_id: str) -> dict[str, Any]:
        """The run's one analysis (see _report) plus the counts the pages show."""
        run = self.run(run_id)
        return self._cached(
            (run_id, "summary"),
            self._analysis_signature(run),
            lambda: self._summarize(run_id),
            small=True,
        )

    def _summarize(self, run_id: str) -> dict[str, Any]:
        """The written summary of an ended run (analysis.json, no table read; findings counted
        from it), else the analysis computed now (a live run, or one changed since)."""
        meta = self.meta(run_id)
        run = self.run(run_id)
        run.__dict__["meta"] = meta  # read once (cached above), not again by Run.meta
        stored = stored_summary(run)
        if stored is None:
            report = self._report(run_id)
            summary, findings = report.summary, len(report.findings)
        else:
            summary, findings = stored, stored.findings_count
        out = {**summary.to_dict(), "findings": findings}
        out["fallback_op_kinds"] = len(summary.fallback_ops)
        out["fallback_count"] = summary.fallback_count
        out["start_ns"] = meta.get("start_ns")
        out["ended"] = ended(meta)
        return out

    def columns(
        self, run_id: str, name: str, columns: list[str], categories: bool = False
    ) -> pd.DataFrame:
        """Some columns of a table, read without the others (the timeline reads 4 of 15 step
        columns); with `categories`, dictionary columns stay pandas categoricals (2M op names
        as Python strings cost 0.5 s to make, and their groupbys more)."""
        run = self.run(run_id)

        def load() -> pd.DataFrame:
            return table_to_frame(
                run.arrow(name, columns=columns), categories or name in _KEEP_CATEGORIES
            )

        key = f"{name}:{','.join(columns)}" + (":categories" if categories else "")
        return self._cached((run_id, key), _signature(run, name), load)

    def header(self, run_id: str) -> dict[str, Any]:
        """Who the run is, from meta alone: name, backend, device, how it ended, command."""
        meta = self.meta(run_id)
        procs = meta.get("processes", [])
        return {
            "run_id": run_id,
            "name": meta.get("name"),
            "command": meta.get("command"),
            "ended": ended(meta),
            "backend": next((p["backend"] for p in procs if p.get("backend")), meta.get("backend")),
            "device_kind": next(
                (p["device_kind"] for p in procs if p.get("device_kind")), meta.get("device_kind")
            ),
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

    def sweep_records(self) -> list[dict[str, Any]]:
        """The cell records of the store's `tpuscope sweep` (zoo/table.load_records), for the
        Zoo page; none when the store has no sweep."""
        from tpuscope.zoo import table  # the zoo's code loads only for its page

        return table.load_records(self.root)


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
