"""One run folder, local or in an object store: the only reader and writer of a run's
meta, tables, findings and analysis (the dashboard included).

Importing it is light (no pyarrow, pandas or schemas until a table is read or findings are
written): a profiled process opens its run here at start-up (collect/session.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpuscope.store import layout
from tpuscope.store.buffer import PartWriter
from tpuscope.store.location import Entry, Location
from tpuscope.store.runstore import RunStore, read_meta, update_meta

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from tpuscope.schema import Finding

ANALYSIS_FILE = layout.ANALYSIS
PARTS_DIGEST = "parts_digest"  # analysis.json's record of the parts it was computed from


def table_to_frame(
    table: pa.Table, keep_categories: bool = False, consume: bool = False
) -> pd.DataFrame:
    """Arrow -> pandas with strings as Python objects (easier to compare and filter; pandas 3
    reads strings as Arrow arrays, ~10x slower to iterate). `keep_categories` leaves
    dictionary columns as categoricals, for tables of millions of rows (trace_events).
    `consume` (a table nothing else holds) frees each Arrow column once converted, so the
    table and its frame are not both in memory whole (a pod's 6.4M step rows: ~0.6 GB)."""
    import pandas as pd  # not imported by `ls` or `query`: ~0.8 s of a command's start

    frame = table.to_pandas(self_destruct=True, split_blocks=True) if consume else table.to_pandas()
    for col in frame.columns:
        dtype = frame[col].dtype
        if (isinstance(dtype, pd.CategoricalDtype) and not keep_categories) or isinstance(
            dtype, pd.StringDtype
        ):
            frame[col] = frame[col].astype(object)
    return frame


class Run:
    """One run. Tables load on first use; `scan` and `query` read only what they ask for."""

    def __init__(self, path: str | os.PathLike[str] | Location) -> None:
        self.loc = Location.of(path)
        # a Path for a local run (callers join names and open files); the Location otherwise
        self.path: Any = self.loc.as_path() if self.loc.local else self.loc

    def reopen(self, path: str | os.PathLike[str] | Location) -> None:
        """Forget what was read and read `path` from now on (the run grew, or was shipped)."""
        self.__dict__.clear()
        self.__init__(path)  # type: ignore[misc]

    @classmethod
    def create(cls, store: str | os.PathLike[str] | Location | None, name: str, **meta: Any) -> Run:
        """A new run (its folder and meta.json). For an object store this is the local stage
        that `store.ship.Shipper` copies there."""
        return cls(RunStore(store).new_run(name, **meta))

    @property
    def run_id(self) -> str:
        return self.loc.name

    @property
    def local(self) -> bool:
        return self.loc.local

    def __truediv__(self, name: str) -> Location:
        return self.loc / name

    # -- meta -------------------------------------------------------------------------
    @cached_property
    def meta(self) -> dict[str, Any]:
        return read_meta(self.loc)

    def update_meta(self, **fields: Any) -> dict[str, Any]:
        self.__dict__.pop("meta", None)
        return update_meta(self.loc, **fields)

    def update_own_meta(self, host: str, **fields: Any) -> dict[str, Any]:
        """Merge fields into what this host owns of the run: its hosts/<host>.json in a run of
        many hosts (`--run-id`: meta.json is shared), else meta.json."""
        from tpuscope.store.pods import is_pod_run

        if self.local and is_pod_run(self.path):
            return self.update_host_meta(host, **fields)
        return self.update_meta(**fields)

    def update_host_meta(self, host: str, /, **fields: Any) -> dict[str, Any]:
        """Merge fields into hosts/<host>.json: one host's launcher in a run of many hosts."""
        from tpuscope.store.pods import update_host_meta

        return update_host_meta(self.path, host, **fields)

    def write_proc(self, host: str, pid: int | str, data: dict[str, Any]) -> None:
        """This process's own view of the run (procs/<host>-<pid>.json), written whole."""
        (self.loc / layout.proc_file(host, pid)).write_json_atomic(data)

    # -- writing rows and files (a local folder: object stores get a stage, store.ship) --
    def writer(self, tag: str | None = None, host: str | None = None) -> PartWriter:
        """A buffer of rows that flushes them as new part files of this run (named by `tag`,
        else by `host` and this process)."""
        return PartWriter(self.loc.as_path(), tag=tag, host=host)

    def write_arrow(self, table: str, part: str, data: pa.Table) -> int:
        """An Arrow table (trace events, imported tables) as the part file `part-<part>.parquet`
        of `table`, a row group at a time (store/row_groups.py); returns its rows."""
        from tpuscope.store.row_groups import write_row_groups_atomic

        write_row_groups_atomic(self.loc.as_path() / table / f"part-{part}.parquet", data)
        return data.num_rows

    def folder(self, name: str) -> Path:
        """A folder of the run's files (layout.DEBUG, HLO, TRACE) for tools that write there."""
        return self.loc.as_path() / name

    # -- tables -----------------------------------------------------------------------
    def parts(self, name: str) -> list[Entry]:
        """The part files readers take for one table (names, sizes, mtimes)."""
        from tpuscope.store.compact import active_parts

        return active_parts(self.loc / name)

    def has_table(self, name: str) -> bool:
        return bool(self.parts(name))

    def arrow(
        self,
        name: str,
        columns: Sequence[str] | None = None,
        where: str | None = None,
        warn: list[str] | None = None,
    ) -> pa.Table:
        """A table as Arrow, read by DuckDB: only `columns`, only the rows `where` keeps."""
        from tpuscope.store import sql

        return sql.scan(self.loc, name, columns=columns, where=where, warn=warn)

    def table(
        self,
        name: str,
        columns: Sequence[str] | None = None,
        where: str | None = None,
        keep_categories: bool = False,
    ) -> pd.DataFrame:
        from tpuscope.schema import TABLES

        if name not in TABLES:
            raise KeyError(f"unknown table {name!r}; tables: {', '.join(TABLES)}")
        return table_to_frame(self.arrow(name, columns, where), keep_categories, consume=True)

    def query(self, statement: str) -> pa.Table:
        """SQL over the run's tables, each a view named after it (DuckDB)."""
        from tpuscope.store import sql

        return sql.query(self.loc, statement)

    def __getattr__(self, name: str) -> pd.DataFrame:
        if name.startswith("_"):  # copy, pickle and hasattr probes: no schema import for them
            raise AttributeError(name)
        from tpuscope.schema import TABLES

        if name in TABLES:
            frame = self.table(name)
            self.__dict__[name] = frame
            return frame
        raise AttributeError(name)

    def compact(self, tag: str, host: str | None = None) -> int:
        """Merge each table's parts into one file per host (crash-safe, see store.compact);
        only `host`'s parts when given (a pod's host, while the others may still append)."""
        from tpuscope.store.compact import compact_run

        return compact_run(self.loc, tag, host=host)

    def reload(self) -> None:
        """Forget what was read, so the next access reads the folder as it is now (a run
        read while it was being written, or re-analysed)."""
        self.reopen(self.loc)

    # -- findings and analysis --------------------------------------------------------
    def findings_list(self) -> list[Finding]:
        """The stored findings, read with pyarrow alone: a table of a few rows, which `show`
        reads on every call, need not import DuckDB and pandas (~0.3 s of its start-up)."""
        from tpuscope.schema import TABLES, Finding
        from tpuscope.store.compact import read_parts

        rows = read_parts(self.loc / "findings", TABLES["findings"]).to_pylist()
        return [Finding.from_row(row) for row in rows]

    def write_findings(self, findings: list[Finding]) -> None:
        """Replace the run's findings (analysis is re-runnable, so one part, overwritten)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from tpuscope.schema import TABLES

        rows = [f.to_row() for f in sorted(findings, key=lambda f: -f.cost_s)]
        table = pa.Table.from_pylist(rows, schema=TABLES["findings"])
        folder = self.loc / "findings"
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        if folder.local:
            Path(folder.path).mkdir(exist_ok=True)
        (folder / layout.FINDINGS_PART).write_bytes_atomic(sink.getvalue().to_pybytes())
        for old in folder.entries():
            if layout.is_part(old.name) and old.name != layout.FINDINGS_PART:
                (folder / old.name).remove()
        self.__dict__.pop("findings", None)

    @property
    def analysis(self) -> dict[str, Any] | None:
        """The summary the last analysis wrote (tpuscope.detect.run_analysis) while it is current:
        None when there is none, or when the parts it was computed from are not the run's parts
        now. Current is decided by the listing of parts recorded in it (`parts_digest`), not by
        mtimes, which a copy or a checkout renews; mtimes are only the fast path (analysis.json
        newer than every table folder: nothing was added since, and no listing is needed)."""
        written = self._analysis_ns()
        stored = None if written is None else self.analysis_written()
        if written is None or stored is None:
            return None
        if self._newest_part_ns() <= written or stored.get(PARTS_DIGEST) == self.parts_digest():
            return stored
        return None

    def analysis_written(self) -> dict[str, Any] | None:
        """analysis.json as written, current or not (None when absent or unreadable)."""
        try:
            stored = json.loads((self.loc / layout.ANALYSIS).read_text())
        except (OSError, ValueError):
            return None
        return stored if isinstance(stored, dict) else None

    def parts_digest(self) -> str:
        """A digest of the listing of the run's table parts (names and sizes; findings, which
        the analysis writes, left out): what an analysis was computed from. A copy or a
        checkout keeps it; a part added, merged or removed changes it."""
        import hashlib

        from tpuscope.schema import TABLES

        listing = sorted(
            f"{name}/{e.name}\t{e.size}"
            for name in TABLES
            if name != "findings"
            for e in self.parts(name)
        )
        return hashlib.sha256("\n".join(listing).encode()).hexdigest()[:32]

    def _analysis_ns(self) -> int | None:
        """analysis.json's mtime, None when there is none (locally one stat, not a listing)."""
        if self.local:
            try:
                return (self.path / layout.ANALYSIS).stat().st_mtime_ns
            except OSError:
                return None
        entry = next((e for e in self.loc.entries() if e.name == layout.ANALYSIS), None)
        return None if entry is None else entry.mtime_ns

    def _newest_part_ns(self) -> int:
        """When a table but findings (which analysis writes) last changed. Locally each table
        folder's mtime: every part is renamed into its folder (store/parts.py, row_groups.py,
        compact.py), so a new, replaced or removed part moves the folder's mtime to at least
        its own, and one stat per table replaces a listing of every part (the Runs page and
        `ls` check hundreds of runs). Object stores have no folder mtimes: their parts' mtimes."""
        from tpuscope.schema import TABLES

        if self.local:
            return max(
                (_mtime_ns(self.path / name) for name in TABLES if name != "findings"), default=0
            )
        present = set(self.loc.folders())
        return max(
            (
                e.mtime_ns
                for name in TABLES
                if name != "findings" and name in present
                for e in (self.loc / name).entries()
                if e.name.endswith(".parquet")
            ),
            default=0,
        )

    def write_analysis(self, summary: dict[str, Any]) -> None:
        """Replace analysis.json, atomically (a reader never sees half a file); the summary
        records the digest of the parts it was computed from (PARTS_DIGEST: parts_digest(),
        taken before computing)."""
        data = json.dumps(summary, indent=1, sort_keys=True, default=str).encode()
        (self.loc / layout.ANALYSIS).write_bytes_atomic(data, make_folder=False)


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:  # no such table in this run
        return 0


def load_run(run: str | Path, store: str | Path | None = None) -> Run:
    """Open a run by id (in `store`, default ./tpuscope-runs or $TPUSCOPE_STORE), by path, or
    by URL (gs://bucket/runs/<id>)."""
    return Run(RunStore(store).resolve(run))
