"""The rows of one JAX compile: its `compiles` row (cause, graph hash) and its `retraces` rows.

A compile is rare next to steps, so its rows are built when it happens, each through the
table's one builder (`schema.table_row`), imported on the first compile, not at start-up.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from tpuscope.collect.frames import is_user_file
from tpuscope.collect.jax.compiles import CompileEvent
from tpuscope.collect.jax.explain import (
    FIRST,
    PYTREE,
    REDEFINED,
    STATIC_ARG,
    TRACING_CONTEXT,
    UNKNOWN,
    Diff,
    Explanation,
    cause_text,
    plain_type,
)
from tpuscope.collect.jax.pmap_calls import PmapCompiles
from tpuscope.schema_rows import CompileRow, RetraceRow


class CompileRows:
    """Builds the rows of each compile; remembers what graph hashes need (keys seen so far),
    which functions the program passed to jax.jit (to tell library jits from eager ops) and
    each pmapped function's last compiled arguments (pmap_calls)."""

    def __init__(self) -> None:
        self._hash_seen: Counter = Counter()
        self.jitted_names: set[str] = set()
        self._traced: set[tuple[str, str]] = set()  # (function, where defined) JAX explained
        self._pmap = PmapCompiles()

    def attribute(
        self, event: CompileEvent, call: tuple[Any, tuple[Any, ...], dict[str, Any]] | None
    ) -> None:
        """A compile during a top-level call of a pmapped function is that function's; one of
        a library's jitted function that JAX did not explain is explained by its arguments."""
        if call is None:
            return
        target = call[0]
        if target.transform == "pmap" or (
            event.explanation is None and event.function == target.name
        ):
            self._pmap.explain(event, *call)

    def compile_row(
        self,
        event: CompileEvent,
        step: int,
        index: int,
        duration_ns: int,
        explaining: bool,
        callback: str | None = None,
    ) -> CompileRow:
        """explaining: JAX explains cache misses now, so a trace without an explanation is
        JAX's own code (an eager op's library function); callback: the host callback whose
        Python made this compile ("api(fn) @ file:line")."""
        from tpuscope.schema import table_row

        eager = False
        self._confirm_redefinitions(event)
        if event.explanation is not None:
            cause = cause_text(event.explanation, event.function)
        elif callback is not None:  # (a jitted function's compile there is explained above)
            cause = (
                f"JAX library function {event.function} compiled inside the host callback "
                f"{callback} (an op its Python ran on its arguments outside jit)"
            )
            eager = event.function not in self.jitted_names
        elif event.function in self.jitted_names:  # jax.jit of a library function, e.g. model.init
            cause = f"compile of jitted {event.function} (library code, which JAX does not explain)"
        elif explaining:
            cause = (
                f"JAX library function {event.function} compiled for a call outside jit (eager op)"
            )
            eager = True
        else:
            cause = f"compile of {event.function}"
        if event.persistent_cache in ("hit", "miss"):
            cause += f" [persistent cache {event.persistent_cache}]"
        function = event.explanation.function if event.explanation is not None else event.function
        return table_row(
            "compiles",
            backend="jax",
            function=function if function != "?" else event.function,
            eager=eager,
            step=step,
            index=index,
            time_ns=int(event.start_s * 1e9),
            duration_ns=duration_ns,
            graph_hash=self._graph_hash(event, eager),
            cause=cause,
            location=event.location,
            frames=event.frames,
            input_shapes=_global_shapes(event.input_shapes),
            num_inputs=len(event.input_shapes) if event.input_shapes is not None else None,
            persistent_cache=event.persistent_cache,
            backend_compile_ns=(
                int(event.backend_compile_s * 1e9) if event.backend_compile_s is not None else None
            ),
            callback=callback,
        )

    def _confirm_redefinitions(self, event: CompileEvent) -> None:
        """JAX explains a never-seen function as re-defined where another function object was
        seen at the same line before. A library's decorator (`nnx.jit`) defines its inner
        function on one line for every function it wraps, so each one's first trace reads as
        a re-definition (optax's CIFAR notebook: its `train_step` after its `eval_step`). It is
        one only where the same function, defined at the same place (by its name alone where
        JAX gives no place), was traced before in this process; else it is a first trace (its
        explanation, and so its rows, say so)."""
        for expl in (*event.explanations, *event.stale_explanations):
            key = (expl.function, expl.defined_at or "")
            if expl.kind == REDEFINED and key not in self._traced:
                expl.kind, expl.diffs = FIRST, [Diff(FIRST)]
            self._traced.add(key)

    def _graph_hash(self, event: CompileEvent, eager: bool) -> str:
        """A digest of what makes a JAX executable distinct (JAX exposes no HLO fingerprint
        without the persistent cache): the module, the function's definition, the input avals
        and the executable's input shardings, and what the explanation says differed apart
        from the inputs' placement (static values, pytree, tracing context). A key seen before
        is the same program compiled again (an evicted cache, a function re-created on every
        call, a pmapped call whose inputs came on another mesh), when the compile is
        identified: explained (by JAX, or by the pmap hook) and not an eager op. An eager op,
        or a compile JAX did not explain, may differ in what the key does not hold (an eager
        op's static parameters): a repeated key then gets an occurrence suffix."""
        key = _graph_key(event)
        seen = self._hash_seen[key]
        self._hash_seen[key] += 1
        expl = event.explanation
        identified = expl is not None and expl.kind != UNKNOWN and not eager
        if seen and not identified:
            key = f"{key}#{seen}"
        return hashlib.sha1(key.encode()).hexdigest()[:16]


_NOT_IN_AVALS = (STATIC_ARG, PYTREE, TRACING_CONTEXT)  # what else makes another program


def _global_shapes(shapes: list[str] | None) -> list[str] | None:
    """Input shapes as shapes: an explicit mesh axis annotation (`f32[32@batch,64]`) is the
    input's sharding, stated by the retraces rows, not part of its shape."""
    return None if shapes is None else [plain_type(s) for s in shapes]


def _graph_key(event: CompileEvent) -> str:
    expl = event.explanation
    program = (
        [f"{d.kind}:{d.arg}={d.after}" for d in expl.diffs if d.kind in _NOT_IN_AVALS]
        if expl
        else []
    )
    defined = expl.defined_at if expl else ""
    return "|".join(
        [
            event.module,
            defined or "",
            event.avals or ",".join(event.input_shapes or []),
            ",".join(event.input_shardings or []),
            *event.statics,
            *program,
        ]
    )


def retrace_rows(event: CompileEvent, step: int, index: int) -> list[RetraceRow]:
    """One row per difference; traces that led to no compile have no compile_index."""
    rows: list[RetraceRow] = []
    for expl, compiled in [(e, index) for e in event.explanations] + [
        (e, None) for e in event.stale_explanations
    ]:
        rows += [_retrace_row(expl, diff, step, compiled, event.location) for diff in expl.diffs]
    return rows


def _retrace_row(
    expl: Explanation, diff: Any, step: int, index: int | None, fallback: str | None
) -> RetraceRow:
    """JAX names the call site itself, skipping only its own frames: a call inside flax or
    optax is located at the user's line that led to it (the compile's location) instead."""
    from tpuscope.schema import table_row

    callsite = expl.callsite
    if callsite and not is_user_file(callsite.rsplit(":", 1)[0]):
        callsite = fallback or callsite
    return table_row(
        "retraces",
        step=step,
        compile_index=index,
        time_ns=int(expl.time_s * 1e9),
        function=expl.function,
        defined_at=expl.defined_at,
        location=callsite,
        kind=diff.kind,
        arg=diff.arg,
        before=diff.before,
        after=diff.after,
        detail=diff.detail,
    )
