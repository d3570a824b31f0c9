"""Per-process collection session: buffers rows, flushes them every 2 s and at exit.

One Session lives in every profiled process (the launcher's child, every spawned
worker, every forked child). Backend collectors (xla, jax, tpu) only produce rows;
the session owns durability: the flush thread, the exit path, the launcher-lost signal, fork
safety and this process's meta file. It handles no signal a program might get: SIGTERM keeps
its default action, so it ends the process at once, even inside a long C++ call (an XLA
compile) where a Python handler would not run until the call returned; the rows flushed
until then stay (each part file appears whole, by rename).
"""

from __future__ import annotations

import atexit
import functools
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence, Sized
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import Any

from tpuscope.collect.envvars import ENV_LAUNCHER_PID, LAUNCHER_LOST_SIGNAL_OFFSET
from tpuscope.collect.profiler_cost import ProfilerCost
from tpuscope.schema_consts import DEFAULT_WARMUP
from tpuscope.store.columns import Repeat
from tpuscope.store.hosts import file_host
from tpuscope.store.run import Run  # light: no pyarrow until rows are written
from tpuscope.user_files import library_folders

FLUSH_INTERVAL_S = 2.0


def process_rank(spawn_index: int | None = None, runtime_ordinal: int | None = None) -> int:
    """This process's rank: RANK (torchrun and most launchers), else the index mp.spawn gave
    it, else the runtime's global ordinal (torch_xla.launch / xmp.spawn, read once the program
    started the runtime), else a local-rank variable, else 0."""
    value = os.environ.get("RANK")
    if value and value.isdigit():
        return int(value)
    for known in (spawn_index, runtime_ordinal):
        if known is not None:
            return known
    for var in ("PJRT_LOCAL_PROCESS_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK"):
        value = os.environ.get(var)
        if value and value.isdigit():
            return int(value)
    return 0


@functools.lru_cache(maxsize=1)
def package_versions() -> dict[str, str]:
    """Versions of what matters for reading a profile; absent packages are left out.
    Cached: reading package metadata costs ~8 ms, and pytest watches close a session per test."""
    from importlib import metadata

    versions = {"python": sys.version.split()[0]}
    for dist in ("tpuscope", "torch", "torch_xla", "jax", "jaxlib", "torch_tpu"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return versions


class Session:
    """Collects one process's rows into a run folder."""

    def __init__(self, run_dir: str | Path, warmup: int = DEFAULT_WARMUP) -> None:
        self.run_dir = Path(run_dir)
        self.warmup = warmup
        self.host = file_host()  # TPUSCOPE_HOST, the TPU worker, else the hostname (store/hosts.py)
        self.run = Run(self.run_dir)  # the writer of the run's parts and of this process's file
        self.writer = self.run.writer(host=self.host)
        self.pid = os.getpid()
        self.rank = process_rank()
        self._rank_facts: dict[str, int] = {}
        self._write_failed = False
        self.proc_meta: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._flush_lock = threading.RLock()
        self._closed = False
        self._meta_changed = False
        self._prev_excepthook = sys.excepthook
        self.before_close: list[Callable[[], None]] = []  # collectors' last rows
        # collectors' row building, deferred from the program's steps to the flush
        self.before_flush: list[Callable[[], None]] = []
        # flush work whose cost follows compiles, not steps (an HLO dump's files deleted),
        # run after before_flush and counted apart (ProfilerCost.compile_flush_cpu_ns)
        self.per_compile_flush: list[Callable[[], None]] = []
        self.cost = ProfilerCost()
        self._prefetching = False

    # -- rows ------------------------------------------------------------------
    def process_fields(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "rank": self.rank}

    def add(self, table: str, row: Mapping[str, Any]) -> None:
        self.writer.append(table, {**self.process_fields(), **row})

    def add_many(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        fields = self.process_fields()
        self.writer.extend(table, [{**fields, **row} for row in rows])

    def add_columns(self, table: str, columns: dict[str, Sized]) -> None:
        """Rows given column-wise (equal-length lists); the process fields are added here."""
        count = len(next(iter(columns.values()), []))
        fields = {name: Repeat(value, count) for name, value in self.process_fields().items()}
        self.writer.extend_columns(table, {**fields, **columns})

    def set_rank(self, **facts: int) -> None:
        """A better source of the rank became known (mp.spawn's index, the runtime's ordinal)."""
        self._rank_facts.update(facts)
        self.rank = process_rank(**self._rank_facts)
        self.set_meta(rank=self.rank)

    def set_meta(self, **fields: Any) -> None:
        self.proc_meta.update(fields)
        self._meta_changed = True

    # -- life cycle ------------------------------------------------------------
    def start(self, install_handlers: bool = True) -> Session:
        self.proc_meta = {
            "host": self.host,
            "pid": self.pid,
            "rank": self.rank,
            "argv": list(sys.argv),
            "cwd": os.getcwd(),
            "library_folders": library_folders(),  # a reader elsewhere knows its libraries
            "start_ns": time.time_ns(),
            "status": "running",
        }
        self.run_dir.mkdir(parents=True, exist_ok=True)  # later writes never re-make a deleted run
        self._write_proc_meta()
        self._start_flusher()
        if install_handlers:
            atexit.register(self._close_at_exit)
            sys.excepthook = self._excepthook
            self._record_end_if_launcher_lost()
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=self._after_fork)
        return self

    def expect_rows(self) -> None:
        """A backend was imported: rows will follow. Import the Parquet writer now, in a
        thread of its own (seconds before the first flush needs it, off the program's path),
        and, at once, the one module of it that cannot be imported once the interpreter is
        shutting down (concurrent.futures.thread registers a threading atexit hook), so
        that a program which ends before the import finished still has its rows written."""
        import concurrent.futures.thread  # noqa: F401  (~5 ms)

        if not self._prefetching:
            self._prefetching = True
            threading.Thread(
                target=self._prepare_writer, name="tpuscope-import", daemon=True
            ).start()

    def _prepare_writer(self) -> None:
        try:
            self.writer.prepare()
        except Exception as exc:  # said by the flush that needs it
            print(f"tpuscope: {exc}", file=sys.stderr)

    def flush(self) -> None:
        """Build the rows collectors deferred from the step (before_flush), write the buffered
        rows; rewrite this process's meta file only when it changed
        (its cost figures are written at close): rewriting it every 2 s cost a fifth of
        the flush. One flush at a time: the exit's flush (the program's thread) may meet the
        flush thread's, and each must count only its own thread's CPU (an import of pyarrow the
        other did was once subtracted from it: flush_cpu_ns came out negative)."""
        with self._flush_lock:
            self._flush()

    def _flush(self) -> None:
        start = time.thread_time_ns()
        imported = self.writer.flush_import_ns
        for build_rows in self.before_flush:
            build_rows()
        per_compile = self._per_compile_work()
        self.writer.flush()
        # the one-off import and the per-compile work are counted apart, not as the flush's
        start += self.writer.flush_import_ns - imported + per_compile
        self.cost.import_cpu_ns = self.writer.import_cpu_ns
        if self._meta_changed:
            self._meta_changed = False
            self._write_proc_meta()
        self.cost.flush_cpu_ns += time.thread_time_ns() - start
        self.cost.flushes += 1

    def _per_compile_work(self) -> int:
        """Run the per-compile flush work; its thread CPU time (ns), charged to compiles."""
        if not self.per_compile_flush:
            return 0
        start = time.thread_time_ns()
        for work in self.per_compile_flush:
            work()
        spent = time.thread_time_ns() - start
        self.cost.compile_flush_cpu_ns += spent
        return spent

    def _close_at_exit(self) -> None:
        """close(), where a second Ctrl-C during the last flush ends it with one line, not a
        traceback inside tpuscope (the rows written so far stay a readable run)."""
        try:
            self.close()
        except KeyboardInterrupt:
            print(
                "tpuscope: interrupted while saving the last rows; the run keeps what was written",
                file=sys.stderr,
            )

    def close(self, status: str | None = None, error: str | None = None) -> None:
        """Final flush and meta; safe to call twice (atexit and an explicit stop)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if status or self.proc_meta.get("status") == "running":
            self.proc_meta["status"] = status or "finished"
        if error:
            self.proc_meta["error"] = error
        self.proc_meta["end_ns"] = time.time_ns()
        self.proc_meta["versions"] = dict(package_versions())
        self.proc_meta["argv"] = list(sys.argv)
        self.proc_meta["library_folders"] = library_folders()  # with what the program added
        for last_rows in self.before_close:
            try:
                last_rows()
            except Exception as exc:  # a collector's last rows must not cost the others
                print(f"tpuscope: {exc}", file=sys.stderr)
        try:
            self.flush()
            self.proc_meta["profiler_cost"] = asdict(self.cost)
            self._write_proc_meta()
        except Exception as exc:  # a full or vanished store must not change how the program ends
            self._say_write_failed(exc)
        record_end_if_orphaned(self.run_dir, self.proc_meta)

    def _write_proc_meta(self) -> None:
        self.run.write_proc(self.host, self.pid, self.proc_meta)

    def _start_flusher(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flush_loop, name="tpuscope-flush", daemon=True)
        self._thread.start()

    def _flush_loop(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            try:
                self.flush()
            except Exception as exc:  # e.g. a full disk: rows since are lost, the program goes on
                self._say_write_failed(exc)

    def _say_write_failed(self, exc: Exception) -> None:
        """One line per process, however many flushes fail after it."""
        if not self._write_failed:
            self._write_failed = True
            reason = getattr(exc, "strerror", None) or exc
            print(
                f"tpuscope: cannot write profile rows to {self.run_dir}: {reason} "
                "(the program goes on; rows written so far stay readable)",
                file=sys.stderr,
            )

    def _excepthook(
        self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        if issubclass(exc_type, KeyboardInterrupt):  # a Ctrl-C that landed in tpuscope's hook
            tb = without_own_tail(tb)
            exc = exc.with_traceback(tb)
        last = traceback.extract_tb(tb)[-1] if tb else None
        where = f" at {last.filename}:{last.lineno}" if last else ""
        self.proc_meta["status"] = "exception"
        self.proc_meta["error"] = f"{exc_type.__name__}: {exc}{where}"
        self._prev_excepthook(exc_type, exc, tb)

    def _record_end_if_launcher_lost(self) -> None:
        """When the launcher dies (SIGKILL), its first child gets the launcher-lost signal:
        flush, record the run's end, then die of SIGTERM as before. Only that process, and
        only while the program left that signal alone."""
        lost = launcher_lost_signal()
        if lost is None or os.getpid() != _FIRST_CHILD.get("pid"):
            return
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(lost) is not signal.SIG_DFL:
            return

        def on_launcher_lost(signum: int, frame: Any) -> None:
            signal.signal(signum, signal.SIG_IGN)  # a second one must not cut the close short
            self.close(status="killed", error="SIGTERM (the launcher was lost)")
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(lost, on_launcher_lost)

    def _after_fork(self) -> None:
        self.pid = os.getpid()
        self.writer.reset_after_fork()
        self._flush_lock = threading.RLock()  # the parent's flush thread may have held it
        self.cost = ProfilerCost()
        self._closed = False
        self.start(install_handlers=False)
        # multiprocessing's forked workers leave through os._exit, which skips atexit;
        # its own finalizers still run, so close from there.
        mp_util = sys.modules.get("multiprocessing.util")
        if mp_util is not None:
            mp_util.Finalize(None, self.close, exitpriority=100)


def launcher_lost_signal() -> int | None:
    """The signal `tpuscope run` asks the kernel to send its child when it dies (Linux only)."""
    first = getattr(signal, "SIGRTMIN", None)
    return None if first is None else first + LAUNCHER_LOST_SIGNAL_OFFSET


def record_end_if_orphaned(run_dir: Path, proc_meta: dict[str, Any]) -> None:
    """The program's first process, when its launcher died (SIGKILL, crash), is the last one
    standing: it records the run's end in meta.json, which the launcher would have done."""
    launcher = os.environ.get(ENV_LAUNCHER_PID)
    if not launcher or os.getpid() != _FIRST_CHILD.get("pid") or str(os.getppid()) == launcher:
        return
    status = {"killed": "killed by SIGTERM", "exception": "failed"}.get(
        str(proc_meta.get("status")), "ended"
    )
    fields = {
        "status": status,
        "end_ns": proc_meta.get("end_ns") or time.time_ns(),
        "launcher_lost": True,
        "exit_code": -signal.SIGTERM if status.startswith("killed") else None,
    }
    try:
        Run(run_dir).update_own_meta(
            str(proc_meta.get("host")), **fields
        )  # a pod run: this host's file
    except Exception as exc:
        print(f"tpuscope: cannot record the run's end in {run_dir}: {exc}", file=sys.stderr)


# The launcher's direct child: the process that started with the launcher as its parent.
_FIRST_CHILD: dict[str, int] = (
    {"pid": os.getpid()} if os.environ.get(ENV_LAUNCHER_PID) == str(os.getppid()) else {}
)


_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def without_own_tail(tb: TracebackType | None) -> TracebackType | None:
    """The traceback without tpuscope's trailing frames: a Ctrl-C that lands while tpuscope's
    step hook runs in the program's thread ends at the program's (or its library's) call of
    the hook, as it would without tpuscope, instead of reading as a crash of tpuscope."""
    last_foreign, node = None, tb
    while node is not None:
        if not node.tb_frame.f_code.co_filename.startswith(_OWN_DIR):
            last_foreign = node
        node = node.tb_next
    if last_foreign is None:
        return tb
    last_foreign.tb_next = None
    return tb
