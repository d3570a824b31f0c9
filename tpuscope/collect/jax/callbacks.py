"""Host callbacks inside compiled JAX code: `jax.debug.print` / `jax.debug.callback`,
`jax.pure_callback` and `jax.experimental.io_callback`, each run of one timed on the host.

A callback is JAX's own way onto the host from inside a jitted step (torch_xla's CPU fallback
is the other framework's): the compiled program hands its operands to the host, Python runs,
and a callback with results (pure, io) or an ordered one hands them back while the device
waits. Why this hook point (jax 0.10): every one of them is lowered through
`jax._src.callback.emit_python_callback` (looked up at lowering time by the three lowering
rules), with the rule's context, whose traceback holds the user's line, and the Python
function the runtime will call on the host; the hook hands the lowering a timed wrapper of
that function instead. A run happens on a runtime thread, never the program's: it only
appends (start, duration, site) to a list (one atomic append, no lock that the program's
thread may hold while it waits on the device) that the flush thread drains.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from tpuscope.collect.frames import USER, frame_kind, import_path

_APIS = {  # the lowered primitive -> the API a user writes
    "pure_callback": "jax.pure_callback",
    "io_callback": "jax.experimental.io_callback",
    "debug_callback": "jax.debug.callback",
    "debug_print": "jax.debug.print",
}


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

    def __init__(self, quiet: Any = None) -> None:
        """quiet: the sync hook's thread-local (SyncHook.local): its `inside` set while a
        callback runs, the reads the callback makes (jax.debug.print formats host copies)
        are not the step's host syncs."""
        self._quiet = quiet if quiet is not None else threading.local()
        self.sites: list[CallbackSite] = []
        self._index: dict[CallbackSite, int] = {}
        self.runs: list[tuple[int, int, int]] = []  # (start time_ns, duration ns, site index)
        self._module: Any = None
        self._original: Any = None

    def install(self, jax: Any = None) -> CallbackHook:
        from jax._src import callback

        self._module, self._original = callback, callback.emit_python_callback
        callback.emit_python_callback = self._emitting(self._original)
        return self

    def uninstall(self) -> None:
        if self._module is not None:
            self._module.emit_python_callback = self._original
            self._module = None

    def take(self) -> list[tuple[int, int, int]]:
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
        index = self._index.get(site)
        if index is None:
            index = self._index[site] = len(self.sites)
            self.sites.append(site)
        return index

    def _timed(self, run: Any, site: int) -> Any:
        runs, clock, quiet = self.runs, time.time_ns, self._quiet

        def timed(*args: Any) -> Any:
            start, outer = clock(), getattr(quiet, "inside", False)
            quiet.inside = True
            try:
                return run(*args)
            finally:
                quiet.inside = outer
                runs.append((start, clock() - start, site))

        return timed


def _site(ctx: Any, callback: Any, waits: bool) -> CallbackSite:
    """The site of a callback being lowered: the user's line from the rule's traceback."""
    primitive = getattr(getattr(ctx, "primitive", None), "name", "")
    location, library = _lines(getattr(ctx, "traceback", None))
    return CallbackSite(
        _APIS.get(primitive, primitive or "callback"),
        _function_name(callback),
        location,
        library,
        waits,
    )


def _lines(traceback: Any) -> tuple[str | None, str | None]:
    """(the user's 'file:line', the innermost library line inside it) of a JAX traceback,
    innermost first, JAX's own frames left out."""
    from jax._src import source_info_util

    library = None
    for frame in source_info_util.user_frames(traceback):
        kind = frame_kind(frame.file_name)
        if kind == USER:
            return f"{frame.file_name}:{frame.start_line}", library
        if library is None:
            library = f"{import_path(frame.file_name)}:{frame.start_line}"
    return None, library


def _function_name(callback: Any) -> str:
    """The user's Python function inside the lowering's closure (JAX's _FlatCallback holds it
    as `callback_func`), else the closure's own name."""
    for cell in getattr(callback, "__closure__", None) or ():
        try:
            inner = getattr(cell.cell_contents, "callback_func", None)
        except ValueError:  # an empty cell
            continue
        if inner is not None:
            return str(getattr(inner, "__name__", None) or type(inner).__name__)
    return ""  # jax.debug.print's formatting, or a debug callback JAX wrapped: the API says it


HOST_CALLBACK = "host_callback"  # the call_sites kind
METRIC_PREFIX = "jax.host_callbacks/"  # + waited|unwaited/<site name> @ <location>


def metric_name(site: CallbackSite) -> str:
    """The metrics row name of one callback site's host time a step (count, ns): whether the
    device waits for it, its name, its line."""
    waited = "waited" if site.waits else "unwaited"
    return f"{METRIC_PREFIX}{waited}/{site.name} @ {site.location or '?'}"


def callback_rows(
    runs: list[tuple[int, int, int]], steps: list[tuple[int, int, int]], sites: list[CallbackSite]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[tuple[int, int, int]]]:
    """(call_sites rows, metrics rows, the runs after the last step's end: a later step's) of
    the runs, each in the step whose window (step, start_ns, end_ns) it starts in, or the next
    one (a run between two steps, or before the first, is the next step's work)."""
    from bisect import bisect_left

    ends = [end for _, _, end in steps]
    counts: dict[tuple[int, int], list[int]] = {}
    later = []
    for start, duration, index in runs:
        at = bisect_left(ends, start)
        if at == len(steps):
            later.append((start, duration, index))
            continue
        entry = counts.setdefault((steps[at][0], index), [0, 0])
        entry[0] += 1
        entry[1] += duration
    calls: list[dict[str, Any]] = []
    metrics: list[dict[str, Any]] = []
    for (step, index), (count, total) in sorted(counts.items()):
        site = sites[index]
        calls.append(
            {
                "step": step,
                "kind": HOST_CALLBACK,
                "name": site.name,
                "location": site.location,
                "library_frame": site.library,
                "count": count,
            }
        )
        metrics.append(
            {
                "step": step,
                "name": metric_name(site),
                "kind": "metric",
                "count": count,
                "total": float(total),
            }
        )
    return calls, metrics, later
