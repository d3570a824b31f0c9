"""torch_xla collector: step boundaries, counter/metric deltas, compiles and fallbacks.

Every step boundary in torch_xla 2.9 — `torch_xla.sync()`, `xm.mark_step()`,
`xm.optimizer_step()`, `torch_xla.compile`, `xp.StepTrace`, `MpDeviceLoader` — goes
through `torch_xla.sync`, which after the step marker calls `xm._run_step_closures()`.
Wrapping that one function sees every step, after the graph was cut, and keeps
tpuscope's own frame off the stack that PT_XLA_DEBUG inspects to name the cause
(it looks at the two innermost Python frames of the step marker call).

A step is one iteration of the program's loop: which boundaries end one, and why
asynchronous execution counters do not, is in steps.py. Work after the last
boundary (a final eval ending in `.item()`, a `generate()` call) becomes a last step
"end" when the session closes, whichever way it closes (exit, profile(), pytest watch).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from tpuscope.collect.session import Session
from tpuscope.collect.xla import trace as xla_trace
from tpuscope.collect.xla.counters import (
    CACHED,
    COPIES,
    EXECUTED,
    FALLBACKS,
    HOST_TRANSFER,
    UNCACHED,
    CounterReader,
    Growth,
    Snapshot,
    counter_deltas,
    is_core_counter,
    metric_columns,
    metric_deltas,
)
from tpuscope.collect.xla.dynamo import CompiledCalls
from tpuscope.collect.xla.eager import watch_eager_mode
from tpuscope.collect.xla.fallback_sites import SiteTracer
from tpuscope.collect.xla.ir_frames import IrFrames
from tpuscope.collect.xla.library_loops import LibraryLoops
from tpuscope.collect.xla.rows import COMPILE_METRICS, StepRecord, StepRows
from tpuscope.collect.xla.shapes import HloDumpShapes
from tpuscope.collect.xla.steps import (
    DYNAMO_CALL,
    LIBRARY_CALL,
    LOOKUPS,
    OPTIMIZER,
    StepRule,
    boundary_name,
    library_caller,
)
from tpuscope.collect.xla.steps import EXECUTED as EXECUTED_COUNTER
from tpuscope.parse.pt_xla_debug import DebugFileTail
from tpuscope.parse.xla_counter_names import is_fallback_counter
from tpuscope.store import layout


class XlaCollector:
    """Turns each torch_xla step boundary into rows of the session's tables."""

    def __init__(self, session: Session, debug_file: str | Path | None = None) -> None:
        self.session = session
        self.debug = DebugFileTail(Path(debug_file)) if debug_file else None
        # PT_XLA_DEBUG_LEVEL 1 writes text only when a graph compiles; 2 on every execution
        self._debug_every_step = (os.environ.get("PT_XLA_DEBUG_LEVEL") or "0") not in ("0", "1")
        self.rows = StepRows(session, self.debug)  # built in the flush thread (xla/rows.py)
        self.step = 0
        self._xlac: Any = None
        self.reader: CounterReader  # made at install (torch_xla's counters): read at every step
        self._original: Any = None
        self._counts: dict[str, int] = {}  # every counter at the last step (see _counts_now)
        self._prev_metrics: dict[str, Any] = {}  # every metric's data at the last step that read it
        self._last_names: tuple[str, ...] = ()  # the per-step counters ...
        self._last: tuple[int, ...] = ()  # ... and their values at the last step
        self._step_start = time.time_ns()
        self._xm: Any = None
        self.shapes: HloDumpShapes | None = None
        self.sites: SiteTracer | None = None
        self.trace: xla_trace.XlaTrace | None = None
        self._unwrap_eager: Any = None
        self.rule = StepRule({})
        self._full_due = False  # a boundary that was not a step had a full read
        self.frames: IrFrames | None = None  # --deep's IR frame capture, by compiles
        self.compiled_calls: CompiledCalls | None = (
            None  # torch.compile(openxla) calls (xla/dynamo.py)
        )
        self._direct_at_step = 0  # dynamo's cached-graph runs when the last step ended
        self._optimizer_hook: Any = None
        self.library_loops: LibraryLoops | None = None  # generate() calls (xla/library_loops.py)

    # -- install / uninstall -------------------------------------------------
    def install(self) -> XlaCollector:
        import torch_xla
        import torch_xla.core.xla_model as xm

        self._xlac = torch_xla._XLAC
        self._xm = xm
        self._original = xm._run_step_closures
        self.reader = CounterReader(self._xlac)
        first = self.reader.snapshot(full=True)
        assert first.counters is not None
        self._counts, self._prev_metrics, self.rows.full_metrics = (
            dict(first.counters),
            dict(first.metrics),
            first.metrics,
        )
        self._last_names, self._last = first.names, first.values
        self.reader.step_copies = first.values[COPIES]
        self.rule = StepRule(first.counters)
        self._step_start = time.time_ns()
        collector = self

        def _run_step_closures(*args: Any, **kwargs: Any) -> Any:
            try:
                return collector._original(*args, **kwargs)
            finally:
                start = time.perf_counter_ns()
                name, library = boundary_name()
                compiled = collector.on_step_end(name, library=library)
                collector.session.cost.hooked(start, compiled)

        xm._run_step_closures = _run_step_closures
        self._watch_loops()
        self.session.before_close.append(self._at_close)
        self.session.before_flush.append(self.rows.drain)
        session = self.session
        self.shapes, env_set = HloDumpShapes.enable(
            session.run_dir / layout.DEBUG / f"hlo-{session.host}-{session.pid}"
        )
        if self.shapes is not None and self.shapes.owned:
            session.per_compile_flush.append(self.shapes.sweep)  # deletes off the step's path
        self.sites = SiteTracer(self._xlac)
        self.frames = IrFrames.for_process(self._xlac, session.warmup)
        self.trace = xla_trace.attach(session)  # --trace-steps: profiler window, starts with step 0
        self._unwrap_eager = watch_eager_mode(lambda where: session.set_meta(eager_mode_at=where))
        # device facts wait for the program's first step: querying them would start the
        # runtime, and torch_xla.launch / xmp.spawn refuse to run once it has started
        # the backend is claimed at the first step (below), not here: a process that imported
        # torch_xla and runs JAX steps is a JAX process (the JAX collector owns steps then)
        session.set_meta(
            env_set_in_process=env_set,
            shape_source=str(self.shapes.folder) if self.shapes else None,
            pjrt_device=os.environ.get("PJRT_DEVICE"),
        )
        return self

    def _watch_loops(self) -> None:
        """Step sources beyond torch_xla.sync (xla/steps.py): optimizer steps (a framework's
        loop is one optimizer step an iteration), torch.compile'd calls (xla/dynamo.py) and
        calls of library functions that run a device loop themselves (xla/library_loops.py)."""
        from torch.optim.optimizer import register_optimizer_step_post_hook

        def _optimizer_stepped(optimizer: Any, *_: Any) -> None:
            if self.rule.optimizer_stepped(optimizer):  # a loop with no sync (steps.py)
                start = time.perf_counter_ns()
                compiled = self.on_step_end(OPTIMIZER)
                self.session.cost.hooked(start, compiled)

        self._optimizer_hook = register_optimizer_step_post_hook(_optimizer_stepped)

        def _compiled_call_returned() -> None:
            start = time.perf_counter_ns()
            compiled = self.on_step_end(DYNAMO_CALL, library=library_caller(4))
            self.session.cost.hooked(start, compiled)

        self.compiled_calls = CompiledCalls(self._xlac, _compiled_call_returned).install()

        def _library_loop_returned() -> None:
            start = time.perf_counter_ns()
            compiled = self.on_step_end(
                LIBRARY_CALL, library=library_caller(3)
            )  # 3: the call's caller
            self.session.cost.hooked(start, compiled)

        self.library_loops = LibraryLoops(_library_loop_returned).install()

    def uninstall(self) -> None:
        if self._original is not None:
            self._xm._run_step_closures = self._original
            self._original = None
        if self._optimizer_hook is not None:
            self._optimizer_hook.remove()
            self._optimizer_hook = None
        if self.compiled_calls is not None:
            self.compiled_calls.uninstall()
        if self.library_loops is not None:
            self.library_loops.uninstall()
        if self.sites is not None:
            self.sites.close()
        if self._unwrap_eager is not None:
            self._unwrap_eager()
            self._unwrap_eager = None

    def close_open_step(self) -> None:
        """Record work since the last boundary (a block that ends in `.item()`, not a sync)
        as a last step "end"; the previous step's async execution finishing late is not work."""
        if self._xlac is None:
            return
        self.on_step_end(self.rule.end_boundary(), self.reader.snapshot(full=True))
        if self.sites is not None:
            self.sites.close()  # nothing follows to trace

    def _at_close(self) -> None:
        self.close_open_step()
        self.record_unread()
        if self.shapes is not None:
            self.shapes.close()  # an owned dump folder goes with the session (read at the last step)
        if self.frames is not None:
            self.session.set_meta(ir_frames_off_steps=self.frames.off_steps)

    def record_unread(self) -> None:
        """At close: what per-step reads skip (see counters.py) gets its rows, so per-name
        totals equal torch_xla's own: metric samples since the last full read are split over
        the steps since, by time (later ones go to the last step); counters not read per step
        get their delta as a row of the last step. Core counters keep their last step's
        values (later moves are not a step)."""
        if self._xlac is None or self.step == 0:
            return
        snap = self.reader.snapshot(full=True)
        assert snap.counters is not None
        unread = {
            n: d
            for n, d in counter_deltas(snap.counters, self._counts_now()).items()
            if not is_core_counter(n)
        }
        self.rows.drain()  # every step's rows first: the split below continues theirs
        if not self.rows.unsplit_steps:  # the last step had a full read: later samples are its own
            self.rows.unsplit_steps.append(self.step - 1)
            self.rows.unsplit_ends.append(time.time_ns())
        own, columns = self.rows.split(snap.metrics)
        last = metric_columns({self.step - 1: (unread, own)})
        from tpuscope.schema import table_columns  # at close: pyarrow is loaded by the flushes

        for chunk in (columns, last):  # the split's rows, then the last step's
            if len(chunk["step"]):
                self.session.add_columns("metrics", table_columns("metrics", **chunk))

    def _read_device_facts(self) -> None:
        """Device kind, count and this process's rank, read once the program's first step has
        run, so the runtime is the program's own (started by it, never by tpuscope)."""
        meta: dict[str, Any] = {
            "pjrt_device": os.environ.get("PJRT_DEVICE"),
            "compile_cache": xla_cache_settings(),
        }
        try:
            import torch_xla.runtime as xr

            if self._xlac._xla_runtime_is_initialized():
                meta["device_kind"] = xr.device_type()
                meta["device_count"] = xr.global_runtime_device_count()
                self.session.set_rank(runtime_ordinal=xr.global_ordinal())
        except Exception as exc:  # device query failures must not break the user's run
            meta["device_error"] = str(exc)
        self.session.set_meta(**meta)

    # -- per step --------------------------------------------------------------
    def on_step_end(
        self, boundary: str, snap: Snapshot | None = None, library: bool = False
    ) -> bool:
        """Record the step that just ended; True if it compiled. Only what cannot wait is done
        here (reads, the step rule, arming the call-site tracer, the profiler window); its
        rows are built in the flush thread (xla/rows.py). A plain step (no full read, host
        transfer, fallback, compile or armed tracer) costs the reads, a few tuple comparisons
        and one row of integers appended to a PlainLog (xla/plain.py): no object per step."""
        now = time.time_ns()
        snap = snap or self.reader.snapshot(full=self._full_due)
        if snap.full:
            return self._full_step(boundary, snap, now, library)
        values, before = snap.values, self._last
        if snap.names is not self._last_names:  # only after a full read that was no step
            before = tuple(self._counts_now().get(name, 0) for name in snap.names)
        lookups = values[UNCACHED] - before[UNCACHED] + values[CACHED] - before[CACHED]
        executed = values[EXECUTED] - before[EXECUTED]
        fell_back = values[FALLBACKS] != before[FALLBACKS]
        growth: Growth = {}
        if snap.metrics:
            growth = metric_deltas(snap.metrics, self._prev_metrics)
        launched = self.rule.end(
            boundary,
            values[UNCACHED] + values[CACHED],
            lookups,
            executed,
            fell_back or HOST_TRANSFER in growth,
            library,
            self._direct_runs(),
        )
        if launched is None:
            return False  # not a step of its own: its deltas go to the next step (steps.py)
        self._direct_at_step += self._direct_runs()
        self._last_names, self._last = snap.names, values
        if snap.metrics:
            self._prev_metrics.update(snap.metrics)
        compiled = values[UNCACHED] != before[UNCACHED]
        sites = self.sites
        if not (
            growth
            or fell_back
            or compiled
            or self.step == 0
            or self._debug_every_step
            or (sites is not None and not sites.idle)
        ):
            # a plain step (most of them): logged as integers (xla/plain.py), no record object
            self.rows.log_plain(
                snap.names, before, values, (self.step, self._step_start, now, launched), boundary
            )
            self.reader.step_copies = values[COPIES]
            self._advance(now, False)
            return False
        fallbacks = (
            {
                n: v - b
                for n, v, b in zip(
                    snap.names[FALLBACKS], values[FALLBACKS], before[FALLBACKS], strict=True
                )
                if v != b
            }
            if fell_back
            else {}
        )
        record = StepRecord(
            self.step,
            boundary,
            self._step_start,
            now,
            None,
            (snap.names, values, before),
            growth,
            snap.metrics,
            False,
            launched,
        )
        return self._step(snap, now, record, compiled, fallbacks)

    def _full_step(self, boundary: str, snap: Snapshot, now: int, library: bool = False) -> bool:
        """A boundary with a full read: deltas of every counter and metric."""
        assert snap.counters is not None
        prev_counters = self._counts_now()
        counter_delta = counter_deltas(snap.counters, prev_counters)
        metric_delta = metric_deltas(snap.metrics, self._prev_metrics)
        lookups = sum(counter_delta.get(name, 0) for name in LOOKUPS)
        executed = counter_delta.get(EXECUTED_COUNTER, 0)
        fallbacks = {n: c for n, c in counter_delta.items() if is_fallback_counter(n)}
        launched = self.rule.end(
            boundary,
            sum(snap.counters.get(name, 0) for name in LOOKUPS),
            lookups,
            executed,
            bool(fallbacks) or HOST_TRANSFER in metric_delta,
            library,
            self._direct_runs(),
        )
        if launched is None:
            # its deltas go to the next step, and so does the full read (compile rows need its
            # samples): the next boundary reads everything again
            self._full_due = True
            return False
        self._full_due = False
        self._direct_at_step += self._direct_runs()
        # in place: a new 60-entry dict is the step's first large allocation, which pays for
        # merging the step's freed chunks (see counters.py)
        prev_counters.update(snap.counters)
        self._prev_metrics.update(snap.metrics)
        self._last_names, self._last = snap.names, snap.values
        record = StepRecord(
            self.step,
            boundary,
            self._step_start,
            now,
            counter_delta,
            None,
            metric_delta,
            snap.metrics,
            True,
            launched,
        )
        compiled = bool(counter_delta.get("UncachedCompile")) or any(
            n in metric_delta for n in COMPILE_METRICS
        )
        return self._step(snap, now, record, compiled, fallbacks)

    def _step(
        self,
        snap: Snapshot,
        now: int,
        record: StepRecord,
        compiled: bool,
        fallbacks: dict[str, int],
    ) -> bool:
        """The boundary ended a step: what must happen at the step, then the record is queued."""
        self.reader.step_copies = snap.values[
            COPIES
        ]  # host transfers are read when they move since
        if self.step == 0:
            self.session.set_meta(backend="torch_xla")
            self._read_device_facts()
        growth = record.growth
        sites = self.sites
        if sites is not None and (fallbacks or HOST_TRANSFER in growth or not sites.idle):
            record.traced = sites.on_step_end(fallbacks, growth.get(HOST_TRANSFER, (0, 0.0))[0])
        if compiled or self._debug_every_step:
            record.debug_end = self.debug.size() if self.debug is not None else None
            record.modules = self.shapes.poll() if self.shapes is not None and compiled else None
        if record.plain():  # e.g. a fallback step the call-site tracer did not trace
            assert record.raw is not None
            names, values, before = record.raw
            self.rows.log_plain(
                names,
                before,
                values,
                (record.step, record.start_ns, now, record.launched),
                record.boundary,
            )
        else:
            self.rows.queue.append(record)
        self._advance(now, compiled)
        return compiled

    def _advance(self, now: int, compiled: bool) -> None:
        """What every step's end does last: IR frames for the next step's trace (--deep), the
        step count, the profiler window."""
        if self.frames is not None:
            self.frames.after_step(self.step, compiled)
        self._step_start = now
        self.step += 1
        if self.trace is not None:
            self.trace.step_ended(self.step)

    def _direct_runs(self) -> int:
        """Dynamo's cached-graph runs since the last step (graphs no compile counter sees)."""
        calls = self.compiled_calls
        return calls.runs - self._direct_at_step if calls is not None else 0

    def _counts_now(self) -> dict[str, int]:
        """Every counter's value at the last step: the per-step counters are kept as a tuple
        (no dict per step) and folded in here, before a full read's deltas."""
        self._counts.update(zip(self._last_names, self._last, strict=True))
        return self._counts


def xla_cache_settings() -> dict[str, Any]:
    """torch_xla's persistent cache as this process has it once its first step ran (torch_xla
    creates its computation cache at the first compile, from XLA_PERSISTENT_CACHE_PATH, which
    `torch_xla.runtime.initialize_cache(path)` sets); whether it hit is its PersistentCacheHit
    and PersistentCacheMiss counters (metrics table)."""
    folder = os.environ.get("XLA_PERSISTENT_CACHE_PATH") or None
    return {
        "backend": "torch_xla",
        "on": folder is not None,
        "dir": folder,
        "read_only": os.environ.get("XLA_PERSISTENT_CACHE_READ_ONLY") == "1",
    }
