"""Small, reversible hooks into a running JAX program: step annotations, host syncs and
op-by-op dispatches (the jit and pmap calls: jit_hook.py). Each hook reports to a sink
(the JaxCollector: sink.py).

Why these hook points (jax 0.10):
- Jit and pmap calls: jit_hook.py says why `jax.jit`'s result is wrapped.
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

import functools
import sys
import threading
import time
from time import perf_counter_ns
from typing import Any

from tpuscope.collect.frames import is_user_file, user_and_library
from tpuscope.collect.jax.rows import VALUE_READS
from tpuscope.collect.jax.sink import Sink, report

_JAX_INTERNALS = ("/jax/", "/jaxlib/")  # an eager primitive's caller is always jax's own code


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
            report(sink.on_annotation, True)
            sink.charge(time.perf_counter_ns() - start)
            return result

        def __exit__(annotation: Any, *exc: Any) -> Any:
            try:
                return base_exit(annotation, *exc)
            finally:
                start = time.perf_counter_ns()
                report(sink.on_annotation, False)
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
    "__float__": "float",
    "__int__": "int",
    "__bool__": "bool",
    "__index__": "index",
    "__complex__": "complex",
    "item": "item",
    "tolist": "tolist",
    "tobytes": "tobytes",
    "__format__": "print",
    "__str__": "print",
    "__repr__": "print",
    "__array__": "np.asarray",
    "block_until_ready": "block_until_ready",
}
SYNC_FUNCTIONS = {"device_get": "device_get", "block_until_ready": "block_until_ready"}


class SyncHook:
    """Counts device-to-host reads and waits, one per user-level call, with its call site."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.local = threading.local()  # `inside`: a sync inside another (or a host callback)
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
        local, sink, read = self.local, self.sink, kind in VALUE_READS
        sites: dict[
            tuple[int, int], tuple[Any, int]
        ] = {}  # (id(code), f_lasti) -> (code, event id)

        def synced(*args: Any, **kwargs: Any) -> Any:
            if getattr(local, "inside", False):  # e.g. the array method jax.block_until_ready calls
                return original(*args, **kwargs)
            start = perf_counter_ns()
            try:  # (a tpuscope bug must never surface in the user's call)
                frame = sys._getframe(1)
                code = frame.f_code
                site = sites.get((id(code), frame.f_lasti))
                if (
                    site is None or site[0] is not code
                ):  # the code is kept alive: its id is not reused
                    site = _sync_site(sink, sites, kind, frame)
                if site[1] != OFF_PATH:  # (off the path: not the program's time either)
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
OFF_PATH = -1  # the event id of a read off the program's path: not counted


def _sync_site(
    sink: Sink, sites: dict[tuple[int, int], tuple[Any, int]], kind: str, frame: Any
) -> tuple[Any, int]:
    """(code, event id) of a sync called from `frame`; kept in `sites` when the frame is the
    user's own (its 'file:line' is then fixed by the code and instruction; a library frame's
    user line depends on who called it, so it is looked up each time).

    A read on a library's own thread, with no line of the user's on its stack (keras on JAX
    reads each batch's logs on its callback thread pool, CallbackList's async dispatch), is
    OFF_PATH: the program's thread never waits on it, so it is no host sync of the step."""
    location, library = user_and_library(frame)
    if location is None and threading.current_thread() is not threading.main_thread():
        return frame.f_code, OFF_PATH
    site = (frame.f_code, sink.sync_event(kind, location, library))
    if library is None and is_user_file(frame.f_code.co_filename):
        if len(sites) >= _SITES_MAX:
            sites.clear()
        sites[(id(frame.f_code), frame.f_lasti)] = site
    return site


class EagerHook:
    """Counts and times primitives run eagerly (outside jit) through EvalTrace.process_primitive.

    The time is host time spent dispatching (with JAX's async dispatch the device
    may still be running): exactly the overhead that `jit` removes. A primitive run by a host
    callback's Python (`quiet.callback`, set by callbacks.py on the thread running it) is the
    callback's: counted on its run, not as the step's op-by-op."""

    def __init__(self, sink: Sink, quiet: Any = None) -> None:
        self.sink = sink
        self._quiet = quiet if quiet is not None else threading.local()
        self._cls: Any = None
        self._original: Any = None

    def install(self, jax: Any = None) -> EagerHook:
        from jax._src.core import EvalTrace

        original, sink, local, quiet = (
            EvalTrace.__dict__["process_primitive"],
            self.sink,
            threading.local(),
            self._quiet,
        )
        self._cls, self._original = EvalTrace, original

        def process_primitive(trace: Any, primitive: Any, args: Any, params: Any, /) -> Any:
            inside = getattr(quiet, "callback", None)
            if inside is not None:
                return _callbacks_op(inside, original, trace, primitive, args, params)
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
                report(
                    sink.on_eager,
                    primitive.name,
                    location,
                    library,
                    end - start if depth == 0 else 0,
                )
                sink.charge(start - entered + time.perf_counter_ns() - end)

        EvalTrace.process_primitive = process_primitive
        return self

    def uninstall(self) -> None:
        if self._cls is not None:
            self._cls.process_primitive = self._original
            self._cls = None


def _callbacks_op(
    inside: Any, original: Any, trace: Any, primitive: Any, args: Any, params: Any
) -> Any:
    """A primitive a host callback's Python dispatched: counted on its run, and timed (the
    outermost inside the run only: nested ones are inside its time)."""
    depth = inside.depth
    inside.depth = depth + 1
    start = time.perf_counter_ns()
    try:
        return original(trace, primitive, args, params)
    finally:
        inside.depth = depth
        inside.ops += 1
        if depth == 0:
            inside.ops_ns += time.perf_counter_ns() - start
