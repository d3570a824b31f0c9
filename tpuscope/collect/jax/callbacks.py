"""Host callbacks inside compiled JAX code: `jax.debug.print` / `jax.debug.callback`,
`jax.pure_callback`, `jax.experimental.io_callback` (and checkify's checks), each run of one
timed on the host.

A callback is JAX's own way onto the host from inside a jitted step (torch_xla's CPU fallback
is the other framework's): the compiled program hands its operands to the host, Python runs,
and a callback with results (pure, io) or an ordered one hands them back while the device
waits. Why this hook point (jax 0.10): JAX's callback lowering rules call
`jax._src.callback.emit_python_callback` (looked up at lowering time; its public alias
`jax.interpreters.mlir.emit_python_callback` is patched too) with the rule's context, whose
traceback holds the user's line, and the Python function the runtime will call on the host;
the hook hands the lowering a timed wrapper of that function instead. The executable keeps the
wrapper, so its runs are timed for as long as the program lives; once the hook is uninstalled
the wrapper only calls through.

A run happens on whichever thread the runtime chooses (the program's own on the CPU backend,
where XLA runs the callback inside the dispatch; a runtime thread on a TPU). It appends one
tuple (the step the program is in then, start, wall and CPU time, site, the JAX ops its
Python ran and their time): one atomic append, no lock
that the program's thread may hold while it waits on the device, drained by the flush thread.
A few such objects a step, next to the host Python each callback runs anyway.

The JAX ops a callback's Python runs outside jit are the callback's, not the step's: its arguments
are jax.Arrays, and each op it runs on them outside jit (an index, a mask, a sum) is a
dispatch of its own, compiled at its first shape. While a run lasts, its thread holds its
`Inside` (the sync hook's thread-local `callback`): the eager-op hook (hooks.py) counts the
ops there instead of in the step's op-by-op count, and the collector names the callback on
the compiles it makes. purejaxrl's PPO (`ppo.py`, its DEBUG callback indexing its arguments
with a boolean mask) ran its jitted training in 21.9 s on a v5e, 4.6 s with the arguments made
numpy arrays first (docs/tpu.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpuscope.collect.frames import USER, frame_kind, import_path
from tpuscope.schema_consts import (
    HOST_CALLBACK_KIND,
    host_callback_metric,
    host_callback_ops_metric,
)

_APIS = {  # the lowered primitive -> the API a user writes
    "pure_callback": "jax.pure_callback",
    "io_callback": "jax.experimental.io_callback",
    "debug_callback": "jax.debug.callback",
    "debug_print": "jax.debug.print",
    "check": "jax.experimental.checkify",
}
# (step, start time_ns, wall ns, CPU ns, site index, JAX ops run outside jit, their host ns)
Run = tuple[int, int, int, int, int, int, int]


class Inside:
    """The callback run a thread is in: its site, and the JAX ops its Python dispatched
    outside jit with their host time (the eager-op hook adds to them)."""

    __slots__ = ("depth", "ops", "ops_ns", "site")

    def __init__(self, site: int) -> None:
        self.site, self.ops, self.ops_ns, self.depth = site, 0, 0, 0


@dataclass(frozen=True)
class CallbackSite:
    """One callback as compiled: its API, its Python function's name, the user's line (and
    the innermost library line inside it), and whether the device waits for it (it returns
    values to the device, or its effect is ordered)."""

    api: str
    function: str
    location: str | None
    library: str | None
    waits: bool

    @property
    def name(self) -> str:
        return f"{self.api}({self.function})" if self.function else self.api


class CallbackHook:
    """Times each host run of every callback compiled while it is installed."""

    def __init__(self, step_now: Callable[[], int] | None = None, quiet: Any = None) -> None:
        """step_now: the step the program is in (the collector's); quiet: the sync hook's
        thread-local (SyncHook.local), its `inside` set while a callback runs, so the reads a
        callback makes (jax.debug.print formats host copies) are not the step's host syncs."""
        self._step_now = step_now or (lambda: -1)
        self._quiet = quiet if quiet is not None else threading.local()
        self._lock = threading.Lock()  # two compiles at once intern sites one at a time
        self.sites: list[CallbackSite] = []
        self._index: dict[CallbackSite, int] = {}
        self.runs: list[Run] = []
        self.active = False
        self._saved: list[tuple[Any, Any]] = []

    def install(self, jax: Any = None) -> CallbackHook:
        from jax._src import callback
        from jax.interpreters import mlir

        original = callback.emit_python_callback
        hooked = self._emitting(original)
        for module in (callback, mlir):
            if getattr(module, "emit_python_callback", None) is original:
                self._saved.append((module, original))
                module.emit_python_callback = hooked
        self.active = True
        return self

    def uninstall(self) -> None:
        self.active = False
        for module, original in self._saved:
            module.emit_python_callback = original
        self._saved.clear()

    def clear(self) -> None:
        """Forget the runs so far (a forked child: they are its parent's)."""
        del self.runs[:]

    def take(self) -> list[Run]:
        """The runs recorded so far (the flush thread); later appends stay for the next take."""
        runs = self.runs
        taken = runs[: len(runs)]
        del runs[: len(taken)]
        return taken

    def _emitting(self, emit: Any) -> Any:
        hook = self

        def emit_python_callback(ctx: Any, callback: Any, token: Any, *args: Any, **kw: Any) -> Any:
            try:
                result_avals = args[2] if len(args) > 2 else kw.get("result_avals", ())
                site = hook._intern(_site(ctx, callback, bool(result_avals) or token is not None))
                callback = hook._timed(callback, site)
            except Exception:  # a tpuscope bug must never surface in the user's compile
                pass
            return emit(ctx, callback, token, *args, **kw)

        return emit_python_callback

    def _intern(self, site: CallbackSite) -> int:
        with self._lock:
            index = self._index.get(site)
            if index is None:
                index = self._index[site] = len(self.sites)
                self.sites.append(site)
            return index

    def _timed(self, run: Any, site: int) -> Any:
        hook, runs, clock, cpu, quiet, step_now = (
            self,
            self.runs,
            time.time_ns,
            time.thread_time_ns,
            self._quiet,
            self._step_now,
        )

        def timed(*args: Any) -> Any:
            if not hook.active:
                return run(*args)
            start, used, outer = clock(), cpu(), getattr(quiet, "inside", False)
            caller, inside = getattr(quiet, "callback", None), Inside(site)
            quiet.inside, quiet.callback = True, inside
            try:
                return run(*args)
            finally:
                quiet.inside, quiet.callback = outer, caller
                try:  # noqa: SIM105  (a tpuscope bug must never surface in the callback)
                    runs.append(
                        (step_now(), start, clock() - start, cpu() - used, site,
                         inside.ops, inside.ops_ns)
                    )  # fmt: skip
                except Exception:
                    pass

        return timed


def _site(ctx: Any, callback: Any, waits: bool) -> CallbackSite:
    """The site of a callback being lowered: the user's line from the rule's traceback, else
    (a batched callback, lowered inside JAX's own map) where its Python function is defined."""
    primitive = getattr(getattr(ctx, "primitive", None), "name", "")
    function = _function(callback)
    location, library = _lines(getattr(ctx, "traceback", None))
    code = getattr(function, "__code__", None)
    if location is None and code is not None and frame_kind(code.co_filename) == USER:
        location = f"{code.co_filename}:{code.co_firstlineno}"
    name = str(getattr(function, "__name__", None) or type(function).__name__) if function else ""
    return CallbackSite(
        _APIS.get(primitive, primitive or "callback"), name, location, library, waits
    )


def _lines(traceback: Any) -> tuple[str | None, str | None]:
    """(the user's 'file:line', the innermost library line inside it) of a JAX traceback,
    innermost first, JAX's own frames left out."""
    from jax._src import source_info_util

    library = None
    for frame in source_info_util.user_frames(traceback):
        if frame_kind(frame.file_name) == USER:
            return f"{frame.file_name}:{frame.start_line}", library
        if library is None:
            library = f"{import_path(frame.file_name)}:{frame.start_line}"
    return None, library


def _function(callback: Any) -> Any:
    """The user's Python function inside the lowering's closure (JAX's _FlatCallback holds it
    as `callback_func`); None for jax.debug.print's formatting or a callback JAX wrapped
    further (the API names it)."""
    for cell in getattr(callback, "__closure__", None) or ():
        try:
            inner = getattr(cell.cell_contents, "callback_func", None)
        except ValueError:  # an empty cell
            continue
        if inner is not None:
            return inner
    return None


def callback_rows(
    runs: list[Run], sites: list[CallbackSite]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(call_sites rows, metrics rows) of the runs, per (step, site): the runs counted, their
    wall time the union of their intervals (runs at once, a pmapped callback's per device,
    are one wait, not their sum), their CPU time the sum over the threads, at most that."""
    spans: dict[tuple[int, int], list[tuple[int, int]]] = {}
    used: dict[tuple[int, int], int] = {}
    ops: dict[tuple[int, int], tuple[int, int]] = {}
    for step, start, duration, cpu_ns, index, op_count, op_ns in runs:
        spans.setdefault((step, index), []).append((start, start + duration))
        used[(step, index)] = used.get((step, index), 0) + cpu_ns
        count, ns = ops.get((step, index), (0, 0))
        ops[(step, index)] = (count + op_count, ns + op_ns)
    calls: list[dict[str, Any]] = []
    metrics: list[dict[str, Any]] = []
    for (step, index), intervals in sorted(spans.items()):
        site = sites[index]
        wall = _union_ns(intervals)
        calls.append(
            {
                "step": step,
                "kind": HOST_CALLBACK_KIND,
                "name": site.name,
                "location": site.location,
                "library_frame": site.library,
                "count": len(intervals),
            }
        )
        for cpu, total in ((False, wall), (True, min(used[(step, index)], wall))):
            metrics.append(
                {
                    "step": step,
                    "name": host_callback_metric(site.waits, site.name, site.location, cpu),
                    "kind": "metric",
                    "count": len(intervals),
                    "total": float(total),
                }
            )
        op_count, op_ns = ops[(step, index)]
        if op_count:
            metrics.append(
                {
                    "step": step,
                    "name": host_callback_ops_metric(site.name, site.location),
                    "kind": "metric",
                    "count": op_count,
                    "total": float(op_ns),
                }
            )
    return calls, metrics


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total
