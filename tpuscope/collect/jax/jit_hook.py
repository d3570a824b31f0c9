"""The hooks on `jax.jit` and `jax.pmap` (jax 0.10): every call of a jitted function, named.

A jitted call that hits the cache never leaves C++, so the only way to see every call of
`train_step` is to wrap what `jax.jit` returns. Functions jitted before tpuscope was loaded
(JAX's own jnp functions) are left alone. `jax.pmap` is wrapped the same way (PmapHook): in
jax 0.10 it is a jit of a shard_map of JAX's own `_fun`, so its compiles carry no trace of the
user's function but happen inside the wrapped call, which the hook names (`current`), with the
call's arguments. The other hooks (step annotations, host syncs, op by op) are in hooks.py.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from time import perf_counter_ns
from typing import Any

from tpuscope.collect.jax.lane import LANE_BATCH, PACE_DEPTH, caught_up
from tpuscope.collect.jax.probe import tail_probe
from tpuscope.collect.jax.sink import JitTarget, Sink, report


class JitHook:
    """Replaces `jax.jit` so the functions it returns report each top-level call."""

    attr = "jit"  # the jax attribute replaced

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.active = False
        self._jax: Any = None
        self._original: Any = None
        self.trace_state: Any = None  # `.value`: the trace a call runs in (_lane_call)
        self.top_trace: Any = None  # that of a call at top level, outside any trace
        self._targets: dict[tuple[str, str | None, bool], JitTarget] = {}
        self._local = threading.local()

    def current(self) -> tuple[JitTarget, tuple[Any, ...], dict[str, Any]] | None:
        """The tracked call running on this thread (`_tracks`), with its arguments: a compile
        then is that call's, and its arguments say what differed (pmap_calls)."""
        return getattr(self._local, "call", None)

    def _tracks(self, target: JitTarget) -> bool:
        """A library's jitted function (Keras's train_step): JAX does not explain its traces.
        The user's own are left on the bare path: JAX explains them."""
        return not target.user

    def install(self, jax: Any) -> JitHook:
        from jax._src import core

        if not (
            hasattr(core, "trace_ctx") and hasattr(core, "eval_trace")
        ):  # checked per call below
            raise RuntimeError(f"jax {jax.__version__}: no core.trace_ctx/eval_trace")
        self._jax, self._original = jax, getattr(jax, self.attr)
        # core.trace_ctx.trace is a Python property over this state: read it directly
        self.trace_state = getattr(core, "trace_state_strong_ref", None) or _TraceOf(core)
        self.top_trace = core.eval_trace

        @functools.wraps(self._original)
        def transform(*args: Any, **kwargs: Any) -> Any:
            return self._jit(*args, **kwargs)

        setattr(jax, self.attr, transform)
        self.active = True
        return self

    def uninstall(self) -> None:
        self.active = False
        self.sink.lane.close()  # the hooked functions stop taking the lane (its rows: finish)
        if self._jax is not None and self._original is not None:
            setattr(self._jax, self.attr, self._original)
            self._original = None

    def _jit(self, *args: Any, **kwargs: Any) -> Any:
        original = self._original or getattr(self._jax, self.attr)
        if not args:  # jax.jit(static_argnums=...) used as a decorator factory
            return functools.partial(self._jit, **kwargs)
        jitted = original(*args, **kwargs)
        found = self._target_of(args, kwargs)
        target = self._targets.setdefault((found.name, found.defined_at, found.user), found)
        report(self.sink.on_jit_created, target)
        dressed = self._hooked(jitted, target)
        if hasattr(jitted, "lower"):
            dressed.lower = self._lowering(jitted.lower, target)
        if hasattr(jitted, "trace"):
            dressed.trace = self._tracing(jitted.trace, target)
        return dressed

    def _hooked(self, callable_: Any, target: JitTarget) -> Any:
        """`callable_` (a jitted function, or its ahead-of-time compiled executable) with
        each call reported as `target`'s."""
        call = self._lane_call(callable_, target, self._caller(target))
        if self._tracks(target):
            call = self._named(call, target)
        return _dressed(call, callable_)

    def _lowering(self, lower: Any, target: JitTarget) -> Any:
        """The jitted function's `lower`, whose `.compile()` gives an executable called
        through the same hooks: a loop that calls `step.lower(...).compile()`'s result (as
        rule compile_time advises, and as JAX's layout API needs) has its steps. Without it a
        decoder so compiled was one 20.9 s step on a v5e."""
        hooked = self._hooked

        @functools.wraps(lower)
        def lowered(*args: Any, **kwargs: Any) -> Any:
            out = lower(*args, **kwargs)
            compile_ = out.compile

            @functools.wraps(compile_)
            def compile(*c_args: Any, **c_kwargs: Any) -> Any:
                return hooked(compile_(*c_args, **c_kwargs), target)

            with contextlib.suppress(AttributeError):  # a Lowered that takes no attribute
                out.compile = compile
            return out

        return lowered

    def _tracing(self, trace: Any, target: JitTarget) -> Any:
        """The jitted function's `trace`, whose `.lower()` is `_lowering`'s: the executable of
        `step.trace(...).lower().compile()` is called through the same hooks too."""
        lowering = self._lowering

        @functools.wraps(trace)
        def traced(*args: Any, **kwargs: Any) -> Any:
            out = trace(*args, **kwargs)
            with contextlib.suppress(AttributeError):
                out.lower = lowering(out.lower, target)
            return out

        return traced

    def _lane_call(self, jitted: Any, target: JitTarget, general: Any) -> Any:
        """What `jax.jit` returns under tpuscope: a function calling `jitted`. A plain loop's
        call of its step function takes the lane (lane.py) here, in this one frame: the call
        counted, the dispatch, and on a marked call (every LANE_BATCH calls, and the one after
        any event) a clock read before it, whether the call PACE_DEPTH before it is done (its
        output kept then) and, LANE_BATCH calls after the last, the lane's check after it; any
        other call goes through `general` (`_caller`). A closure over its cells, not an object
        (wrapt's FunctionWrapper, a class with `__call__`), and no C call on the common path
        but the trace state's and the dispatch: on a TPU v5e's host the Python run between two
        dispatches costs many times its warm time, so what counts is how little it touches (a
        class's `__call__` around the jitted function measured 4.4 us a step there, a plain
        function 2.1 us, a clock read and an append 3-4 us; benchmarks/jax_lane_parts.py,
        docs/overhead.md)."""
        lane, state, top = self.sink.lane, self.trace_state, self.top_trace
        mark, clock, batch = lane.marks.extend, perf_counter_ns, self.sink.on_lane_batch
        keep, done = tail_probe, caught_up

        def call(*args: Any, **kwargs: Any) -> Any:
            if lane.target is target and state.value is top:
                n = lane.calls + 1
                lane.calls = n
                if n < lane.mark_at:
                    return jitted(*args, **kwargs)
                if n == lane.keep_at:  # PACE_DEPTH calls before the mark: its output kept
                    lane.mark_at = n + PACE_DEPTH
                    out = jitted(*args, **kwargs)
                    try:  # noqa: SIM105  (a tpuscope bug must never surface in the user's call)
                        kept = keep(out)
                        if lane.keep_at == n:  # no event during the dispatch (mark_next)
                            lane.kept = kept
                    except Exception:
                        pass
                    return out
                lane.mark_at = lane.keep_at = n + LANE_BATCH - PACE_DEPTH
                kept, lane.kept = lane.kept, None
                mark((clock(), n if kept is None or done(kept) else -n))
                if n < lane.check_at:  # a call marked after an event: no check due yet
                    return jitted(*args, **kwargs)
                out = jitted(*args, **kwargs)
                try:  # noqa: SIM105  (a tpuscope bug must never surface in the user's call)
                    batch(out)
                except Exception:
                    pass
                return out
            return general(jitted, args, kwargs)

        return call

    def _named(self, inner: Any, target: JitTarget) -> Any:
        """The call, named on this thread while it runs (`current`): a compile then is that
        call's. 1.4-1.7 us more per call on the CPU VM: for a library's step (Keras's) and a
        pmapped call, which are a framework's loop or hundreds of us of JAX's own Python."""
        local = self._local

        def call(*args: Any, **kwargs: Any) -> Any:
            outer = getattr(local, "call", None)
            local.call = (target, args, kwargs)
            try:
                return inner(*args, **kwargs)
            finally:
                local.call = outer

        return call

    def _target_of(self, args: Any, kwargs: Any) -> JitTarget:
        return JitTarget.of(args[0])

    def _caller(self, target: JitTarget) -> Any:
        """The general path of one jitted function's calls (`_lane_call` takes the lane itself):
        the sink's methods looked up once and guarded inline (not through `_report`): a
        tpuscope bug must never surface in the user's call. Work after the dispatch is not
        free either: on the CPU backend it runs while XLA's threads start the computation on
        the same cores (jax_step_path.py)."""
        hook, state, top, sink = self, self.trace_state, self.top_trace, self.sink
        on_call, on_return = sink.on_jit_call, sink.on_jit_return

        def call(wrapped: Any, args: Any, kwargs: Any) -> Any:
            if not (hook.active and state.value is top):  # a call inside a trace
                return wrapped(*args, **kwargs)
            start = perf_counter_ns()
            try:  # noqa: SIM105
                on_call(target)
            except Exception:
                pass
            called = perf_counter_ns()
            out = wrapped(*args, **kwargs)
            try:  # noqa: SIM105  (it charges the hook's time before the dispatch and its own)
                on_return(target, out, called - start, perf_counter_ns())
            except Exception:
                pass
            return out

        return call


class PmapHook(JitHook):
    """Replaces `jax.pmap` like `jax.jit`: a pmapped function's calls are step-function calls,
    and every call is tracked (`current()`), so the compile it causes (JAX's `jit(_fun)`) is
    counted as that function's."""

    attr = "pmap"

    def _tracks(self, target: JitTarget) -> bool:
        return True

    def _target_of(self, args: Any, kwargs: Any) -> JitTarget:
        static = kwargs.get("static_broadcasted_argnums", ())
        static = (static,) if isinstance(static, int) else tuple(static or ())
        return JitTarget.of(args[0], "pmap", static)


def _dressed(call: Any, jitted: Any) -> Any:
    """`call` as the jitted function shows itself: its name, doc and `__wrapped__`, and its
    attributes (`lower`, `trace`, `eval_shape`, `clear_cache`, ...) as the jitted function's
    own. A function binds as a method as the jitted function does (`types.MethodType`)."""
    functools.update_wrapper(call, jitted)
    for name in dir(jitted):
        if not name.startswith("__") and not hasattr(call, name):
            with contextlib.suppress(Exception):  # a property that raises stays the callee's
                setattr(call, name, getattr(jitted, name))
    return call


class _TraceOf:
    """`core.trace_ctx.trace` as `.value`, where JAX has no `trace_state_strong_ref`."""

    __slots__ = ("_ctx",)

    def __init__(self, core: Any) -> None:
        self._ctx = core.trace_ctx

    @property
    def value(self) -> Any:
        return self._ctx.trace
