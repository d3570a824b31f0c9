"""Small, reversible hooks into a running JAX program: jit calls, step annotations,
host syncs and op-by-op dispatches. Each hook reports to a sink (the JaxCollector).

Why these hook points (jax 0.10):
- A jitted call that hits the cache never leaves C++, so the only way to see every
  call of `train_step` is to wrap what `jax.jit` returns. Functions jitted before
  tpuscope was loaded (JAX's own jnp functions) are left alone. `jax.pmap` is wrapped the
  same way (PmapHook): in jax 0.10 it is a jit of a shard_map of JAX's own `_fun`, so its
  compiles carry no trace of the user's function but happen inside the wrapped call,
  which the hook names (`current`), with the call's arguments.
- `jax.profiler.StepTraceAnnotation` is a Python subclass of a C++ TraceMe: its
  __enter__/__exit__ can be overridden on the class, which also catches copies the
  program imported by name.
- Host syncs: the user-facing entry points of `ArrayImpl` that read values
  (`float(x)`, `x.item()`, `print(x)`, ...) are Python functions on the class, plus
  `jax.device_get` and `jax.block_until_ready`. A re-entrancy guard counts one sync
  per user-level call.
- Op by op: under eager transformations (`jax.grad` without `jit`) every primitive
  goes through `EvalTrace.process_primitive`. Plain top-level `jnp` calls run in
  C++ and are not counted (docs/backends.md).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import threading
import time
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any, Protocol

import wrapt

from tpuscope.collect.frames import is_user_file, user_and_library
from tpuscope.collect.jax.rows import VALUE_READS

_JAX_INTERNALS = ("/jax/", "/jaxlib/")  # an eager primitive's caller is always jax's own code


def _report(call: Any, *args: Any) -> None:
    """Hand an event to the sink; a tpuscope bug must never surface in the user's call.
    (A bare try is free on this per-call path; contextlib.suppress allocates.)"""
    try:  # noqa: SIM105
        call(*args)
    except Exception:
        pass


class Sink(Protocol):
    def on_jit_created(self, target: JitTarget) -> None: ...
    def on_jit_call(self, target: JitTarget) -> None: ...
    def on_jit_return(self, target: JitTarget, outputs: Any, pre_ns: int, returned_ns: int) -> None: ...
    def on_annotation(self, entering: bool) -> None: ...
    def sync_event(self, kind: str, location: str | None, library: str | None) -> int: ...
    def on_sync(self, event: int, read: bool, start_ns: int) -> None: ...
    def on_eager(self, primitive: str, location: str | None, library: str | None, elapsed_ns: int) -> None: ...
    # time a hook spent on the program's path (on_jit_return and on_sync charge their own call)
    def charge(self, ns: int) -> None: ...


@dataclass(frozen=True, eq=False)
class JitTarget:
    """A function passed to jax.jit (or jax.pmap: `transform`): its name, where it is defined,
    whether it is the user's, its parameter names (to name an argument `params['w1']`) and,
    for pmap, its static_broadcasted_argnums.

    Compared and hashed by identity (a dataclass's field hash cost ~0.3 us per call of the
    step function, on the program's path): the hook hands out one target per distinct
    (name, defined_at, user), so a function jitted again is still the same target."""

    name: str
    defined_at: str | None
    user: bool
    transform: str = "jit"
    params: tuple[str, ...] = ()
    static: tuple[int, ...] = ()

    @classmethod
    def of(cls, fun: Any, transform: str = "jit", static: tuple[int, ...] = ()) -> JitTarget:
        base = fun.func if isinstance(fun, functools.partial) else fun
        with contextlib.suppress(ValueError):
            base = inspect.unwrap(base)
        code = getattr(base, "__code__", None)
        name = getattr(base, "__name__", None) or type(base).__name__  # JAX's own fun_name
        if code is None:
            return cls(str(name), None, False, transform, static=static)
        user = is_user_file(code.co_filename)
        params: tuple[str, ...] = ()
        if transform != "jit" or not user:  # compiles JAX does not explain: named here (pmap_calls)
            with contextlib.suppress(TypeError, ValueError):
                params = tuple(inspect.signature(fun).parameters)
        return cls(str(name), f"{code.co_filename}:{code.co_firstlineno}", user, transform, params, static)


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

        if not (hasattr(core, "trace_ctx") and hasattr(core, "eval_trace")):  # checked per call below
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
        _report(self.sink.on_jit_created, target)
        caller = self._caller(target)
        return _JitWrapper(jitted, self._tracked(caller, target) if self._tracks(target) else caller)

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

        def call(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            if not (hook.active and core.trace_ctx.trace is core.eval_trace):  # a call inside a trace
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


class AnnotationHook:
    """Reports the entry and exit of every `jax.profiler.StepTraceAnnotation`."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self._cls: Any = None
        self._saved: dict[str, Any] = {}

    def install(self, jax: Any = None) -> AnnotationHook:
        from jax._src.profiler import StepTraceAnnotation

        cls, sink = StepTraceAnnotation, self.sink
        base_enter, base_exit = cls.__enter__, cls.__exit__
        self._cls = cls
        self._saved = {name: cls.__dict__.get(name) for name in ("__enter__", "__exit__")}

        def __enter__(annotation: Any) -> Any:
            result = base_enter(annotation)
            start = time.perf_counter_ns()
            _report(sink.on_annotation, True)
            sink.charge(time.perf_counter_ns() - start)
            return result

        def __exit__(annotation: Any, *exc: Any) -> Any:
            try:
                return base_exit(annotation, *exc)
            finally:
                start = time.perf_counter_ns()
                _report(sink.on_annotation, False)
                sink.charge(time.perf_counter_ns() - start)

        cls.__enter__, cls.__exit__ = __enter__, __exit__
        return self

    def uninstall(self) -> None:
        if self._cls is None:
            return
        for name, value in self._saved.items():
            if value is None:
                delattr(self._cls, name)
            else:
                setattr(self._cls, name, value)
        self._cls = None


# User-facing ways to read a device value into Python (ArrayImpl attribute -> kind).
SYNC_METHODS = {
    "__float__": "float", "__int__": "int", "__bool__": "bool", "__index__": "index",
    "__complex__": "complex", "item": "item", "tolist": "tolist", "tobytes": "tobytes",
    "__format__": "print", "__str__": "print", "__repr__": "print", "__array__": "np.asarray",
    "block_until_ready": "block_until_ready",
}
SYNC_FUNCTIONS = {"device_get": "device_get", "block_until_ready": "block_until_ready"}


class SyncHook:
    """Counts device-to-host reads and waits, one per user-level call, with its call site."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self._local = threading.local()
        self._cls: Any = None
        self._jax: Any = None
        self._saved_methods: dict[str, Any] = {}
        self._saved_functions: dict[str, Any] = {}

    def install(self, jax: Any) -> SyncHook:
        from jax._src.array import ArrayImpl

        self._cls, self._jax = ArrayImpl, jax
        for name, kind in SYNC_METHODS.items():
            original = ArrayImpl.__dict__.get(name)
            if original is not None:
                self._saved_methods[name] = original
                setattr(ArrayImpl, name, self._wrap(original, kind))
        for name, kind in SYNC_FUNCTIONS.items():
            original = getattr(jax, name, None)
            if original is not None:
                self._saved_functions[name] = original
                setattr(jax, name, functools.wraps(original)(self._wrap(original, kind)))
        return self

    def uninstall(self) -> None:
        for name, original in self._saved_methods.items():
            setattr(self._cls, name, original)
        for name, original in self._saved_functions.items():
            setattr(self._jax, name, original)
        self._saved_methods, self._saved_functions = {}, {}

    def _wrap(self, original: Any, kind: str) -> Any:
        """The wrapper of one sync entry point. A call from a line of the user's seen before
        is one dict look-up (its code object and instruction) and one call of the sink with
        the event id it got the first time: a sync per step costs no frame walk, no key."""
        local, sink, read = self._local, self.sink, kind in VALUE_READS
        sites: dict[tuple[int, int], tuple[Any, int]] = {}  # (id(code), f_lasti) -> (code, event id)

        def synced(*args: Any, **kwargs: Any) -> Any:
            if getattr(local, "inside", False):  # e.g. the array method jax.block_until_ready calls
                return original(*args, **kwargs)
            start = perf_counter_ns()
            try:  # (a tpuscope bug must never surface in the user's call)
                frame = sys._getframe(1)
                code = frame.f_code
                site = sites.get((id(code), frame.f_lasti))
                if site is None or site[0] is not code:  # the code is kept alive: its id is not reused
                    site = _sync_site(sink, sites, kind, frame)
                sink.on_sync(site[1], read, start)  # which charges the time since start
            except Exception:
                pass
            local.inside = True
            try:
                return original(*args, **kwargs)
            finally:
                local.inside = False

        synced.__name__ = getattr(original, "__name__", kind)
        synced.__wrapped__ = original  # type: ignore[attr-defined]
        return synced


_SITES_MAX = 4096


def _sync_site(sink: Sink, sites: dict[tuple[int, int], tuple[Any, int]], kind: str, frame: Any) -> tuple[Any, int]:
    """(code, event id) of a sync called from `frame`; kept in `sites` when the frame is the
    user's own (its 'file:line' is then fixed by the code and instruction; a library frame's
    user line depends on who called it, so it is looked up each time)."""
    location, library = user_and_library(frame)
    site = (frame.f_code, sink.sync_event(kind, location, library))
    if library is None and is_user_file(frame.f_code.co_filename):
        if len(sites) >= _SITES_MAX:
            sites.clear()
        sites[(id(frame.f_code), frame.f_lasti)] = site
    return site


class EagerHook:
    """Counts and times primitives run eagerly (outside jit) through EvalTrace.process_primitive.

    The time is host time spent dispatching (with JAX's async dispatch the device
    may still be running): exactly the overhead that `jit` removes."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self._cls: Any = None
        self._original: Any = None

    def install(self, jax: Any = None) -> EagerHook:
        from jax._src.core import EvalTrace

        original, sink, local = EvalTrace.__dict__["process_primitive"], self.sink, threading.local()
        self._cls, self._original = EvalTrace, original

        def process_primitive(trace: Any, primitive: Any, args: Any, params: Any, /) -> Any:
            entered = time.perf_counter_ns()
            depth = getattr(local, "depth", 0)
            location, library = user_and_library(sys._getframe(1), _JAX_INTERNALS)
            local.depth = depth + 1
            start = time.perf_counter_ns()
            try:
                return original(trace, primitive, args, params)
            finally:
                local.depth = depth
                # Only the outermost dispatch is timed: nested ones are inside its time.
                end = time.perf_counter_ns()
                _report(sink.on_eager, primitive.name, location, library, end - start if depth == 0 else 0)
                sink.charge(start - entered + time.perf_counter_ns() - end)

        EvalTrace.process_primitive = process_primitive
        return self

    def uninstall(self) -> None:
        if self._cls is not None:
            self._cls.process_primitive = self._original
            self._cls = None
