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
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tpuscope.schema import TABLES


def write_table_atomic(path: Path, table: pa.Table) -> None:
    """Write a Parquet file so that it appears whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


class PartWriter:
    """Buffers rows of the run's tables in memory and flushes them as part files."""

    def __init__(self, run_dir: Path, tag: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.tag = tag or f"{socket.gethostname()}-{os.getpid()}"
        self._rows: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
        self._seq = 0
        self._lock = threading.Lock()

    def append(self, table: str, row: dict[str, Any]) -> None:
        self._rows[table].append(row)

    def extend(self, table: str, rows: list[dict[str, Any]]) -> None:
        self._rows[table].extend(rows)

    def pending(self) -> int:
        return sum(len(rows) for rows in self._rows.values())

    def flush(self) -> int:
        """Write every buffered row to new part files; returns the rows written."""
        with self._lock:
            written = 0
            for name, rows in self._rows.items():
                if not rows:
                    continue
                batch, self._rows[name] = rows, []
                table = pa.Table.from_pylist(batch, schema=TABLES[name])
                self._seq += 1
                write_table_atomic(
                    self.run_dir / name / f"part-{self.tag}-{self._seq:06d}.parquet", table
                )
                written += len(batch)
            return written

    def reset_after_fork(self) -> None:
        """A forked child must not re-write its parent's rows under the parent's name."""
        self.tag = f"{socket.gethostname()}-{os.getpid()}"
        self._rows = {name: [] for name in TABLES}
        self._seq = 0
        self._lock = threading.Lock()


def read_table(run_dir: Path, name: str) -> pa.Table:
    """Union of every part of one table (an empty table with the schema if none)."""
    schema = TABLES[name]
    folder = Path(run_dir) / name
    parts = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
    if not parts:
        return schema.empty_table()
    tables = [pq.read_table(p, schema=schema) for p in parts]
    return pa.concat_tables(tables).combine_chunks()
