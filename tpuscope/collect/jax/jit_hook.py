"""The hooks on `jax.jit` and `jax.pmap` (jax 0.10): every call of a jitted function, named.

A jitted call that hits the cache never leaves C++, so the only way to see every call of
`train_step` is to wrap what `jax.jit` returns. Functions jitted before tpuscope was loaded
(JAX's own jnp functions) are left alone. `jax.pmap` is wrapped the same way (PmapHook): in
jax 0.10 it is a jit of a shard_map of JAX's own `_fun`, so its compiles carry no trace of the
user's function but happen inside the wrapped call, which the hook names (`current`), with the
call's arguments. The other hooks (step annotations, host syncs, op by op) are in hooks.py.
"""

from __future__ import annotations

import functools
import threading
from time import perf_counter_ns
from typing import Any

import wrapt

from tpuscope.collect.jax.lane import LANE_BATCH
from tpuscope.collect.jax.sink import JitTarget, Sink, report


class _JitWrapper(wrapt.FunctionWrapper):
    """wrapt's FunctionWrapper (attributes, binding, introspection as wrapt gives them) with
    its plain call made here: wrapt's own looks up `__self__` on the wrapped function at
    every call, to pass the wrapper an instance, and a jitted function has none, so each call
    raised and cleared an AttributeError (measured: wrapt's call of a jitted function 1.1-1.9
    us over the bare call, warm; this one 0.3-1.1). The wrapper ignores the instance. A bound
    call (a jitted function as a class attribute) is wrapt's BoundFunctionWrapper, as before."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._self_wrapper(self.__wrapped__, None, args, kwargs)


class JitHook:
    """Replaces `jax.jit` so the functions it returns report each top-level call."""

    attr = "jit"  # the jax attribute replaced

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.active = False
        self._jax: Any = None
        self._original: Any = None
        self._core: Any = None
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
        self._jax, self._core, self._original = jax, core, getattr(jax, self.attr)

        @functools.wraps(self._original)
        def transform(*args: Any, **kwargs: Any) -> Any:
            return self._jit(*args, **kwargs)

        setattr(jax, self.attr, transform)
        self.active = True
        return self

    def uninstall(self) -> None:
        self.active = False
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
        caller = self._caller(target)
        return _JitWrapper(
            jitted, self._tracked(caller, target) if self._tracks(target) else caller
        )

    def _tracked(self, inner: Any, target: JitTarget) -> Any:
        """The caller, with the call named on this thread while it runs: 1.4-1.7 us more per
        call, measured with timeit on this (loaded, 2-core) machine, where a bare Python call
        took 0.5-0.6 us; a pmapped call is hundreds of us of Python in JAX itself, and a
        library's step (Keras's) is a framework's loop around it."""
        local = self._local

        def call(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            outer = getattr(local, "call", None)
            local.call = (target, args, kwargs)
            try:
                return inner(wrapped, instance, args, kwargs)
            finally:
                local.call = outer

        return call

    def _target_of(self, args: Any, kwargs: Any) -> JitTarget:
        return JitTarget.of(args[0])

    def _caller(self, target: JitTarget) -> Any:
        """The wrapper of one jitted function: every call of it, the step path. One Python
        frame (no partial, no bound method in between), the sink's methods looked up once and
        guarded inline (not through `_report`): a tpuscope bug must never surface in the
        user's call. Work after the dispatch is not free either: on the CPU backend it runs
        while XLA's threads start the computation on the same cores (jax_step_path.py)."""
        hook, core, sink = self, self._core, self.sink
        on_call, on_return = sink.on_jit_call, sink.on_jit_return
        lane, on_batch = sink.lane, sink.on_lane_batch

        def call(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            if not (
                hook.active and core.trace_ctx.trace is core.eval_trace
            ):  # a call inside a trace
                return wrapped(*args, **kwargs)
            if lane.target is target:  # a plain loop's step (lane.py): a stamp
                stamp = perf_counter_ns()
                stamps = lane.stamps
                stamps.append(stamp)
                lane.ns += perf_counter_ns() - stamp
                out = wrapped(*args, **kwargs)
                if not len(stamps) % LANE_BATCH:
                    try:  # noqa: SIM105
                        on_batch(out)
                    except Exception:
                        pass
                return out
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
