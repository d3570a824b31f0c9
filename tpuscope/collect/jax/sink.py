"""What the JAX hooks report (jit_hook.py, hooks.py) and to whom: the jitted function a call is
of (JitTarget), the sink's calls, and the guard that keeps a tpuscope bug out of the user's call."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

from tpuscope.collect.frames import is_user_file
from tpuscope.collect.jax.lane import Lane

Site = tuple[str, int]  # (file, line) of a call
_OWN = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def caller_site() -> Site | None:
    """The first frame outside tpuscope's own hooks: the place that called a jitted function."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_OWN):
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


def report(call: Any, *args: Any) -> None:
    """Hand an event to the sink; a tpuscope bug must never surface in the user's call.
    (A bare try is free on this per-call path; contextlib.suppress allocates.)"""
    try:  # noqa: SIM105
        call(*args)
    except Exception:
        pass


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
        return cls(
            str(name), f"{code.co_filename}:{code.co_firstlineno}", user, transform, params, static
        )


class Sink(Protocol):
    """Where every hook reports what it saw (the JaxCollector)."""

    lane: Lane  # the step path of a plain loop, read by the jit hook's wrapper (lane.py)

    def on_lane_batch(self, outputs: Any) -> None: ...

    def on_jit_created(self, target: JitTarget) -> None: ...
    def on_jit_call(self, target: JitTarget) -> None: ...
    def on_jit_return(
        self, target: JitTarget, outputs: Any, pre_ns: int, returned_ns: int
    ) -> None: ...
    def on_annotation(self, entering: bool, boundary: str = ..., source: str = ...) -> None: ...
    def sync_event(self, kind: str, location: str | None, library: str | None) -> int: ...
    def on_sync(self, event: int, read: bool, start_ns: int) -> None: ...
    def on_eager(
        self, primitive: str, location: str | None, library: str | None, elapsed_ns: int
    ) -> None: ...
    # time a hook spent on the program's path (on_jit_return and on_sync charge their own call)
    def charge(self, ns: int) -> None: ...
