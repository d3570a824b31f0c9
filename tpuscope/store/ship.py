"""Copying a run from its local stage to an object store, in batches, beside the program.

Object stores charge per request and are slow per object, and a profiled process must
never wait on the network. So the program's processes write their parts to a local
stage at local speed (the same crash-safe parts as a local store, flushed every 2 s),
and a `Shipper` thread (in `tpuscope run`'s launcher, or beside `tpuscope.profile()`)
uploads every SHIP_INTERVAL_S what is new: one object per table holding all the parts
flushed since the last batch (`part-<host>-<pid>-s<seq>.parquet`; names never repeat,
so an append never overwrites), and meta.json / the process files when they changed.
When the run ends, the stage's merged parts (store.compact) replace the batches, the
debug text, HLO dumps and traces follow, and the stage is removed.

A store that fails is said once, in one line; the rows stay in the stage, the next
batch tries again, and the program goes on. If the store still fails at the end the
stage is kept and named, so nothing is lost.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tpuscope.store import layout
from tpuscope.store.compact import REPLACES_KEY, replaced_by
from tpuscope.store.files import create_json_once
from tpuscope.store.hosts import HOSTS_DIR, file_host
from tpuscope.store.location import Location

SHIP_INTERVAL_S = float(os.environ.get("TPUSCOPE_SHIP_INTERVAL") or 5.0)
# tables replaced whole by the analysis: uploaded under their own name
ALWAYS_BY_NAME = ("findings",)
_CLIENT_LOGGERS = ("gcsfs", "s3fs", "fsspec", "aiobotocore", "botocore")
# the last batch, at the end
SHIP_TIMEOUT_S = float(os.environ.get("TPUSCOPE_SHIP_TIMEOUT") or 60.0)
BIG_PART_BYTES = 8 << 20  # a part this big is one object already: sent as it is, never re-encoded


def host_tag() -> str:
    """`<host>-<pid>` of this process, the host as part files name it (store.hosts), so a
    batch or merged part it writes carries the host of the rows inside."""
    return f"{file_host()}-{os.getpid()}"


def _bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


class Shipper:
    """Uploads one run's stage to `target`, a batch at a time."""

    def __init__(self, stage: Path, target: Location, interval: float = SHIP_INTERVAL_S) -> None:
        self.stage = Path(stage)
        self.target = target
        self.interval = interval
        self.tag = host_tag()
        # one host of a pod (store.pods.join_remote): it sends only its own files; the
        # shared meta.json was created once, and the analysis is written to the store itself
        self.pod = (self.stage / HOSTS_DIR).is_dir()
        self._seq = 0
        # table -> remote batch -> its local parts
        self._batches: dict[str, dict[str, set[str]]] = {}
        self._pending: dict[str, tuple[str, list[str]]] = {}  # table -> batch being sent, its parts
        self._sent: dict[str, tuple[int, int]] = {}  # relative path -> (mtime_ns, size) uploaded
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self._done = False  # the last round's outcome (close)
        self.objects = 0
        self.bytes = 0

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> Shipper:
        for name in _CLIENT_LOGGERS:  # their retry tracebacks, printed by logging's last resort
            logging.getLogger(name).addHandler(logging.NullHandler())
        self._thread = threading.Thread(target=self._loop, name="tpuscope-shipper", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.ship()

    def close(self, timeout: float = SHIP_TIMEOUT_S) -> bool:
        """The last batch, the merged parts and the run's other files, within `timeout`
        seconds; the stage is removed when all arrived (True), else kept (False, and the one
        line said on failure named it)."""
        deadline = time.monotonic() + timeout
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        last = threading.Thread(
            target=lambda: setattr(self, "_done", self.ship(final=True)),
            name="tpuscope-shipper-last",
            daemon=True,
        )
        last.start()
        last.join(max(deadline - time.monotonic(), 1.0))
        done = not last.is_alive() and self._done
        if done:
            shutil.rmtree(self.stage, ignore_errors=True)
            if self.pod:  # the host's own folder of stages (store.pods.join_remote)
                with contextlib.suppress(OSError):
                    self.stage.parent.rmdir()
        elif last.is_alive() and self.error is None:
            print(
                f"tpuscope: the store {self.target} did not answer within {timeout:.0f} s: the run is kept in "
                f"{self.stage}",
                file=sys.stderr,
            )
        return done

    def ship(self, final: bool = False) -> bool:
        """One round; True when everything new arrived. Never raises: a failure is said once."""
        with self._lock:
            try:
                self._ship_tables()
                self._ship_files(final)
            except Exception as exc:  # the store is slow, full, gone: the program goes on
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                if self.error is None:
                    print(
                        f"tpuscope: cannot write to the store {self.target}: {type(exc).__name__}: "
                        f"{reason[:200]} (the program is not affected; the run is kept in {self.stage})",
                        file=sys.stderr,
                    )
                self.error = reason
                return False
            self.error = None
            return True

    # -- what is uploaded -------------------------------------------------------------
    def _put(self, relative: str, data: bytes) -> None:
        (self.target / relative).fs.pipe_file((self.target / relative).path, data)
        self.objects += 1
        self.bytes += len(data)

    def _tables(self) -> list[Path]:
        return (
            sorted(
                p
                for p in self.stage.iterdir()
                if p.is_dir() and p.name not in (layout.PROCS, HOSTS_DIR, *layout.ARTIFACT_FOLDERS)
            )
            if self.stage.is_dir()
            else []
        )

    def _ship_tables(self) -> None:
        for folder in self._tables():
            if folder.name in ALWAYS_BY_NAME:
                continue  # by name, with the files
            batches = self._batches.setdefault(folder.name, {})
            shipped = set().union(*batches.values()) if batches else set()
            names = sorted(p.name for p in folder.iterdir() if layout.is_part(p.name))
            for name in (n for n in names if layout.is_compact(n) and n not in shipped):
                self._ship_compact(folder, name, batches)
            for name in names:
                if (
                    name not in shipped
                    and not layout.is_compact(name)
                    and self._is_big(folder / name)
                ):
                    self._put(f"{folder.name}/{name}", (folder / name).read_bytes())
                    batches[name] = {name}
                    shipped.add(name)
            pending = self._pending.get(folder.name)
            if pending is None:
                new = [n for n in names if not layout.is_compact(n) and n not in shipped]
                if not new:
                    continue
                self._seq += 1
                pending = self._pending[folder.name] = (
                    f"part-{self.tag}-s{self._seq:06d}.parquet",
                    new,
                )
            # a batch that failed is sent again under the same name: never twice
            batch, parts = pending
            tables = {}
            for name in parts:
                with contextlib.suppress(FileNotFoundError, pa.ArrowException, OSError):
                    tables[name] = pq.read_table(folder / name)  # a damaged part stays in the stage
            if tables:
                merged = pa.concat_tables(list(tables.values()), promote_options="default")
                self._put(f"{folder.name}/{batch}", _bytes(merged))
                batches[batch] = set(tables)
            del self._pending[folder.name]

    @staticmethod
    def _is_big(path: Path) -> bool:
        try:
            return path.stat().st_size >= BIG_PART_BYTES
        except FileNotFoundError:
            return False

    def _ship_compact(self, folder: Path, name: str, batches: dict[str, set[str]]) -> None:
        """A merged part replaces the batches whose parts it holds (then they are removed)."""
        holds = replaced_by(Location.of(folder / name))
        covered = sorted(b for b, parts in batches.items() if parts <= holds)
        table = pq.read_table(folder / name)
        table = table.replace_schema_metadata(
            {**(table.schema.metadata or {}), REPLACES_KEY: json.dumps(covered).encode()}
        )
        self._put(f"{folder.name}/{name}", _bytes(table))
        for batch in covered:
            (self.target / folder.name / batch).remove()
            del batches[batch]
        batches[name] = holds | {name}

    def _ship_files(self, final: bool) -> None:
        """meta.json, the process files, analysis.json and findings when they changed; at the
        end also debug/, hlo/ and trace/. A pod's host sends its hosts/<host>.json and its
        process files instead of the run's meta, analysis and findings."""
        if self.pod:
            self._create_pod_meta()
            files, folders = [], (layout.PROCS, HOSTS_DIR)
        else:
            files = [self.stage / layout.META, self.stage / layout.ANALYSIS]
            folders = (layout.PROCS, *ALWAYS_BY_NAME)
        for folder in (*folders, *(layout.ARTIFACT_FOLDERS if final else ())):
            root = self.stage / folder
            if root.is_dir():
                files += [p for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")]
        for path in files:
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            relative = path.relative_to(self.stage).as_posix()
            if self._sent.get(relative) == (stat.st_mtime_ns, stat.st_size):
                continue
            self._put(relative, path.read_bytes())
            self._sent[relative] = (stat.st_mtime_ns, stat.st_size)

    def _create_pod_meta(self) -> None:
        """A pod's meta.json, once: created only if absent (store.files.create_json_once), so the
        first host's stands whichever host ships first."""
        if layout.META in self._sent:
            return
        meta = json.loads((self.stage / layout.META).read_text())
        if create_json_once(self.target / "meta.json", meta):
            self.objects += 1
        self._sent[layout.META] = (0, 0)


_SHIPPERS: dict[Path, Shipper] = {}  # stage folder -> the shipper copying it
_SHIPPERS_LOCK = threading.Lock()


def start_shipping(stage: Path, target: Location) -> Shipper:
    """Start copying a run's stage to `target` (RunStore.new_run does, for object stores)."""
    shipper = Shipper(stage, target).start()
    with _SHIPPERS_LOCK:
        _SHIPPERS[Path(stage)] = shipper
    return shipper


def finish_shipping(run_dir: Path) -> Path | Location:
    """Where the run is once its end was shipped: the object store's copy, or `run_dir`
    itself (a local run, or a stage kept because the store failed)."""
    with _SHIPPERS_LOCK:
        shipper = _SHIPPERS.pop(Path(run_dir), None)
    if shipper is None:
        return run_dir
    return shipper.target if shipper.close() else run_dir
