"""Append-only Parquet part files: the unit of crash safety in the run store.

Each process buffers rows per table and writes them out as a new part file
(`<run>/<table>/part-<host>-<pid>-<seq>.parquet`): written under a dot-name, then
renamed into place, so readers never see half a file and a killed process loses
at most the rows since its last flush. Many processes can write one run at once
because no two share a part name. The in-memory buffer is `buffer.PartWriter`
(re-exported here), which imports this module only when it has rows to write.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tpuscope.schema import TABLES
from tpuscope.store.buffer import PartWriter  # noqa: F401  (re-exported)
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


def warm_up() -> None:
    """pyarrow imports pandas (if installed) at its first conversion of Python values, whatever
    the values: done here, once, so the flush that pays for it can tell it apart (buffer)."""
    pa.array([0], type=pa.int64())


def write_rows(path: Path, name: str, rows: list[dict[str, Any]], chunks: list[dict[str, list[Any]]]) -> int:
    """One part file of table `name` from dict rows and column chunks (columns a chunk
    leaves out are null); returns its row count. Called by the flush thread (buffer)."""
    schema = TABLES[name]
    tables = [pa.Table.from_pylist(rows, schema=schema)] if rows else []
    if chunks:  # one Arrow conversion for all of them: steps add a chunk each
        merged: dict[str, list[Any]] = {field: [] for field in schema.names}
        for chunk in chunks:
            count = len(next(iter(chunk.values())))
            for field, values in merged.items():
                values.extend(chunk.get(field) or [None] * count)
        tables.append(pa.Table.from_pydict(merged, schema=schema))
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    write_table_atomic(path, table)
    return table.num_rows


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
