"""Append-only Parquet part files: the unit of crash safety in the run store.

Each process buffers rows per table and writes them out as a new part file
(`<run>/<table>/part-<host>-<pid>-<seq>.parquet`): written under a dot-name, then
renamed into place, so readers never see half a file and a killed process loses
at most the rows since its last flush. Many processes can write one run at once
because no two share a part name.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tpuscope.schema import TABLES
from tpuscope.store.runstore import remove_quietly


def write_table_atomic(path: Path, table: pa.Table) -> None:
    """Write a Parquet file so that it appears whole or not at all (a full disk leaves no
    temp file). Only the table's folder is made: a run folder deleted mid-run stays deleted."""
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


class PartWriter:
    """Buffers rows of the run's tables in memory and flushes them as part files.

    Rows come as dicts (`append`, `extend`) or, where a step adds many rows of a few
    columns, column-wise (`extend_columns`: building one list per column costs a
    fraction of one dict per row, and this runs at every step of the program).
    A lock keeps a flush from taking half of a batch.
    """

    def __init__(self, run_dir: Path, tag: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.tag = tag or f"{socket.gethostname()}-{os.getpid()}"
        self._rows: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
        self._columns: dict[str, dict[str, list[Any]]] = {}
        self._seq = 0
        self._lock = threading.Lock()  # adding vs taking the buffers
        self._flush_lock = threading.Lock()  # one flush at a time (flush thread, exit)

    def append(self, table: str, row: dict[str, Any]) -> None:
        with self._lock:
            self._rows[table].append(row)

    def extend(self, table: str, rows: list[dict[str, Any]]) -> None:
        with self._lock:
            self._rows[table].extend(rows)

    def extend_columns(self, table: str, columns: dict[str, list[Any]]) -> None:
        """Add rows given as equal-length lists per column (columns left out are null)."""
        with self._lock:
            buffered = self._columns.setdefault(table, {name: [] for name in TABLES[table].names})
            count = len(next(iter(columns.values()), []))
            for name, values in buffered.items():
                values.extend(columns[name] if name in columns else [None] * count)

    def pending(self) -> int:
        with self._lock:
            columns = sum(len(next(iter(c.values()), [])) for c in self._columns.values())
            return sum(len(rows) for rows in self._rows.values()) + columns

    def flush(self) -> int:
        """Write every buffered row to new part files; returns the rows written.

        Only taking the buffers holds the adding lock: the program's next step never
        waits for Parquet encoding or the disk."""
        with self._flush_lock:
            with self._lock:
                rows, self._rows = self._rows, {name: [] for name in TABLES}
                columns, self._columns = self._columns, {}
            written = 0
            for name in TABLES:
                tables = [pa.Table.from_pylist(rows[name], schema=TABLES[name])] if rows[name] else []
                if name in columns:
                    tables.append(pa.Table.from_pydict(columns[name], schema=TABLES[name]))
                if not tables:
                    continue
                table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
                self._seq += 1
                write_table_atomic(self.run_dir / name / f"part-{self.tag}-{self._seq:06d}.parquet", table)
                written += table.num_rows
            return written

    def reset_after_fork(self) -> None:
        """A forked child must not re-write its parent's rows under the parent's name
        (nor wait on a lock another thread of the parent held at the fork)."""
        self.__init__(self.run_dir)  # type: ignore[misc]


def read_table(run_dir: Path, name: str, warn: list[str] | None = None,
               columns: list[str] | None = None) -> pa.Table:
    """Union of every part of one table (an empty table with the schema if none); only
    `columns` when given (Parquet reads just those column chunks).

    A part that is truncated or does not fit the schema is skipped and named, in `warn`
    when given, else once on stderr: one bad file never hides the rest of a run."""
    schema = TABLES[name]
    folder = Path(run_dir) / name
    parts = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
    tables = [t for t in (read_part(p, schema, columns=columns, warn=warn) for p in parts) if t is not None]
    if not tables:
        empty = schema.empty_table()
        return empty.select(columns) if columns is not None else empty
    return pa.concat_tables(tables).combine_chunks()


_WARNED: set[Path] = set()


def read_part(path: Path, schema: pa.Schema | None = None, columns: list[str] | None = None,
              warn: list[str] | None = None) -> pa.Table | None:
    """One part file, or None (and a warning naming it) when it is damaged or foreign."""
    try:
        return pq.read_table(path, schema=schema, columns=columns)
    except (pa.ArrowException, OSError, ValueError) as exc:
        message = f"skipped the damaged part {path}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        if warn is not None:
            warn.append(message)
        elif path not in _WARNED:
            _WARNED.add(path)
            print(f"tpuscope: {message}", file=sys.stderr)
        return None
