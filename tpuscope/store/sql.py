"""Reading a run's tables with DuckDB over its Parquet parts, local or through fsspec.

DuckDB reads only the columns a query names and skips row groups whose statistics
rule a filter out, over all of a table's parts at once, so `tpuscope query` and the
readers that want a few columns never load a whole run into pandas. The files a table
is read from are `compact.active_parts` (never a merged part's leftovers twice). A
part DuckDB cannot read (truncated, another schema) makes the reader fall back to
pyarrow part by part, which skips and names it: one bad file never hides a run.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from tpuscope.schema import TABLES
from tpuscope.store.compact import active_parts, parquet_source
from tpuscope.store.hosts import part_host
from tpuscope.store.location import Location

_WARNED: set[str] = set()


_LOCAL: tuple[int, duckdb.DuckDBPyConnection] | None = None  # (pid, this process's database)
_LOCAL_LOCK = threading.Lock()


def _local_database() -> duckdb.DuckDBPyConnection:
    """The process's one in-memory DuckDB database for local stores: a connection costs
    25-90 ms here, a cursor on it 0.05 ms (a page reads through 2-4 of them). Footers read
    once per process (parquet_metadata_cache: DuckDB drops an entry whose file changed; parts
    are never rewritten in place). A forked child makes its own."""
    global _LOCAL
    with _LOCAL_LOCK:
        if _LOCAL is None or _LOCAL[0] != os.getpid():
            root = duckdb.connect()
            root.execute("SET GLOBAL parquet_metadata_cache = true")
            _LOCAL = (os.getpid(), root)
        return _LOCAL[1]


def connect(where: Location) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that reads `where`'s filesystem: a cursor of the process's database
    for a local store (its own temporary views, its own thread), a fresh database with the
    store's fsspec filesystem registered for a remote one. The caller closes it."""
    if where.local:
        con = _local_database().cursor()
    else:
        con = duckdb.connect()
        # a table's footers are read once per connection, not once per pass over its parts
        con.execute("SET parquet_metadata_cache = true")
        con.register_filesystem(where.fs)
    con.execute("SET enable_progress_bar = false")  # a reader prints nothing of its own
    return con


def part_urls(run: Location, name: str, host: str | None = None) -> list[str]:
    """A table's part files; with `host`, only those that may hold its rows: the parts its name
    carries (a pod's host writes only its own) and those whose name carries no host of the
    run's parts (an importer's tag), so one host's read opens its own files, not the pod's."""
    folder = run / name
    entries = active_parts(folder)
    if host is not None:
        named = {e.name: part_host(e.name) for e in entries}
        hosts = set(named.values())
        entries = [
            e
            for e in entries
            if named[e.name] == host or named[e.name] is None or (named[e.name] not in hosts)
        ]
    return [(folder / e.name).url for e in entries]


def host_filter(host: str, where: str | None = None) -> str:
    """`where` and host = 'host' (SQL text; the host's quotes doubled)."""
    own = "host = '" + host.replace("'", "''") + "'"
    return f"({where}) AND {own}" if where else own


def _warn(message: str, warn: list[str] | None) -> None:
    if warn is not None:
        warn.append(message)
    elif message not in _WARNED:
        _WARNED.add(message)
        print(f"tpuscope: {message}", file=sys.stderr)


def read_part(
    part: Location,
    schema: pa.Schema | None = None,
    columns: Sequence[str] | None = None,
    warn: list[str] | None = None,
) -> pa.Table | None:
    """One part file, or None (and a warning naming it) when it is damaged or foreign."""
    try:  # by path, or a copy in Arrow's memory: never through a Python file (parquet_source)
        return pq.read_table(
            parquet_source(part), schema=schema, columns=list(columns) if columns else None
        )
    except (pa.ArrowException, OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        _warn(f"skipped the damaged part {part.url}: {reason}", warn)
        return None


def conform(table: pa.Table, schema: pa.Schema | None, columns: Sequence[str] | None) -> pa.Table:
    """DuckDB's types back to the table's schema (dictionary strings, int32 pids); a column
    no part has (an older run) comes back as nulls."""
    if schema is None:
        return table
    fields = [schema.field(c) for c in (columns or schema.names) if c in schema.names]
    arrays = []
    for field in fields:
        if field.name in table.column_names:
            arrays.append(table.column(field.name).cast(field.type))
        else:
            arrays.append(pa.nulls(table.num_rows, field.type))
    extra = [c for c in (columns or []) if c not in schema.names and c in table.column_names]
    return pa.table(
        arrays + [table.column(c) for c in extra], names=[f.name for f in fields] + extra
    )


def _pyarrow_union(
    run: Location, name: str, schema: pa.Schema | None, warn: list[str] | None
) -> pa.Table | None:
    folder = run / name
    tables = [
        t
        for t in (read_part(folder / e.name, schema, warn=warn) for e in active_parts(folder))
        if t is not None
    ]
    return pa.concat_tables(tables, promote_options="default") if tables else None


def scan(
    run: Location,
    name: str,
    columns: Sequence[str] | None = None,
    where: str | None = None,
    warn: list[str] | None = None,
    host: str | None = None,
) -> pa.Table:
    """Rows of one table (all, or those `where` keeps), only `columns` when given; with `host`,
    that host's rows, read from its own parts (part_urls)."""
    schema = TABLES.get(name)
    where = host_filter(host, where) if host is not None else where
    con = connect(run)
    try:
        for attempt in (1, 2):  # a host may replace its parts by a merged one as we read
            urls = part_urls(run, name, host)
            if not urls:
                empty = schema.empty_table() if schema is not None else pa.table({})
                return conform(empty, schema, columns)
            try:
                return _duck_scan(con, urls, schema, columns, where)
            except duckdb.IOException:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")
    except (duckdb.Error, pa.ArrowException):
        whole = _pyarrow_union(run, name, schema, warn)
        if whole is None:
            return conform(
                schema.empty_table() if schema is not None else pa.table({}), schema, columns
            )
        table = con.sql(f"SELECT * FROM whole{f' WHERE {where}' if where else ''}").to_arrow_table()
        return conform(table, schema, columns).combine_chunks()
    finally:
        con.close()


def _duck_scan(
    con: duckdb.DuckDBPyConnection,
    urls: list[str],
    schema: pa.Schema | None,
    columns: Sequence[str] | None,
    where: str | None,
    present: set[str] | None = None,
) -> pa.Table:
    """The parts `urls` of one table through DuckDB: only the columns asked for that exist
    (`present`: the columns its parts hold, when the caller knows them)."""
    files = _list(urls)
    if present is None:
        present = {r[0] for r in con.sql(f"SELECT name FROM parquet_schema({files})").fetchall()}
    wanted = [c for c in (columns or (schema.names if schema is not None else [])) if c in present]
    select = ", ".join(f'"{c}"' for c in wanted) if (columns or schema is not None) else "*"
    sql = f"SELECT {select or 'NULL AS _none'} FROM read_parquet({files}, union_by_name=true)"
    table = con.sql(sql + (f" WHERE {where}" if where else "")).to_arrow_table()
    return conform(table, schema, columns).combine_chunks()


def views(run: Location, tables: Sequence[str] | None = None) -> duckdb.DuckDBPyConnection:
    """A connection on which each of a run's tables is a view named after it (empty tables
    included, with their columns, so a query that names one never fails for want of rows).
    Several statements on one connection read each footer once; the caller closes it."""
    con = connect(run)
    try:
        for name in tables or TABLES:
            urls = part_urls(run, name)
            if urls:
                con.execute(
                    f'CREATE TEMP VIEW "{name}" AS SELECT * FROM read_parquet({_list(urls)}, union_by_name=true)'
                )
            elif name in TABLES:
                empty = TABLES[name].empty_table()  # noqa: F841  (read by DuckDB by name)
                con.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * FROM empty')
    except BaseException:
        con.close()
        raise
    return con


def query(run: Location, sql: str, tables: Sequence[str] | None = None) -> pa.Table:
    """Run SQL over a run's tables, each a view named after it (see `views`). Asked
    once more, over a fresh listing, when a part was gone by the time DuckDB read it (a
    host of a pod replaced its parts by their merged file meanwhile)."""
    try:
        return _query(run, sql, tables)
    except duckdb.IOException:
        return _query(run, sql, tables)


def _query(run: Location, sql: str, tables: Sequence[str] | None) -> pa.Table:
    con = views(run, tables)
    try:
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def _list(urls: list[str]) -> str:
    return "[" + ", ".join("'" + u.replace("'", "''") + "'" for u in urls) + "]"


class HostReader:
    """One host's rows of a run's tables at a time, for an analysis that goes host by host (a
    pod's): each table listed once, its parts grouped by the host their names carry, and one
    DuckDB connection for every read (a connection costs ~25-80 ms here; 128 hosts x 7 tables
    of connections cost more than the reads)."""

    def __init__(self, run: Location) -> None:
        self.run = run
        self._urls: dict[str, Any] = {}
        self._present: dict[str, Any] = {}
        self._con: duckdb.DuckDBPyConnection | None = None

    def _host_urls(self, name: str, host: str) -> list[str]:
        if name not in self._urls:
            folder = self.run / name
            named = [(part_host(e.name), (folder / e.name).url) for e in active_parts(folder)]
            hosts = {h for h, _ in named}
            self._urls[name] = (named, hosts)
        named, hosts = self._urls[name]
        return [u for h, u in named if h == host or h is None or h not in hosts]

    def read(self, name: str, host: str, columns: Sequence[str] | None = None) -> pa.Table:
        """The host's rows of table `name` (only `columns`), as `scan(..., host=host)` reads
        them; a table whose parts changed meanwhile, or a damaged one, is read by `scan`."""
        schema = TABLES.get(name)
        urls = self._host_urls(name, host)
        if not urls:
            empty = schema.empty_table() if schema is not None else pa.table({})
            return conform(empty, schema, columns)
        if self._con is None:
            self._con = connect(self.run)
        try:
            if name not in self._present:  # every part's columns, once per table
                listed = _list([u for _, u in self._urls[name][0]])
                self._present[name] = {
                    r[0]
                    for r in self._con.sql(f"SELECT name FROM parquet_schema({listed})").fetchall()
                }
            return _duck_scan(
                self._con, urls, schema, columns, host_filter(host), self._present[name]
            )
        except (duckdb.Error, pa.ArrowException):
            return scan(self.run, name, columns=columns, host=host)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
