"""The JAX collector's device traces: its profiler window over `jax.profiler` (the steps
TPUSCOPE_TRACE_STEPS asks for, collect/trace_steps.py), the program's own profiler taking over
from it, and the wait for the device's pending work that a window's stop and a run's end share.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from tpuscope.collect.jax.ready import StepClock
from tpuscope.collect.session import Session
from tpuscope.collect.trace_steps import ProfilerWindow, trace_dir, window_from_env


def wait_for_device(syncs: Any) -> int:
    """Wait for every pending computation (their outputs are live arrays) and return the ns
    waited. The wait is tpuscope's, not a read of the program's: `syncs` (the sync hook's
    thread-local) lets it pass uncounted. A deleted array or a runtime gone ends the wait."""
    import jax

    outer, syncs.inside = getattr(syncs, "inside", False), True
    began = time.perf_counter_ns()
    try:
        jax.block_until_ready(jax.live_arrays())
    except Exception:
        pass
    finally:
        syncs.inside = outer
    return time.perf_counter_ns() - began


class UsersProfiler:
    """The program's own `jax.profiler.start_trace` (and `trace()`, which calls it) while
    tpuscope's window is tracing: the window stops first and stays done, so the program's
    trace starts as it would without tpuscope (JAX allows one trace at a time)."""

    def __init__(self, module: Any, window: ProfilerWindow) -> None:
        self.module, self.window = module, window
        self.original = module.start_trace

    def install(self, jax: Any) -> UsersProfiler:
        original, window = self.original, self.window

        @functools.wraps(original)
        def start_trace(*args: Any, **kwargs: Any) -> Any:
            if window.active:
                window.close()
            window.done = window.yielded = True
            return original(*args, **kwargs)

        self._jax = jax
        self.module.start_trace = start_trace
        jax.profiler.start_trace = start_trace
        return self

    def uninstall(self) -> None:
        self.module.start_trace = self.original
        self._jax.profiler.start_trace = self.original


def profiler_window(
    session: Session,
    clock: StepClock,
    syncs: Any,
    device_meta: Callable[[], None],
    jax: Any,
) -> tuple[ProfilerWindow, UsersProfiler] | None:
    """jax.profiler traces of the steps TPUSCOPE_TRACE_STEPS asks for ("auto", the default of
    `tpuscope run`: the steps after the warm-up, on a TPU only), into <run>/trace/, and the
    hook through which the program's own profiler takes over (to install); None without one."""
    window = window_from_env(session.warmup)
    if window is None:
        return None
    directory = trace_dir(session.run_dir, "jax")
    if not window.auto:
        session.set_meta(trace_steps=[window.start, window.stop], trace_dir=str(directory))

    from jax._src import profiler as jax_profiler

    start_trace = jax_profiler.start_trace

    def start(path: str) -> None:
        state = getattr(jax_profiler, "_profile_state", None)
        if getattr(state, "profile_session", None) is not None:
            raise RuntimeError("the program's own jax.profiler trace is running")
        start_trace(path)
        if window.auto:  # (the window may have moved since: ProfilerWindow.restart)
            steps = [profiler.window.start, profiler.window.stop]
            session.set_meta(trace_steps=steps, trace_dir=path, trace_auto=True)

    def stop() -> None:
        # Dispatch is asynchronous: wait for every pending computation so that the window's
        # device work is inside the trace, then stop.
        clock.before_wait()
        try:
            profiler.waited_ns = wait_for_device(syncs)
        finally:
            jax.profiler.stop_trace()

    def on_tpu() -> bool:
        device_meta()
        return str(session.proc_meta.get("platform") or "").lower() == "tpu"

    profiler = ProfilerWindow(
        window,
        directory,
        start,
        stop,
        lambda files: session.set_meta(trace_files=files),
        on_tpu,
    )
    return profiler, UsersProfiler(jax_profiler, profiler)
