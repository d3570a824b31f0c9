"""What the JAX hooks report to (jit_hook.py, hooks.py): the sink's calls, and the guard that
keeps a tpuscope bug out of the user's call."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tpuscope.collect.jax.jit_hook import JitTarget


def report(call: Any, *args: Any) -> None:
    """Hand an event to the sink; a tpuscope bug must never surface in the user's call.
    (A bare try is free on this per-call path; contextlib.suppress allocates.)"""
    try:  # noqa: SIM105
        call(*args)
    except Exception:
        pass


class Sink(Protocol):
    """Where every hook reports what it saw (the JaxCollector)."""

    def on_jit_created(self, target: JitTarget) -> None: ...
    def on_jit_call(self, target: JitTarget) -> None: ...
    def on_jit_return(
        self, target: JitTarget, outputs: Any, pre_ns: int, returned_ns: int
    ) -> None: ...
    def on_annotation(self, entering: bool) -> None: ...
    def sync_event(self, kind: str, location: str | None, library: str | None) -> int: ...
    def on_sync(self, event: int, read: bool, start_ns: int) -> None: ...
    def on_eager(
        self, primitive: str, location: str | None, library: str | None, elapsed_ns: int
    ) -> None: ...
    # time a hook spent on the program's path (on_jit_return and on_sync charge their own call)
    def charge(self, ns: int) -> None: ...
