"""Rows buffered in memory until the flush thread writes them as part files.

This module imports nothing heavy: a profiled process loads it at start-up, and
pyarrow (with the table schemas) is imported only by the first flush that has
rows to write, in the flush thread, so a process that never records a row never
pays for it. pyarrow itself imports pandas at its first conversion of Python values
(its pandas shim checks every input), so that too waits for the first rows; the
one-off CPU time is kept apart (`import_cpu_ns`) from the flushes' own. Adding rows never converts anything: dicts and column lists are kept
as given and turned into Arrow tables by `flush`.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tpuscope.store.columns import Columns

_WARM: list[bool] = []  # pyarrow's first conversion (it imports pandas) was done in this process


class PartWriter:
    """Buffers rows of the run's tables in memory and flushes them as part files.

    Rows come as dicts (`append`, `extend`) or, where a step adds many rows of a few
    columns, column-wise (`extend_columns`: one list per column costs a fraction of one
    dict per row). A lock keeps a flush from taking half of a batch.
    """

    def __init__(self, run_dir: Path, tag: str | None = None, host: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.host = host or socket.gethostname()  # the file-safe host (store/hosts.py)
        self.tag = tag or f"{self.host}-{os.getpid()}"
        self._rows: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
        self._columns: defaultdict[str, list[Columns]] = defaultdict(list)
        self._seq = 0
        self.import_cpu_ns = 0  # importing pyarrow (prepare): a one-off, told apart from flushing
        self.flush_import_ns = 0  # the part of it done inside flush() (when not prepared before)
        self._lock = threading.Lock()  # adding vs taking the buffers
        self._flush_lock = threading.Lock()  # one flush at a time (flush thread, exit)

    def append(self, table: str, row: dict[str, Any]) -> None:
        with self._lock:
            self._rows[table].append(row)

    def extend(self, table: str, rows: list[dict[str, Any]]) -> None:
        with self._lock:
            self._rows[table].extend(rows)

    def extend_columns(self, table: str, columns: Columns) -> None:
        """Add rows given as equal-length lists per column (columns left out are null).
        The lists are kept, not copied: the caller hands them over."""
        if columns and len(next(iter(columns.values()))):
            with self._lock:
                self._columns[table].append(columns)

    def pending(self) -> int:
        with self._lock:
            chunks = sum(_count(c) for chunk in self._columns.values() for c in chunk)
            return sum(len(rows) for rows in self._rows.values()) + chunks

    def flush(self) -> int:
        """Write every buffered row to new part files; returns the rows written.

        Only taking the buffers holds the adding lock: the program's next step never
        waits for Parquet encoding or the disk."""
        with self._flush_lock:
            with self._lock:
                rows, self._rows = self._rows, defaultdict(list)
                columns, self._columns = self._columns, defaultdict(list)
            if not rows and not columns:
                return 0
            started = time.thread_time_ns()
            parts = self.prepare()
            self.flush_import_ns += time.thread_time_ns() - started
            written = 0
            for name, table_rows, chunks in _by_table(rows, columns):
                self._seq += 1
                path = self.run_dir / name / f"part-{self.tag}-{self._seq:06d}.parquet"
                written += parts.write_rows(path, name, table_rows, chunks)
            return written

    def prepare(self) -> Any:
        """Import the Parquet writer (pyarrow, the schemas; pandas comes with pyarrow's first
        conversion) and return it; its CPU time, a one-off, is counted in `import_cpu_ns`.
        Safe from any thread: the import lock makes a second caller wait for the first."""
        started = time.thread_time_ns()
        from tpuscope.store import parts  # pyarrow: only once there are rows

        if not _WARM:
            parts.warm_up()
            _WARM.append(True)
        self.import_cpu_ns += time.thread_time_ns() - started
        return parts

    def reset_after_fork(self) -> None:
        """A forked child must not re-write its parent's rows under the parent's name
        (nor wait on a lock another thread of the parent held at the fork)."""
        self.__init__(self.run_dir, host=self.host)  # type: ignore[misc]


def _count(columns: Columns) -> int:
    return len(next(iter(columns.values()), []))


def _by_table(
    rows: dict[str, list[dict[str, Any]]], columns: dict[str, list[Columns]]
) -> Iterator[tuple[str, list[dict[str, Any]], list[Columns]]]:
    """(table, dict rows, column chunks) of every table with something to write, in a fixed order."""
    for name in sorted(set(rows) | set(columns)):
        if rows.get(name) or columns.get(name):
            yield name, rows.get(name, []), columns.get(name, [])


def has_parts(run_dir: Any) -> bool:
    """True once any process of the run wrote a part file of any table: a run without one
    has nothing to analyse (`tpuscope run` then skips loading the analysis stack). A run in
    an object store (a `Location`: a pod's run, analysed where all its hosts write) is
    listed there."""
    if isinstance(run_dir, str | Path):
        return any(Path(run_dir).glob("*/part-*.parquet"))
    return bool(run_dir.fs.glob(f"{run_dir.path}/*/part-*.parquet"))
