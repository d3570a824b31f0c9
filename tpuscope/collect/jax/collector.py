"""JAX collector: steps, compiles with their cause, retraces, host syncs and op-by-op dispatches.

Rows go to the same tables as torch_xla's (steps, metrics, compiles), plus
`retraces` (why JAX traced again, one row per difference) and `call_sites` (where
host syncs and eager dispatches happened). What each column means for JAX is in
docs/backends.md. Where a step begins and ends is steps.py (the hooks' sink, which
this class extends); its rows are rows.py, built by the flush; a compile's rows are
compile_rows.py.
"""

from __future__ import annotations

import atexit
import os
import time
import weakref
from typing import Any, Protocol

from tpuscope.collect.jax.callbacks import CallbackHook, Inside, callback_rows
from tpuscope.collect.jax.compile_rows import CompileRows, retrace_rows
from tpuscope.collect.jax.compiles import CompileEvent, CompileTracker, cache_settings
from tpuscope.collect.jax.hooks import AnnotationHook, EagerHook, SyncHook
from tpuscope.collect.jax.jit_hook import JitHook, PmapHook
from tpuscope.collect.jax.keras_batches import KerasBatchHook
from tpuscope.collect.jax.profiling import profiler_window, wait_for_device
from tpuscope.collect.jax.rows import JIT_CALL, OpenStep, StepColumns
from tpuscope.collect.jax.sink import JitTarget
from tpuscope.collect.jax.steps import StepTracker
from tpuscope.collect.jax.tail import LOOP_STEPS, HeldRuns, TailMark, copy_counts
from tpuscope.collect.session import Session
from tpuscope.collect.trace_steps import ProfilerWindow
from tpuscope.schema_consts import AFTER_LOOP

_TPUSCOPE_DIR = (
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
)
READY_WAIT_S = 5.0  # at exit, how long outputs still running may take to be ready


_LIVE: weakref.WeakSet[JaxCollector] = weakref.WeakSet()


class _Hook(Protocol):
    """What the collector puts into jax and takes out again (hooks.py, jit_hook.py)."""

    def install(self, jax: Any) -> Any: ...

    def uninstall(self) -> None: ...


def _after_fork_in_child() -> None:
    for collector in list(_LIVE):
        collector._rows.clear()
        collector._events.clear()
        collector._callbacks.clear()
        collector.lane.close()  # the parent's waiting calls are not the child's steps
        collector.lane.calls = collector.lane.taken = 0
        del collector.lane.marks[:], collector.lane.reads[:]
        if collector._tail is not None:  # the parent's mark: the step's own accumulator again
            collector._acc = collector._tail.before  # (the rows it held are the parent's)
            collector._tail = None
        collector._held_runs = HeldRuns()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class JaxCollector(StepTracker):
    """Turns a JAX program's compiles, steps and syncs into rows of the session's tables."""

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.compile_index = 0
        self._installed_at = time.time_ns()
        self._finished = False
        self._final_step: int | None = None  # the last step, once finish() closed it
        self._device_meta_done = False
        self.compile_rows = CompileRows()
        self.tracker = CompileTracker(self._on_compile, self._on_metric)
        self._hooks: list[_Hook] = []
        self._tracking: list[JitHook] = []  # the hooks that name the call a compile belongs to
        self._syncs = SyncHook(self)
        # host callbacks in compiled code, timed on the host; the reads they make are theirs
        self._callbacks = CallbackHook(self._callback_step, quiet=self._syncs.local)
        self._held_runs = HeldRuns()  # callbacks' runs of a marked step (tail.py)
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
            self._tracking = [JitHook(self), PmapHook(self)]
            hooks: list[_Hook] = [
                *self._tracking,
                AnnotationHook(self),
                KerasBatchHook(self),
                self._syncs,
                EagerHook(self, self._syncs.local),
                self._callbacks,
            ]
            for hook in hooks:
                self._hooks.append(hook.install(jax))
        except Exception:
            self.uninstall()  # leave the program exactly as it was
            raise
        self._profiler = self._window = self._profiler_window(jax)
        meta: dict[str, Any] = {
            "jax_version": jax.__version__,
            "jax_explain_cache_misses": "set by tpuscope"
            if self.tracker.owns_explain
            else "user setting",
            "jax_step_source": "none",
        }
        self.session.set_meta(**meta)  # the backend label waits for JAX to run (_device_meta)
        atexit.register(self.finish)
        return self

    def _profiler_window(self, jax: Any) -> ProfilerWindow | None:
        """The run's profiler window (profiling.py), the program's own profiler hooked to
        take over from it."""
        made = profiler_window(self.session, self.clock, self._syncs.local, self._device_meta, jax)
        if made is None:
            return None
        window, users = made
        self._hooks.append(users.install(jax))
        return window

    def uninstall(self) -> None:
        self.finish(at_exit=False)
        atexit.unregister(self.finish)
        for hook in reversed(self._hooks):
            hook.uninstall()
        self._hooks = []
        self.tracker.uninstall()

    def close_open_step(self) -> None:
        """Nothing to do here: `uninstall` always closes the open step (`finish`)."""

    def finish(self, at_exit: bool = True) -> None:
        """Close the open step (or write the one whole-run step) and record the devices.
        `at_exit`: the program is ending (atexit), so a run's one step may wait for the device
        (profiling.wait_for_device); not when `tpuscope.profile()`'s block ends in the program."""
        self.clock.wait_idle(READY_WAIT_S)
        first_call = self._whole_run_start()
        if first_call is not None and at_exit:  # (as JAX does at the exit, before it)
            wait_for_device(self._syncs.local)
        with self._lock:
            if self._finished:
                return
            self._finished = True
            now = time.time_ns()
            if self._open and self._tail is not None and self._owns_steps():
                self._split_tail(now)
            elif self._open:  # (a mark, where torch_xla took the steps over: resumed, tail.py)
                self._close(now)
            elif self._has_work():  # work after the last step, or a run with no step source
                start = self._installed_at if self.step == 0 else self._last_end
                self._open_at(first_call or start, AFTER_LOOP)
                self._close(now)
            self._final_step = max(self.step - 1, 0)
            self.clock.finish()
            self.session.set_meta(
                jax_step_paths={
                    "lane": self.lane_steps,
                    "batched": self.lane.batched,  # of them, timed as their batch's mean
                    "polled": self.clock.polled,
                    "watched": self.clock.watched,
                    "unprobed": self.clock.unprobed,
                    "poll_depths": self.clock.poll_depths,
                }
            )
            if self._profiler is not None:
                self._profiler.close()
                self._profiler_done()
            self._device_meta()
            self._note_untraced()
            # the persistent cache as the program left it set (it may set it after start-up)
            if self.tracker._config is not None:
                self.session.set_meta(compile_cache=cache_settings(self.tracker._config))

    def _split_tail(self, now: int) -> None:
        """The run ended in a marked step (tail.py): the step ends at the mark, and what
        followed it is the after-the-loop step, its events and held rows renumbered."""
        tail, after = self._tail, self._acc
        assert tail is not None
        self._tail, self._acc = None, tail.before
        after_hook_ns, self._hook_ns = self._hook_ns, tail.hook_ns
        self._close(tail.t_ns)
        self._held_runs.split = (tail.step, tail.t_ns, self.step)
        rows = tail.renumber(self._events, self.step)
        self._open_at(tail.t_ns, AFTER_LOOP)
        copy_counts(self._acc, after)
        self._hook_ns = after_hook_ns
        for table, held in rows:
            self.session.add_many(table, held)
        self._close(now)

    def _has_work(self) -> bool:
        return self._acc.has_work()

    def on_jit_created(self, target: JitTarget) -> None:
        self.compile_rows.jitted_names.add(target.name.rsplit(".", 1)[-1])
        if target.user:
            self.user_jits = True

    # -- compiles --------------------------------------------------------------------------
    def _on_compile(self, event: CompileEvent) -> None:
        self._device_meta()
        inside = getattr(self._syncs.local, "callback", None)
        if inside is not None:
            self._on_callbacks_compile(event, inside)
            return
        with self._lock:
            index, self.compile_index = self.compile_index, self.compile_index + 1
            duration_ns = int(event.duration_s * 1e9)
            self._leave_lane()
            acc = self._acc
            acc.compiles += 1
            acc.compile_ns += duration_ns
            step = self.step if self._owns_steps() else -1
            if event.trains:
                self.training.add(event.function)
            self.compile_rows.attribute(event, self._current_call())
            if self._tail is None and self._leaves_loop(event):
                self._mark_tail(event, duration_ns)
            row = self.compile_rows.compile_row(
                event, step, index, duration_ns, self.tracker.explaining()
            )
            for table, rows in (
                ("compiles", [row]),
                ("retraces", retrace_rows(event, step, index)),
            ):
                if self._tail is not None:
                    self._tail.hold(table, rows)
                else:
                    self.session.add_many(table, rows)

    def _whole_run_start(self) -> int | None:
        """Where a run with no step function, whose program called a jitted function of its
        own, has its one step start: that first call (the program's one jitted training call,
        as purejaxrl's), not tpuscope's start with the imports and setup before it. None for
        any other run."""
        if self.step != 0 or self._open or self.step_fn is not None:
            return None
        calls = [ns for (target, _), ns in self._first_call_ns.items() if target.user]
        return min(calls) if calls else None

    def _note_untraced(self) -> None:
        """On a TPU, an automatic trace whose steps never came (a run of at most warm-up + 1
        steps, or of one long jitted call): said in the process meta, with the window's steps,
        for the report to say what was not measured."""
        window = self._window
        if window is None or not window.untaken or not window.applies():
            return
        self.session.set_meta(
            trace_untaken={
                "start": window.window.start,
                "stop": window.window.stop,
            }
        )

    def _on_metric(self, name: str, seconds: float | None) -> None:
        """JAX's compile times of the open step's compiles; a host callback's are its own."""
        if getattr(self._syncs.local, "callback", None) is None:
            super()._on_metric(name, seconds)

    def _on_callbacks_compile(self, event: CompileEvent, inside: Inside) -> None:
        """A compile made by a host callback's Python (an op it ran outside jit): the
        callback's, named on its row, and none of the open step's counts: the callback's runs
        carry their time (on a TPU they run on the runtime's thread; on the CPU, inside the
        step's dispatch, so the step's wall time holds them too)."""
        site = self._callbacks.sites[inside.site]
        with self._lock:
            index, self.compile_index = self.compile_index, self.compile_index + 1
            row = self.compile_rows.compile_row(
                event,
                self._callback_step(),
                index,
                int(event.duration_s * 1e9),
                self.tracker.explaining(),
                callback=f"{site.name} @ {site.location or '?'}",
            )
            self.session.add_many("compiles", [row])

    def _mark_tail(self, event: CompileEvent, duration_ns: int) -> None:
        """The open step's first compile of another function (tail.py): what it counted so far
        stays the step's; this compile, the jitted call that made it (the event just logged)
        and the hooks' time from here go with what follows, in a second accumulator."""
        before, after = self._acc, OpenStep()
        events = self._events
        tail = TailMark.at(self.step, int(event.start_s * 1e9), before, events, self._hook_ns)
        self._tail, self._acc, self._hook_ns = tail, after, 0
        after.compiles, after.compile_ns = 1, duration_ns
        before.compiles, before.compile_ns = before.compiles - 1, before.compile_ns - duration_ns
        if not before.compiles:  # its metrics (JAX's times of this compile, made before it)
            after.metrics, before.metrics = before.metrics, None
        last = events.keys[events.ids[-1]] if tail.events_before else None
        if last is not None and last[0] == JIT_CALL and str(last[1]).endswith(event.function):
            tail.events_before -= 1
            before.events, before.jit_calls = before.events - 1, before.jit_calls - 1
            after.events, after.jit_calls = 1, 1

    def _leaves_loop(self, event: CompileEvent) -> bool:
        """Whether this compile may be where the open step leaves the loop (tail.py): a loop of
        a jitted step function past its first steps compiling something other than it."""
        step_fn = self.step_fn
        return (
            self.mode == "jit"
            and self._open
            and self._owns_steps()
            and self._step_calls >= LOOP_STEPS
            and step_fn is not None
            and event.function != step_fn.name.rsplit(".", 1)[-1]
        )

    def _current_call(self) -> tuple[JitTarget, tuple[Any, ...], dict[str, Any]] | None:
        """The pmapped or library-jitted call running on this thread, if any."""
        for hook in self._tracking:
            call = hook.current()
            if call is not None:
                return call
        return None

    # -- rows --------------------------------------------------------------------------
    def _write_rows(self) -> None:
        """The rows of the steps done since the last flush, one column chunk per table (runs in
        the flush thread, or at close)."""
        self.lane_rows()
        self._write_callback_rows()
        with self._lock:  # the steps emitted so far and their events (later steps' stay)
            done = self._rows.take()
            steps, ids = self._events.take(done.last_step())
        if (
            not done.boundaries or not self._owns_steps()
        ):  # torch_xla's collector writes this process's steps
            return
        for table, columns in StepColumns(done, steps, ids, self._events.keys).tables().items():
            self.session.add_columns(table, columns)

    def _callback_step(self) -> int:
        """The step the program is in as a host callback runs (read without the lock, from the
        runtime's thread: the step of the last call made, as a sync after it counts). Once the
        run is finishing, the last step: its work still running calls it (a program whose one
        jitted call dispatches and returns, then exits while the device runs it)."""
        final = self._final_step
        return final if final is not None else self.step + self.lane.pending()

    def _write_callback_rows(self) -> None:
        """The host callbacks' runs since the last flush, per step they ran in."""
        taken = self._callbacks.take()
        with self._lock:
            runs = self._held_runs.place(taken, self._tail.step if self._tail else None)
        if runs:
            calls, metrics = callback_rows(runs, self._callbacks.sites)
            self.session.add_many("call_sites", calls)
            self.session.add_many("metrics", metrics)

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
            if not self.session.proc_meta.get(
                "backend"
            ):  # JAX ran: a run that only imported it is not JAX's
                self.session.set_meta(backend="jax")
            self.session.set_meta(
                platform=devices[0].platform if devices else None,
                device_kind=devices[0].device_kind if devices else None,
                device_count=len(devices),
                process_index=jax.process_index(),
            )
        except Exception as exc:  # a device query must never break the program
            self._device_meta_done = True
            self.session.set_meta(device_error=str(exc))
