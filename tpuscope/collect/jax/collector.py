"""JAX collector: steps, compiles with their cause, retraces, host syncs and op-by-op dispatches.

Rows go to the same tables as torch_xla's (steps, metrics, compiles), plus
`retraces` (why JAX traced again, one row per difference) and `call_sites` (where
host syncs and eager dispatches happened). What each column means for JAX is in
docs/backends.md.

Steps: a `jax.profiler.StepTraceAnnotation` block is a step when the program uses
one. Otherwise the step function is the user's jitted function called most often
(chosen at its second call, switched if another overtakes it); a step runs from
one call of it to the next, so work between calls (data loading, `float(loss)`)
belongs to the step it follows. A program with neither gets one step for the whole
run. Work before the first step is counted in step 0; work after the last one
becomes a last step with boundary "end". A step ends when its outputs are ready, not
when its asynchronous dispatch returned (jax_ready).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import threading
import time
import weakref
from collections import Counter, deque
from typing import Any

from tpuscope.collect.frames import is_user_file
from tpuscope.collect.jax.compiles import CompileEvent, CompileTracker
from tpuscope.collect.jax.explain import REDEFINED, STATIC_ARG, Explanation, cause_text
from tpuscope.collect.jax.hooks import (
    AnnotationHook,
    EagerHook,
    JitHook,
    JitTarget,
    SyncHook,
)
from tpuscope.collect.jax.ready import StepClock, Timing
from tpuscope.collect.jax.rows import StepAcc, metric_rows, site_rows, step_row
from tpuscope.collect.session import Session
from tpuscope.collect.trace_steps import ProfilerWindow, trace_dir, window_from_env

_TPUSCOPE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
ANNOTATION = "StepTraceAnnotation"
READY_WAIT_S = 5.0  # at exit, how long outputs still running may take to be ready


_LIVE: weakref.WeakSet[JaxCollector] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for collector in list(_LIVE):
        collector._rows.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class JaxCollector:
    """Turns a JAX program's compiles, steps and syncs into rows of the session's tables."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.step = 0
        self.compile_index = 0
        self.mode: str | None = None  # ANNOTATION or "jit" once a step source is seen
        self.step_fn: JitTarget | None = None
        self._open = False
        self._start_ns = 0
        self._boundary = ""
        self._depth = 0
        self._steps_written = 0
        self._last_end = 0
        self._calls: Counter = Counter()
        self._first_call_ns: dict[JitTarget, int] = {}
        self._acc = StepAcc()
        self._lock = threading.RLock()
        self.clock = StepClock(self._emit_step, self._lock)
        self._installed_at = time.time_ns()
        self._finished = False
        self._device_meta_done = False
        self._hash_seen: Counter = Counter()
        self._jitted_names: set[str] = set()
        self.tracker = CompileTracker(self._on_compile, self._on_metric)
        self._hooks: list[Any] = []
        self._profiler: ProfilerWindow | None = None
        self._hook_ns = 0  # hook time on the program's path since the last step closed
        self._rows: deque[tuple[Timing, int, int]] = deque()  # steps whose rows wait for the flush
        session.before_flush.append(self._write_rows)
        _LIVE.add(self)  # a forked child must not write its parent's steps

    # -- install / uninstall -------------------------------------------------------
    def install(self) -> JaxCollector:
        import jax
        from jax._src import source_info_util, traceback_util

        for module in (source_info_util, traceback_util):  # never blame tpuscope's wrappers
            if _TPUSCOPE_DIR not in getattr(module, "_exclude_paths", ()):  # once per process
                module.register_exclusion(_TPUSCOPE_DIR)
        try:
            self.tracker.install(jax)
            for hook in (JitHook(self), AnnotationHook(self), SyncHook(self), EagerHook(self)):
                self._hooks.append(hook.install(jax))
        except Exception:
            self.uninstall()  # leave the program exactly as it was
            raise
        self._profiler = self._profiler_window(jax)
        meta: dict[str, Any] = {
            "jax_version": jax.__version__,
            "jax_explain_cache_misses": "set by tpuscope" if self.tracker.owns_explain else "user setting",
            "jax_step_source": "none",
        }
        if not self.session.proc_meta.get("backend"):
            meta["backend"] = "jax"
        self.session.set_meta(**meta)
        atexit.register(self.finish)
        return self

    def _profiler_window(self, jax: Any) -> ProfilerWindow | None:
        """jax.profiler traces of the steps in TPUSCOPE_TRACE_STEPS, into <run>/trace/."""
        window = window_from_env()
        if window is None:
            return None
        directory = trace_dir(self.session.run_dir, "jax")
        self.session.set_meta(trace_steps=[window.start, window.stop], trace_dir=str(directory))

        def stop() -> None:
            # Dispatch is asynchronous: wait for every pending computation (their outputs are
            # live arrays) so the window's device work is inside the trace, then stop.
            jax.block_until_ready(jax.live_arrays())
            jax.profiler.stop_trace()

        return ProfilerWindow(window, directory, jax.profiler.start_trace, stop,
                              lambda files: self.session.set_meta(trace_files=files))

    def uninstall(self) -> None:
        self.finish()
        atexit.unregister(self.finish)
        for hook in reversed(self._hooks):
            hook.uninstall()
        self._hooks = []
        self.tracker.uninstall()

    def close_open_step(self) -> None:
        """Nothing to do here: `uninstall` always closes the open step (`finish`)."""

    def finish(self) -> None:
        """Close the open step (or write the one whole-run step) and record the devices."""
        self.clock.wait_idle(READY_WAIT_S)
        with self._lock:
            if self._finished:
                return
            self._finished = True
            now = time.time_ns()
            if self._open:
                self._close(now)
            elif self._has_work():  # work after the last step, or a run with no step source
                self._open_at(self._installed_at if self._steps_written == 0 else self._last_end, "end")
                self._close(now)
            self.clock.finish()
            if self._profiler is not None:
                self._profiler.close()
            self._device_meta()

    def on_step_end(self, boundary: str) -> None:
        """autostart.stop(close_open_step=True) ends the current step here."""
        with self._lock:
            if self._open:
                self._close(time.time_ns())

    # -- steps ---------------------------------------------------------------------
    def _owns_steps(self) -> bool:
        return self.session.proc_meta.get("backend") in (None, "jax")

    def _open_at(self, t_ns: int, boundary: str) -> None:
        if self._open:
            self._close(t_ns)
        self._open, self._start_ns, self._boundary = True, t_ns, boundary
        self.clock.opened(self.step, boundary, t_ns)
        if self._profiler is not None:
            self._profiler.step_opened(self.step)

    def charge(self, ns: int) -> None:
        """Hooks report the time they spent on the program's path; each step's share goes to
        the session's cost (ProfilerCost) when it closes, apart for steps that compiled."""
        self._hook_ns += ns

    def _charge_step(self, compiled: bool) -> None:
        cost, spent, self._hook_ns = self.session.cost, self._hook_ns, 0
        if not self._owns_steps():  # torch_xla's collector counts this process's steps
            cost.hook_ns += spent
        else:
            cost.charge(spent, compiled)

    def _close(self, t_ns: int) -> None:
        acc, self._acc = self._acc, StepAcc()
        self._charge_step(bool(acc.compiles))
        self._open, self._last_end = False, t_ns
        self.clock.closed(acc, t_ns)  # its row is written once its outputs are ready
        if self._profiler is not None:
            self._profiler.step_closed(self.step)
        self.step += 1
        self._steps_written += 1

    def _has_work(self) -> bool:
        return self._acc.has_work()

    def on_jit_created(self, target: JitTarget) -> None:
        self._jitted_names.add(target.name.rsplit(".", 1)[-1])

    def on_jit_return(self, target: JitTarget, outputs: Any) -> None:
        """The step is not done before what its step function (or, in a StepTraceAnnotation
        block, any jitted call) returned is ready."""
        with self._lock:
            if self._open and (target is self.step_fn or self.mode == ANNOTATION):
                self.clock.outputs(outputs)

    def on_jit_call(self, target: JitTarget) -> None:
        with self._lock:
            if target is self.step_fn and self.mode == "jit":  # the common case: stay cheap
                self._calls[target] += 1
                self._open_at(time.time_ns(), self._boundary)
                self._acc.jit_calls += 1
                return
            if self.mode != ANNOTATION and target.user:
                self._choose_step(target, time.time_ns())
            if target is self.step_fn and self.mode == "jit":
                self._acc.jit_calls += 1
            else:
                self._acc.call(target.name)

    def _choose_step(self, target: JitTarget, now: int) -> None:
        self._calls[target] += 1
        self._first_call_ns.setdefault(target, now)
        boundary = f"jit:{target.name}"
        if self.step_fn is None:
            if self._calls[target] < 2:
                return
            self.step_fn, self.mode = target, "jit"
            self.session.set_meta(jax_step_source=f"calls of jitted {target.name} ({target.defined_at})")
            self._open_at(self._first_call_ns[target], boundary)
        elif target != self.step_fn:
            if self._calls[target] <= self._calls[self.step_fn]:
                return
            self.step_fn = target
            self.session.set_meta(jax_step_source=f"calls of jitted {target.name} ({target.defined_at})")
        self._open_at(now, boundary)

    def on_annotation(self, entering: bool) -> None:
        with self._lock:
            now = time.time_ns()
            if entering:
                self._depth += 1
                if self._depth > 1:
                    return
                if self.mode != ANNOTATION:
                    if self._open:
                        self._close(now)
                    self.mode = ANNOTATION
                    self.session.set_meta(jax_step_source="jax.profiler.StepTraceAnnotation")
                self._open_at(now, ANNOTATION)
            else:
                self._depth = max(0, self._depth - 1)
                if self._depth == 0 and self._open and self.mode == ANNOTATION:
                    self._close(now)

    # -- syncs, eager dispatches, metrics ------------------------------------------------
    def on_sync(self, kind: str, location: str | None, library: str | None = None) -> None:
        with self._lock:
            self._acc.sync(kind, location, library)

    def on_eager(self, primitive: str, location: str | None, library: str | None, elapsed_ns: int) -> None:
        with self._lock:
            self._acc.dispatch(primitive, location, library, elapsed_ns)

    def _on_metric(self, name: str, seconds: float | None) -> None:
        with self._lock:
            self._acc.metric(name, None if seconds is None else seconds * 1e9)

    # -- compiles --------------------------------------------------------------------------
    def _on_compile(self, event: CompileEvent) -> None:
        self._device_meta()
        with self._lock:
            index, self.compile_index = self.compile_index, self.compile_index + 1
            duration_ns = int(event.duration_s * 1e9)
            self._acc.compiles += 1
            self._acc.compile_ns += duration_ns
            step = self.step if self._owns_steps() else -1
            self.session.add("compiles", self._compile_row(event, step, index, duration_ns))
            self.session.add_many("retraces", _retrace_rows(event, step, index))

    def _compile_row(self, event: CompileEvent, step: int, index: int, duration_ns: int) -> dict[str, Any]:
        eager = False
        if event.explanation is not None:
            cause = cause_text(event.explanation, event.function)
        elif event.function in self._jitted_names:  # jax.jit of a library function, e.g. model.init
            cause = f"compile of jitted {event.function} (library code, which JAX does not explain)"
        elif self.tracker.explaining():
            cause = f"JAX library function {event.function} compiled for a call outside jit (eager op)"
            eager = True
        else:
            cause = f"compile of {event.function}"
        if event.persistent_cache:
            cause += f" [persistent cache {event.persistent_cache}]"
        function = event.explanation.function if event.explanation is not None else event.function
        from tpuscope.schema import table_row  # imported on the first compile, not at start-up

        return table_row(
            "compiles", backend="jax", function=function if function != "?" else event.function,
            eager=eager, step=step, index=index, time_ns=int(event.start_s * 1e9),
            duration_ns=duration_ns, graph_hash=self._graph_hash(event), cause=cause,
            location=event.location, frames=event.frames, input_shapes=event.input_shapes,
            num_inputs=len(event.input_shapes) if event.input_shapes is not None else None,
        )

    def _graph_hash(self, event: CompileEvent) -> str:
        """A digest of what makes a JAX executable distinct: function, definition site,
        input avals and static values (JAX exposes no HLO fingerprint without the
        persistent cache). A compile is a cache miss, so a repeated key is a different
        program (e.g. an eager op with new static params) and gets an occurrence
        suffix, except a function re-created on every call: that is the same program
        compiled again, and keeps its hash."""
        key = _graph_key(event)
        seen = self._hash_seen[key]
        self._hash_seen[key] += 1
        expl = event.explanation
        if seen and not (expl is not None and expl.kind == REDEFINED):
            key = f"{key}#{seen}"
        return hashlib.sha1(key.encode()).hexdigest()[:16]

    # -- rows --------------------------------------------------------------------------
    def _emit_step(self, timing: Timing, start_ns: int, end_ns: int) -> None:
        """A step is done: its rows are built by the next flush (in the flush thread)."""
        self._rows.append((timing, start_ns, end_ns))

    def _write_rows(self) -> None:
        """The rows of the steps done since the last flush, one column chunk per table (runs in
        the flush thread, or at close)."""
        if not self._rows:
            return
        tables: dict[str, list[dict[str, Any]]] = {"steps": [], "metrics": [], "call_sites": []}
        while self._rows:
            self._step_rows(tables, *self._rows.popleft())
        for table, rows in tables.items():
            if rows:
                names = dict.fromkeys(name for row in rows for name in row)
                self.session.add_columns(table, {name: [row.get(name) for row in rows] for name in names})

    def _step_rows(self, tables: dict[str, list[dict[str, Any]]], timing: Timing, start_ns: int, end_ns: int) -> None:
        if not self._owns_steps():
            return
        acc, step = timing.acc, timing.step
        tables["steps"].append(step_row(acc, step, timing.boundary, start_ns, end_ns))
        if acc.calls or acc.eager or acc.syncs or acc.metrics:
            tables["metrics"] += metric_rows(acc, step)
        if acc.sites:
            tables["call_sites"] += site_rows(acc, step)

    def _device_meta(self) -> None:
        """Device kind and count, once the program's backend exists (never initialise it)."""
        if self._device_meta_done:
            return
        try:
            from jax._src import xla_bridge

            if not xla_bridge.backends_are_initialized():
                return
            import jax

            devices = jax.devices()
            self._device_meta_done = True
            self.session.set_meta(
                platform=devices[0].platform if devices else None,
                device_kind=devices[0].device_kind if devices else None,
                device_count=len(devices), process_index=jax.process_index())
        except Exception as exc:  # a device query must never break the program
            self._device_meta_done = True
            self.session.set_meta(device_error=str(exc))


def _graph_key(event: CompileEvent) -> str:
    expl = event.explanation
    statics = [d.after or "" for d in expl.diffs if d.kind == STATIC_ARG] if expl else []
    defined = expl.defined_at if expl else ""
    return "|".join([event.module, defined or "", ",".join(event.input_shapes or []), *statics])


def _retrace_rows(event: CompileEvent, step: int, index: int) -> list[dict[str, Any]]:
    """One row per difference; traces that led to no compile have no compile_index."""
    rows = []
    for expl, compiled in [(e, index) for e in event.explanations] + [(e, None) for e in event.stale_explanations]:
        rows += [_retrace_row(expl, diff, step, compiled, event.location) for diff in expl.diffs]
    return rows


def _retrace_row(expl: Explanation, diff: Any, step: int, index: int | None, fallback: str | None) -> dict[str, Any]:
    """JAX names the call site itself, skipping only its own frames: a call inside flax or
    optax is located at the user's line that led to it (the compile's location) instead."""
    callsite = expl.callsite
    if callsite and not is_user_file(callsite.rsplit(":", 1)[0]):
        callsite = fallback or callsite
    return {
        "step": step, "compile_index": index, "time_ns": int(expl.time_s * 1e9),
        "function": expl.function, "defined_at": expl.defined_at, "location": callsite,
        "kind": diff.kind, "arg": diff.arg, "before": diff.before, "after": diff.after,
        "detail": diff.detail,
    }
