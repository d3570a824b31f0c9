"""pyarrow reads a part from its path, or from a copy in Arrow's memory: never through a Python
file object, locally or in an object store.

Given a Python file, pyarrow's worker threads call its `read` (Python code on Arrow's threads)
and keep the bytes it returns as Python objects, which they may drop a moment after the read
returned. One that drops them while the interpreter exits needs the GIL, and Python 3.11 ends
it with pthread_exit, whose unwinding through Arrow's noexcept destructors is std::terminate:
the launcher of a finished pod host died by SIGABRT ("terminate called without an active
exception") after merging its parts, so `tpuscope run` did not exit as its program had.
The race itself is rare (it needs the exit at that moment); that Arrow's threads call the
file is certain, so that is what is checked here, for every reader of parts.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import fsspec
import pyarrow as pa
import pytest
from fsspec.implementations.local import LocalFileOpener
from fsspec.implementations.memory import MemoryFile

from tpuscope.schema import TABLES
from tpuscope.store import PartWriter, RunStore
from tpuscope.store.compact import _read, active_parts, compact_table, parquet_source, read_parts
from tpuscope.store.location import Location
from tpuscope.store.sql import read_part


@pytest.fixture
def file_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread of every `read` of a local or in-memory fsspec file (the filesystems'
    own file classes, instrumented: nothing of pyarrow is replaced)."""
    threads: list[int] = []
    for cls in (LocalFileOpener, MemoryFile):
        original = cls.read

        def read(self, *args, _original=original, **kwargs):  # type: ignore[no-untyped-def]
            threads.append(threading.get_ident())
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "read", read)
    return threads


def steps_folder(tmp_path: Path) -> Path:
    """A steps folder of three parts of one process, 200 rows each."""
    run_dir = RunStore(tmp_path).new_run("threads")
    writer = PartWriter(run_dir, tag="host-a-7", host="host-a")
    for flush in range(3):
        writer.extend(
            "steps",
            [
                {
                    "host": "host-a",
                    "pid": 7,
                    "rank": 0,
                    "step": flush * 200 + i,
                    "wall_ns": i,
                    "boundary": "sync",
                }
                for i in range(200)
            ],
        )
        writer.flush()
    return run_dir / "steps"


@pytest.fixture(params=["file", "memory"])
def folder(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Location]:
    """The steps folder, in a local folder or in fsspec's in-memory object store."""
    local = steps_folder(tmp_path)
    if request.param == "file":
        yield Location.of(local)
        return
    memory = fsspec.filesystem("memory")
    root = f"/runs-{uuid.uuid4().hex}/steps"
    for part in local.iterdir():
        memory.pipe_file(f"{root}/{part.name}", part.read_bytes())
    yield Location.of(f"memory://{root}")
    memory.rm(root.rsplit("/", 1)[0], recursive=True)


READERS: dict[str, Callable[[Location], int]] = {
    "compact._read": lambda f: sum(
        _read(f / e.name, TABLES["steps"], []).num_rows for e in active_parts(f)
    ),
    "sql.read_part": lambda f: sum(
        read_part(f / e.name, TABLES["steps"]).num_rows for e in active_parts(f)
    ),
    "read_parts": lambda f: read_parts(f, TABLES["steps"]).num_rows,
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_no_arrow_thread_reads_a_part_through_python(
    folder: Location, reader: str, file_reads: list[int]
) -> None:
    for _ in range(5):  # the old readers had Arrow's I/O threads read on every call
        assert READERS[reader](folder) == 600
    assert set(file_reads) <= {threading.get_ident()}, "pyarrow read a part through a Python file"


def test_merging_a_hosts_parts_reads_them_on_its_own_thread(
    folder: Location, file_reads: list[int]
) -> None:
    assert compact_table(folder, "host-a-7", host="host-a") == 3
    assert READERS["read_parts"](folder) == 600
    assert set(file_reads) <= {threading.get_ident()}


def test_the_source_is_the_path_or_arrows_own_copy(folder: Location) -> None:
    part = folder / active_parts(folder)[0].name
    source = parquet_source(part)
    if folder.local:
        assert source == part.path  # Arrow opens and reads the file itself
    else:
        assert isinstance(source, pa.BufferReader)
        assert source.read_buffer().to_pybytes() == part.read_bytes()
