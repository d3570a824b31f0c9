"""torch_xla collector: step boundaries, counter/metric deltas, compiles and fallbacks.

Every step boundary in torch_xla 2.9 — `torch_xla.sync()`, `xm.mark_step()`,
`xm.optimizer_step()`, `torch_xla.compile`, `xp.StepTrace`, `MpDeviceLoader` — goes
through `torch_xla.sync`, which after the step marker calls `xm._run_step_closures()`.
Wrapping that one function sees every step, after the graph was cut, and keeps
tpuscope's own frame off the stack that PT_XLA_DEBUG inspects to name the cause
(it looks at the two innermost Python frames of the step marker call).

A step is one iteration of the program's loop: which boundaries end one, and why
asynchronous execution counters do not, is in xla_steps. Work after the last
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
    HOST_TRANSFER,
    CounterReader,
    Snapshot,
    counter_deltas,
    is_core_counter,
    metric_columns,
    metric_deltas,
)
from tpuscope.collect.xla.eager import watch_eager_mode
from tpuscope.collect.xla.fallback_sites import SiteTracer
from tpuscope.collect.xla.rows import COMPILE_METRICS, StepRecord, StepRows
from tpuscope.collect.xla.shapes import HloDumpShapes
from tpuscope.collect.xla.steps import END, StepRule, boundary_name
from tpuscope.parse.pt_xla_debug import DebugFileTail
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
        self.reader: CounterReader | None = None
        self._original: Any = None
        self._prev: tuple[dict[str, int], dict[str, Any]] = ({}, {})
        self._step_start = time.time_ns()
        self._xm: Any = None
        self.shapes: HloDumpShapes | None = None
        self.sites: SiteTracer | None = None
        self.trace: xla_trace.XlaTrace | None = None
        self._unwrap_eager: Any = None
        self.rule = StepRule({})
        self._full_due = False  # a boundary that was not a step had a full read

    # -- install / uninstall -------------------------------------------------
    def install(self) -> XlaCollector:
        import torch_xla
        import torch_xla.core.xla_model as xm

        self._xlac = torch_xla._XLAC
        self._xm = xm
        self._original = xm._run_step_closures
        self.reader = CounterReader(self._xlac)
        first = self.reader.snapshot(full=True)
        self._prev, self.rows.full_metrics = (dict(first.counters), dict(first.metrics)), first.metrics
        self.rule = StepRule(first.counters)
        self._step_start = time.time_ns()
        collector = self

        def _run_step_closures(*args: Any, **kwargs: Any) -> Any:
            try:
                return collector._original(*args, **kwargs)
            finally:
                start = time.perf_counter_ns()
                compiled = collector.on_step_end(boundary_name())
                collector.session.cost.hooked(start, compiled)

        xm._run_step_closures = _run_step_closures
        self.session.before_close.append(self._at_close)
        self.session.before_flush.append(self.rows.drain)
        session = self.session
        self.shapes, env_set = HloDumpShapes.enable(session.run_dir / layout.DEBUG / f"hlo-{session.host}-{session.pid}")
        self.sites = SiteTracer(self._xlac)
        self.trace = xla_trace.attach(session)  # --trace-steps: profiler window, starts with step 0
        self._unwrap_eager = watch_eager_mode(lambda where: session.set_meta(eager_mode_at=where))
        # device facts wait for the program's first step: querying them would start the
        # runtime, and torch_xla.launch / xmp.spawn refuse to run once it has started
        # the backend is claimed at the first step (below), not here: a process that imported
        # torch_xla and runs JAX steps is a JAX process (the JAX collector owns steps then)
        session.set_meta(env_set_in_process=env_set,
                         shape_source=str(self.shapes.folder) if self.shapes else None,
                         pjrt_device=os.environ.get("PJRT_DEVICE"))
        return self

    def uninstall(self) -> None:
        if self._original is not None:
            self._xm._run_step_closures = self._original
            self._original = None
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
        self.on_step_end(END, self.reader.snapshot(full=True))
        if self.sites is not None:
            self.sites.close()  # nothing follows to trace

    def _at_close(self) -> None:
        self.close_open_step()
        self.record_unread()

    def record_unread(self) -> None:
        """At close: what per-step reads skip (see xla_counters) gets its rows, so per-name
        totals equal torch_xla's own: metric samples since the last full read are split over
        the steps since, by time (later ones go to the last step); counters not read per step
        get their delta as a row of the last step. Core counters keep their last step's
        values (later moves are not a step)."""
        if self._xlac is None or self.step == 0:
            return
        snap = self.reader.snapshot(full=True)
        unread = {n: d for n, d in counter_deltas(snap.counters, self._prev[0]).items() if not is_core_counter(n)}
        self.rows.drain()  # every step's rows first: the split below continues theirs
        if not self.rows.unsplit:  # the last step had a full read: later samples are its own
            self.rows.unsplit.append((self.step - 1, time.time_ns()))
        rows = self.rows.split(snap.metrics)
        rows[self.step - 1] = (unread, rows.get(self.step - 1, ({}, {}))[1])
        self.session.add_columns("metrics", metric_columns(rows))

    def _read_device_facts(self) -> None:
        """Device kind, count and this process's rank, read once the program's first step has
        run, so the runtime is the program's own (started by it, never by tpuscope)."""
        meta: dict[str, Any] = {"pjrt_device": os.environ.get("PJRT_DEVICE")}
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
    def on_step_end(self, boundary: str, snap: Snapshot | None = None) -> bool:
        """Record the step that just ended; True if it compiled. Only what cannot wait is done
        here (reads, the step rule, arming the call-site tracer, the profiler window); its
        rows are built in the flush thread (xla/rows.py)."""
        now = time.time_ns()
        snap = snap or self.reader.snapshot(full=self._full_due)
        counters, metrics = snap.counters, snap.metrics
        prev_counters, prev_metrics = self._prev
        counter_delta = counter_deltas(counters, prev_counters)
        metric_delta = metric_deltas(metrics, prev_metrics)
        if not self.rule.ends_step(boundary, counters, counter_delta, metric_delta):
            # not a step of its own: its deltas go to the next step (xla_steps), and so do a
            # full read a compile here asked for (compile rows need its samples) and host reads
            self._full_due = self._full_due or snap.full
            self.reader.unconsumed()
            return False
        self._full_due = False
        launched = self.rule.launched(counter_delta)
        self.rule.consumed(counter_delta)
        # in place: a core read has fewer names, and a new 60-entry dict is the step's first large
        # allocation, which pays for merging the step's freed chunks (see xla_counters)
        prev_counters.update(counters)
        prev_metrics.update(metrics)
        if self.step == 0:
            self.session.set_meta(backend="torch_xla")
            self._read_device_facts()
        compiled = bool(counter_delta.get("UncachedCompile")) or any(n in metric_delta for n in COMPILE_METRICS)
        fallbacks = {n: c for n, c in counter_delta.items() if n.startswith("aten::")}
        reads = metric_delta.get(HOST_TRANSFER, (0, 0.0))[0]
        self.rows.queue.append(StepRecord(
            step=self.step, boundary=boundary, start_ns=self._step_start, end_ns=now,
            counters=counter_delta, growth=metric_delta, metrics=metrics, full=snap.full,
            launched=launched, fallbacks=fallbacks,
            traced=self.sites.on_step_end(fallbacks, reads) if self.sites is not None else None,
            debug_end=self.debug.size() if self.debug is not None and (compiled or self._debug_every_step) else None,
            modules=self.shapes.poll() if self.shapes is not None and compiled else None,
        ))
        self._step_start = now
        self.step += 1
        if self.trace is not None:
            self.trace.step_ended(self.step)
        return compiled
