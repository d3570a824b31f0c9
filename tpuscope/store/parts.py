"""Append-only Parquet part files: the unit of crash safety in the run store.

Each process buffers rows per table and writes them out as a new part file
(`<run>/<table>/part-<host>-<pid>-<seq>.parquet`): written under a dot-name, then
renamed into place, so readers never see half a file and a killed process loses
at most the rows since its last flush. Many processes can write one run at once
because no two share a part name. The in-memory buffer is `buffer.PartWriter`,
which imports this module only when it has rows to write.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tpuscope.schema import TABLES
from tpuscope.store.columns import Coded, Repeat
from tpuscope.store.files import remove_quietly
from tpuscope.store.location import Location

# the tables a profiled process writes while it runs (warmed up before its first flush)
LIVE_TABLES = ("steps", "metrics", "compiles", "fallbacks", "call_sites", "retraces")


def write_table_atomic(path: Path, table: pa.Table) -> None:
    """Write a Parquet file so that it appears whole or not at all (a full disk leaves no
    temp file). Only the table's folder is made: a run folder deleted mid-run stays deleted."""
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp, use_dictionary=_text_columns(table.schema))  # type: ignore[arg-type]  # a list of columns: pyarrow takes it, its stubs say bool
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


def _text_columns(schema: pa.Schema) -> list[str]:
    """The columns a part dictionary-encodes: its strings (names, locations, the host). Not its
    integers: a step's numbers and times are mostly distinct, and Parquet's writer tried a
    dictionary for each before falling back (measured: a flush's part of 8,000 steps written in
    1.4 ms instead of 2.2, and smaller)."""
    return [field.name for field in schema if _is_text(field.type)]


def _is_text(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        return True
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _is_text(kind.value_type)
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def warm_up() -> None:
    """pyarrow imports pandas (if installed) at its first conversion of Python values, whatever
    the values, and its Parquet writer pays a one-off on its first table of each kind (~1-2 ms
    each here): both done here, once, on a table of one row of every schema written to memory,
    so the flushes do not pay for them and the one-off is counted apart (buffer)."""
    import numpy as np  # the collectors' column chunks (a backend was imported: numpy is)

    pa.array([0], type=pa.int64())
    for name in LIVE_TABLES:
        schema = TABLES[name]
        table = pa.concat_tables(
            [
                pa.Table.from_pylist([{}], schema=schema),
                _chunk_table(
                    schema,
                    {
                        "host": Repeat("h", 1),
                        "step": np.zeros(1, dtype=np.int64),
                        "name": Coded(np.zeros(1, dtype=np.int64), ["n"]),
                    },
                ),
            ]
        )
        pq.write_table(table, pa.BufferOutputStream(), use_dictionary=_text_columns(schema))  # type: ignore[arg-type]  # as above


def write_rows(
    path: Path, name: str, rows: list[dict[str, Any]], chunks: list[dict[str, Any]]
) -> int:
    """One part file of table `name` from dict rows and column chunks (columns a chunk
    leaves out are null); returns its row count. Called by the flush thread (buffer)."""
    schema = TABLES[name]
    tables = [pa.Table.from_pylist(rows, schema=schema)] if rows else []
    tables += [_chunk_table(schema, chunk) for chunk in chunks]
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    write_table_atomic(path, table)
    return table.num_rows


def _chunk_table(schema: pa.Schema, chunk: dict[str, Any]) -> pa.Table:
    """One column chunk as a table, converted column by column: a `Repeat` (the process's
    host/pid/rank) becomes one scalar repeated, a `Coded` column a dictionary array, a numpy
    array is taken as it is and a left-out column is one null array, so none of them is
    converted value by value (the same rows as converting lists)."""
    count = len(next(iter(chunk.values())))
    arrays = []
    for field in schema:
        values = chunk.get(field.name)
        if values is None:
            arrays.append(pa.nulls(count, field.type))
        elif isinstance(values, Repeat):
            arrays.append(_repeated(values.value, field.type, count))
        elif isinstance(values, Coded):
            arrays.append(_coded_array(values, field.type))
        else:
            arrays.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _repeated(value: Any, kind: pa.DataType, count: int) -> pa.Array:
    """`value` `count` times. A list value (a step's graph hashes: none) is built from its
    offsets: pa.repeat of a list scalar took 1.4 ms for 8,000 rows."""
    if pa.types.is_list(kind) and isinstance(value, (list, tuple)):
        import numpy as np

        offsets: Any = pa.array(
            np.arange(count + 1, dtype=np.int32) * len(value)
        )  # stubs: a BooleanArray
        values: Any = pa.array(list(value) * count, kind.value_type)
        return pa.ListArray.from_arrays(offsets, values, type=kind)
    scalar: Any = pa.scalar(
        value, kind
    )  # pyarrow-stubs type it Scalar[DataType], which no overload takes
    return pa.repeat(scalar, count)


def _coded_array(column: Coded, kind: pa.DataType) -> pa.Array:
    """Codes into names as a dictionary array holding only the names used (in code order:
    every reader turns the column into its strings, none depends on the dictionary's order)."""
    import numpy as np

    codes = np.asarray(column.codes, dtype=np.int64)
    used = np.flatnonzero(np.bincount(codes, minlength=len(column.names)))
    lookup = np.zeros(len(column.names), dtype=np.int32)
    lookup[used] = np.arange(len(used), dtype=np.int32)
    names = pa.array([column.names[i] for i in used.tolist()], pa.string())
    indices: Any = pa.array(
        lookup[codes]
    )  # int32; pyarrow-stubs type pa.array(numpy) a BooleanArray
    array = pa.DictionaryArray.from_arrays(indices, names)
    return array if array.type == kind else array.cast(kind)


def read_table(
    run_dir: str | Path | Location,
    name: str,
    warn: list[str] | None = None,
    columns: list[str] | None = None,
    where: str | None = None,
) -> pa.Table:
    """Union of every part of one table (an empty table with the schema if none), read by
    DuckDB (`store.sql.scan`): only `columns` when given, only rows `where` keeps.

    A part that is truncated or does not fit the schema is skipped and named, in `warn`
    when given, else once on stderr: one bad file never hides the rest of a run."""
    from tpuscope.store.sql import scan  # DuckDB: imported by the readers only

    return scan(Location.of(run_dir), name, columns=columns, where=where, warn=warn)


def read_part(
    path: str | Path | Location,
    schema: pa.Schema | None = None,
    columns: list[str] | None = None,
    warn: list[str] | None = None,
) -> pa.Table | None:
    """One part file, or None (and a warning naming it) when it is damaged or foreign."""
    from tpuscope.store.sql import read_part as read_one

    return read_one(Location.of(path), schema, columns, warn)
