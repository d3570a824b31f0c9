"""Every JAX trace, lowering and compile, with its cause, call site and input shapes.

Sources, all public or logged by JAX itself (jax 0.10), no patching:
- `jax.monitoring` time spans: /jax/core/compile/jaxpr_trace_duration (fun_name),
  jaxpr_to_mlir_module_duration and backend_compile_duration (module name); events
  /jax/compilation_cache/cache_hits (loaded from the persistent cache) and cache_misses
  (compiled and written to it), fired inside the backend compile span. JAX fires
  compile_requests_use_cache even with no cache folder set, so whether the cache was on is
  read from jax.config (`jax_compilation_cache_dir`) when the compile ends, never guessed.
- the `jax._src.interpreters.partial_eval` logger: the `jax_explain_cache_misses`
  text, logged while the function is traced (parsed by collect/jax/explain.py);
- the `jax._src.interpreters.pxla` logger: "Compiling <module> with global shapes
  and types <avals>. Argument mapping: <shardings>" at DEBUG, whose record carries the
  input avals and the executable's input shardings as objects.
Records that exist only because tpuscope lowered a level or turned explanations on
are dropped by a logger filter, so the program's own log output stays as it was.
One backend compile closes a CompileEvent; its trace is the last trace of the
same function seen in this thread since the previous compile.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tpuscope.collect.frames import frame_location, user_frames
from tpuscope.collect.jax.explain import HEADER, Explanation, aval_text, parse_explanation
from tpuscope.collect.jax.gradients import trains

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_EVENTS = {
    "/jax/compilation_cache/cache_hits": "hit",
    "/jax/compilation_cache/cache_misses": "miss",
}
UNWRITTEN = "unwritten"  # compiled with the cache on, not written (under JAX's minimums)
EXPLAIN_LOGGER = "jax._src.interpreters.partial_eval"
LOWERING_LOGGER = "jax._src.interpreters.pxla"
CACHE_LOGGERS = ("jax._src.compiler", "jax._src.compilation_cache")
ENV_EXPLAIN = "JAX_EXPLAIN_CACHE_MISSES"
# Messages JAX raises to WARNING only because explanations are on (persistent cache).
_EXPLAIN_ONLY = (
    "PERSISTENT COMPILATION CACHE MISS",
    "Not writing persistent cache",
    "Writing %s to persistent",
)


@dataclass
class TraceSpan:
    function: str
    start_s: float
    duration_s: float
    location: str | None
    frames: list[str]
    trains: bool = False  # the traced program computes a gradient (gradients.py)


@dataclass
class CompileEvent:
    """One backend compile (or persistent-cache load) and what led to it."""

    module: str
    function: str
    start_s: float
    trace_s: float
    lower_s: float
    compile_s: float
    input_shapes: list[str] | None
    location: str | None
    frames: list[str]
    explanation: Explanation | None
    explanations: list[Explanation]
    stale_explanations: list[Explanation] = field(default_factory=list)
    persistent_cache: str | None = None
    backend_compile_s: float | None = None  # the backend compile (or cache load) alone
    input_shardings: list[str] | None = (
        None  # the executable's ("Argument mapping"), part of its identity
    )
    statics: list[str] = field(default_factory=list)  # a pmapped call's static argument values
    avals: str = (
        ""  # the input avals in full (weak types included), part of the executable's identity
    )
    trains: bool = False  # the compiled function computes a gradient (gradients.py)

    @property
    def duration_s(self) -> float:
        return self.trace_s + self.lower_s + self.compile_s


@dataclass
class _Pending:
    traces: list[TraceSpan] = field(default_factory=list)
    explanations: list[Explanation] = field(default_factory=list)
    shapes: list[str] | None = None
    shardings: list[str] | None = None
    avals: str = ""
    lower_s: float = 0.0
    cache: str | None = None


class _Capture(logging.Filter):
    """Hands matching records to a callback; drops those the program would not have seen."""

    def __init__(
        self,
        logger: logging.Logger,
        handle: Callable[[logging.LogRecord], None],
        drop_explain: bool,
    ) -> None:
        super().__init__()
        self.logger, self.handle, self.drop_explain = logger, handle, drop_explain
        self.user_level = logger.getEffectiveLevel()
        self.saved_level = logger.level

    def filter(self, record: logging.LogRecord) -> bool:
        with contextlib.suppress(Exception):  # a parsing problem must never break logging
            self.handle(record)
        if record.levelno < self.user_level:
            return False
        msg = str(record.msg)
        return not (self.drop_explain and (msg.startswith(HEADER) or msg.startswith(_EXPLAIN_ONLY)))


def _name_of_module(module: str) -> str:
    """'jit(train_step)' -> 'train_step'; 'jit_f' -> 'f'."""
    if "(" in module and module.endswith(")"):
        return module[module.index("(") + 1 : -1]
    for prefix in ("jit_", "pjit_", "pmap_"):
        if module.startswith(prefix):
            return module[len(prefix) :]
    return module


class CompileTracker:
    """Listens to JAX's compile pipeline; calls on_compile once per backend compile.

    on_metric(name, seconds) gets every span and event (seconds None for plain events).
    """

    def __init__(
        self,
        on_compile: Callable[[CompileEvent], None],
        on_metric: Callable[[str, float | None], None],
    ) -> None:
        self.on_compile = on_compile
        self.on_metric = on_metric
        self.owns_explain = False
        self._local = threading.local()
        self._filters: list[_Capture] = []
        self._monitoring: Any = None
        self._config: Any = None

    def _pending(self) -> _Pending:
        pending = getattr(self._local, "pending", None)
        if pending is None:
            pending = self._local.pending = _Pending()
        return pending

    def explaining(self) -> bool:
        """Whether JAX explains cache misses now (then a trace without one is JAX's own code)."""
        return bool(self._config is not None and self._config.jax_explain_cache_misses)

    # -- install / uninstall -----------------------------------------------------
    def install(self, jax: Any) -> CompileTracker:
        from jax import monitoring

        self._monitoring, self._config = monitoring, jax.config
        if ENV_EXPLAIN not in os.environ and not jax.config.jax_explain_cache_misses:
            jax.config.update("jax_explain_cache_misses", True)
            self.owns_explain = True
        self._capture(EXPLAIN_LOGGER, self._on_explain_record)
        self._capture(LOWERING_LOGGER, self._on_lowering_record, level=logging.DEBUG)
        for name in CACHE_LOGGERS:
            self._capture(name, lambda record: None)
        monitoring.register_event_time_span_listener(self._on_span)
        monitoring.register_event_listener(self._on_event)
        monitoring.register_event_duration_secs_listener(self._on_duration)
        return self

    def uninstall(self) -> None:
        if self._monitoring is None:
            return
        for unregister, callback in (
            (self._monitoring.unregister_event_time_span_listener, self._on_span),
            (self._monitoring.unregister_event_listener, self._on_event),
            (self._monitoring.unregister_event_duration_listener, self._on_duration),
        ):
            with contextlib.suppress(AssertionError, ValueError):
                unregister(callback)
        for capture in self._filters:
            capture.logger.removeFilter(capture)
            capture.logger.setLevel(capture.saved_level)
        self._filters = []
        if self.owns_explain:
            self._config.update("jax_explain_cache_misses", False)
            self.owns_explain = False
        self._monitoring = None

    def _capture(
        self, name: str, handle: Callable[[logging.LogRecord], None], level: int | None = None
    ) -> None:
        logger = logging.getLogger(name)
        capture = _Capture(logger, handle, drop_explain=self.owns_explain)
        if level is not None and logger.getEffectiveLevel() > level:
            logger.setLevel(level)
        logger.addFilter(capture)
        self._filters.append(capture)

    # -- log records ---------------------------------------------------------------
    def _on_explain_record(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith(HEADER):
            explanation = parse_explanation(record.getMessage())
            if explanation is not None:
                explanation.time_s = record.created
                self._pending().explanations.append(explanation)

    def _on_lowering_record(self, record: logging.LogRecord) -> None:
        args = record.args
        if (
            str(record.msg).startswith("Compiling %s with global shapes")
            and isinstance(args, tuple)
            and len(args) >= 2
        ):
            pending = self._pending()
            avals: Any = args[1]  # jax's abstract values, as its log record carries them
            pending.shapes = [aval_text(a) for a in avals]
            pending.avals = ",".join(map(str, avals))  # (weak types too: ~f32[])
            if len(args) >= 3:
                shardings: Any = args[2]
                pending.shardings = [str(s) for s in shardings]

    # -- monitoring ------------------------------------------------------------------
    def _on_span(self, event: str, start: float, end: float, **kwargs: Any) -> None:
        with contextlib.suppress(Exception):  # JAX calls this inside its compile path
            self._span(event, start, end, sys._getframe(1), **kwargs)

    def _span(self, event: str, start: float, end: float, frame: Any, **kwargs: Any) -> None:
        if event == TRACE_EVENT:
            self._pending().traces.append(
                TraceSpan(
                    str(kwargs.get("fun_name", "?")),
                    start,
                    end - start,
                    frame_location(frame),
                    user_frames(frame),
                    trains(frame),
                )
            )
            self.on_metric("jax.trace_time", end - start)
        elif event == LOWER_EVENT:
            self._pending().lower_s += end - start
            self.on_metric("jax.lower_time", end - start)
        elif event == COMPILE_EVENT:
            self.on_metric("jax.backend_compile_time", end - start)
            self._finish(str(kwargs.get("fun_name", "?")), start, end - start, frame)

    def _on_event(self, event: str, **kwargs: Any) -> None:
        with contextlib.suppress(Exception):
            self._event(event)

    def _event(self, event: str) -> None:
        status = CACHE_EVENTS.get(event)
        if status:
            self._pending().cache = status
        if event.startswith("/jax/compilation_cache/"):
            self.on_metric("jax.compilation_cache." + event.rsplit("/", 1)[-1], None)

    def _on_duration(self, event: str, duration: float, **kwargs: Any) -> None:
        if event.startswith("/jax/compilation_cache/"):
            with contextlib.suppress(Exception):
                self.on_metric("jax.compilation_cache." + event.rsplit("/", 1)[-1], duration)

    def _cache_status(self, pending: _Pending) -> str | None:
        """hit / miss from JAX's events; a compile with the cache on and neither event was
        compiled and not written (under jax_persistent_cache_min_compile_time_secs or the
        minimum entry size); None when no cache folder is set."""
        if pending.cache:
            return pending.cache
        return UNWRITTEN if cache_settings(self._config).get("on") else None

    def _finish(self, module: str, start: float, compile_s: float, frame: Any) -> None:
        pending = self._pending()
        self._local.pending = _Pending()
        function = _name_of_module(module)
        trace = next((t for t in reversed(pending.traces) if t.function == function), None)
        explanations, stale = _split(pending.explanations, trace)
        explanation = next((e for e in reversed(explanations) if e.function == function), None)
        location = (trace.location if trace else None) or frame_location(frame)
        if location is None and explanation is not None:
            location = explanation.callsite
        self.on_compile(
            CompileEvent(
                module=module,
                function=function,
                start_s=trace.start_s if trace else start - pending.lower_s,
                trace_s=trace.duration_s if trace else 0.0,
                lower_s=pending.lower_s,
                compile_s=compile_s,
                input_shapes=pending.shapes,
                location=location,
                frames=trace.frames if trace else user_frames(frame),
                explanation=explanation,
                explanations=explanations,
                stale_explanations=stale,
                persistent_cache=self._cache_status(pending),
                backend_compile_s=compile_s,
                input_shardings=pending.shardings,
                avals=pending.avals,
                trains=bool(trace and trace.trains),
            )
        )


def _split(
    explanations: list[Explanation], trace: TraceSpan | None
) -> tuple[list[Explanation], list[Explanation]]:
    """Explanations logged during this compile's trace (its function and the functions
    it calls), and older ones whose trace never compiled (it failed, or was eval_shape)."""
    if trace is None:
        return [], list(explanations)
    start, end = trace.start_s - 0.001, trace.start_s + trace.duration_s + 0.001
    inside = [e for e in explanations if start <= e.time_s <= end]
    return inside, [e for e in explanations if not start <= e.time_s <= end]


def cache_settings(config: Any) -> dict[str, Any]:
    """JAX's persistent compilation cache as the program's jax.config has it now: on when a
    folder is set and the cache is enabled (jax._src.compilation_cache.is_persistent_cache_enabled),
    and the minimums under which a compile is not written."""
    if config is None:
        return {}
    folder = getattr(config, "jax_compilation_cache_dir", None)
    enabled = bool(getattr(config, "jax_enable_compilation_cache", True))
    return {
        "backend": "jax",
        "on": bool(folder) and enabled,
        "dir": folder,
        "min_compile_time_s": getattr(config, "jax_persistent_cache_min_compile_time_secs", None),
        "min_entry_size_bytes": getattr(config, "jax_persistent_cache_min_entry_size_bytes", None),
    }
