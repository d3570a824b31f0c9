"""Which part files of a table hold its rows, and merging them into one when a run ends.

A run that flushed every 2 s for an hour has thousands of parts per table; on an object
store each is a request (and a charge) for every reader. When the run ends its parts are
merged into one file per table, crash-safely: the merged file is written first, whole,
and names in its footer (key `tpuscope.replaces`) the parts it holds; only then are those
parts removed. A reader lists the folder and leaves out every part some merged file
names, so it never sees a row twice (killed after the write) nor misses one (killed
before it).

Every merge is per host: a merged part holds the parts of one host only, and its name
carries that host (`part-<host>-<pid>-compact-<seq>`). So the host of a pod that ends
merges its own parts while the others still append theirs, and a reader needs a merged
part's footer only when another part of the same host sits beside it.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tpuscope.schema import TABLES
from tpuscope.store import layout
from tpuscope.store.hosts import part_host
from tpuscope.store.location import Entry, Location

REPLACES_KEY = b"tpuscope.replaces"


def parquet_source(part: Location) -> str | pa.BufferReader:
    """What pyarrow reads a part from: a local part's path, or a remote part's bytes copied
    into Arrow's own memory; never a Python file object.

    Read through a Python file, pyarrow keeps the bytes it read as Python objects, and its
    worker threads may drop the last of them a moment after the read returned (later under
    load). A worker that does so while the interpreter exits needs the GIL; Python 3.11 ends
    such a thread with pthread_exit, whose unwinding through Arrow's noexcept destructors
    calls std::terminate: the launcher, its program's work done, died by SIGABRT
    ("terminate called without an active exception") after merging a pod's parts."""
    if part.local:
        return part.path
    sink = pa.BufferOutputStream()
    sink.write(part.read_bytes())  # a copy: Arrow then holds no Python object
    return pa.BufferReader(sink.getvalue())


def replaced_by(part: Location) -> set[str]:
    """The part names a merged file holds (read from its footer; none if unreadable).
    A remote footer is read through the file (not the whole part: a merged part is big):
    reading metadata alone is done on this thread, which also frees the reader."""
    try:
        if part.local:
            meta = pq.read_metadata(part.path).metadata or {}
        else:
            with part.fs.open(part.path, "rb") as handle:
                meta = pq.read_metadata(handle).metadata or {}
    except (OSError, pa.ArrowException, ValueError):
        return set()
    try:
        return set(json.loads(meta.get(REPLACES_KEY, b"[]")))
    except ValueError:
        return set()


def _footers(folder: Location, names: list[str]) -> set[str]:
    """The part names the merged files `names` hold; remotely their footers are fetched
    side by side (each is a round trip)."""
    if len(names) < 2 or folder.local:
        return set().union(*(replaced_by(folder / n) for n in names)) if names else set()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:
        return set().union(*pool.map(lambda n: replaced_by(folder / n), names))


def active_parts(folder: Location) -> list[Entry]:
    """The parts of a table folder that readers take: every part no merged file replaces.

    Every merge is per host (a merged part holds only parts of the host its name carries),
    so a merged part's footer is read only when another part of its host sits beside it
    (a merge killed before removing, or parts written after it), or when a part's name
    carries no host: a finished run of 64 hosts costs one listing per table, not 64 footers."""
    parts = [e for e in folder.entries() if layout.is_part(e.name)]
    compacts = [e for e in parts if layout.is_compact(e.name)]
    if not compacts or len(parts) == 1:
        return parts
    hosts = Counter(part_host(e.name) for e in parts)
    suspects = [
        e.name
        for e in compacts
        if hosts[None] or part_host(e.name) is None or hosts[part_host(e.name)] > 1
    ]
    replaced = _footers(folder, suspects)
    return [e for e in parts if e.name not in replaced]


def _damaged(part: Location, exc: Exception) -> str:
    return f"left the damaged part {part.url} as it is: {str(exc).splitlines()[0] if str(exc) else exc}"


def _read(part: Location, schema: pa.Schema | None, warn: list[str]) -> pa.Table | None:
    try:
        return pq.read_table(parquet_source(part), schema=schema)
    except (pa.ArrowException, OSError, ValueError) as exc:
        warn.append(_damaged(part, exc))
        return None


def read_parts(folder: Location, schema: pa.Schema) -> pa.Table:
    """A small table's active parts as one Arrow table of `schema`, by pyarrow's Parquet reader
    alone: no DuckDB, and not `pq.read_table` (its dataset layer imports pandas, ~0.3 s of
    `show`'s start-up). A damaged part is left out, with a warning on stderr."""
    warn: list[str] = []
    tables = [
        t
        for t in (_read_file(folder / e.name, schema, warn) for e in active_parts(folder))
        if t is not None
    ]
    for message in warn:
        print(f"tpuscope: {message}", file=sys.stderr)
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _read_file(part: Location, schema: pa.Schema, warn: list[str]) -> pa.Table | None:
    """One part as `schema` (a column it lacks as nulls), or None and a warning."""
    try:
        table = pq.ParquetFile(parquet_source(part)).read()
        columns = [
            table.column(f.name).cast(f.type)
            if f.name in table.column_names
            else pa.nulls(table.num_rows, f.type)
            for f in schema
        ]
        return pa.table(columns, schema=schema)
    except (pa.ArrowException, OSError, ValueError) as exc:
        warn.append(_damaged(part, exc))
        return None


def _next_seq(names: list[str], tag: str) -> int:
    prefix = f"part-{tag}{layout.COMPACT_MARK}"
    seqs = [
        int(n[len(prefix) : -8])
        for n in names
        if n.startswith(prefix) and n[len(prefix) : -8].isdigit()
    ]
    return max(seqs, default=0) + 1


def _write(target: Location, table: pa.Table) -> None:
    """Write whole or not at all: locally under a dot-name then renamed, remotely one upload."""
    if target.local:
        path = Path(target.path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            pq.write_table(table, tmp, row_group_size=1 << 17)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return
    with target.fs.open(target.path, "wb") as handle:
        pq.write_table(table, handle, row_group_size=1 << 17)


def _group_tag(tag: str, host: str | None) -> str:
    """The tag of the merged part of one host's parts: `tag` when it names that host (or the
    parts name none), else that host with tag's pid (`host-3-812`), so every merged part's
    name carries the host of the rows it holds."""
    if host is None or part_host(layout.compact_name(tag, 1)) == host:
        return tag
    pid = tag.rsplit("-", 1)[-1]
    return f"{host}-{pid if pid.isdigit() else 0}"


def compact_table(
    folder: Location, tag: str, warn: list[str] | None = None, host: str | None = None
) -> int:
    """Merge a table folder's parts into one per host (only `host`'s when given: a host of a
    pod merges its own parts while the others still append); returns how many files it
    removed. A damaged part is left where it is (and named): merging loses nothing."""
    notes: list[str] = [] if warn is None else warn
    entries = [e for e in folder.entries() if layout.is_part(e.name)]
    active = {e.name for e in active_parts(folder)}
    groups: dict[str | None, list[str]] = {}
    own = part_host(layout.compact_name(tag, 1))
    for entry in entries:
        group = part_host(entry.name)
        groups.setdefault(own if group is None else group, []).append(entry.name)
    if host is not None:
        groups = {host: groups.get(host, [])}
    all_names = [e.name for e in entries]
    return sum(
        _compact_group(folder, names, active, _group_tag(tag, group), all_names, notes)
        for group, names in sorted(groups.items(), key=lambda kv: str(kv[0]))
    )


def _compact_group(
    folder: Location,
    names: list[str],
    active: set[str],
    tag: str,
    all_names: list[str],
    notes: list[str],
) -> int:
    """Merge one host's parts into one merged part (written first, whole, its footer naming
    what it holds), then remove them."""
    live = [n for n in names if n in active]
    stale = set(names) - active  # already merged, left by a killed merge
    if len(live) <= 1 and not stale:
        return 0
    schema = TABLES.get(folder.name)
    read = {name: _read(folder / name, schema, notes) for name in live}
    tables = {name: t for name, t in read.items() if t is not None}
    if len(tables) <= 1 and not stale:
        return 0
    merged = pa.concat_tables(list(tables.values()), promote_options="default") if tables else None
    replaces = sorted(set(tables) | stale)
    if merged is not None:
        merged = merged.replace_schema_metadata(
            {**(merged.schema.metadata or {}), REPLACES_KEY: json.dumps(replaces).encode()}
        )
        _write(folder / layout.compact_name(tag, _next_seq(all_names, tag)), merged)
    for name in replaces:
        (folder / name).remove()
    return len(replaces)


# findings is one part already; trace_events comes in a few big parts written a row group at
# a time with delta-encoded times (store.row_groups): merging them would load the whole trace
# into memory and drop that encoding, for no fewer objects worth having.
NOT_MERGED = ("findings", "trace_events")


def compact_run(
    run: Location, tag: str, tables: list[str] | None = None, host: str | None = None
) -> int:
    """Merge every table of a run (but NOT_MERGED), one merged part per host (only `host`'s
    parts when given); returns the files removed. Problems are said on stderr, one line
    each, and never raise."""
    removed = 0
    warn: list[str] = []
    present = set(run.folders())
    for name in tables or [n for n in TABLES if n not in NOT_MERGED and n in present]:
        try:
            removed += compact_table(run / name, tag, warn, host)
        except Exception as exc:  # the parts are still there: nothing is lost
            warn.append(f"left the parts of {name} unmerged: {type(exc).__name__}: {exc}")
    for message in warn:
        print(f"tpuscope: {message}", file=sys.stderr)
    return removed
