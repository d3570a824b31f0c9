"""Whether a jitted function trains: its traced program computes a gradient.

A training loop's step is the jitted function that differentiates; an evaluation, a
prediction or a decode step does not. So where a program calls two jitted functions over and
over (optax's CIFAR ResNet notebook evaluates 79 test batches before its first training step,
and again after each epoch), the one that differentiates is the loop's step, whichever was
called first or more (steps.py). A gradient leaves its mark in the traced equations' name
stacks: JAX's reverse mode names its scope `transpose(` (`transpose(jvp(...))`).

JAX hands no hook the program it traced. Its monitoring event for the trace's duration is
recorded as `pjit._trace_for_jit` leaves the `with` block that timed the trace, which has just
assigned the traced `jaxpr`: the event's listener finds it in that frame, a few frames up.
A heuristic, by the name scope: a sampler guided by a gradient, `jax.linear_transpose`, or a
`jax.named_scope("transpose(...)")` read as training too.
"""

from __future__ import annotations

from types import FrameType
from typing import Any

FRAMES_UP = 6  # the listener, record_event_time_span, the timer's __exit__, _trace_for_jit
REVERSE_SCOPE = "transpose("


def traced_jaxpr(frame: FrameType | None) -> Any | None:
    """The jaxpr the trace event's frames hold (a ClosedJaxpr's inner Jaxpr), or None."""
    for _ in range(FRAMES_UP):
        if frame is None:
            return None
        found = frame.f_locals.get("jaxpr")
        inner = getattr(found, "jaxpr", found)  # a ClosedJaxpr's, or a bare Jaxpr (older JAX)
        if hasattr(inner, "eqns"):
            return inner
        frame = frame.f_back
    return None


def differentiates(jaxpr: Any) -> bool:
    """Whether any equation of the jaxpr, or of a jaxpr inside it (a scan's body, a nested
    jit), was traced in reverse mode. Stops at the first such equation; an evaluation's
    program is read whole once, at its compile."""
    from jax._src import core

    pending = [jaxpr]
    while pending:
        current = pending.pop()
        for eqn in current.eqns:
            if REVERSE_SCOPE in str(eqn.source_info.name_stack):
                return True
        pending.extend(core.subjaxprs(current))
    return False


def trains(frame: FrameType | None) -> bool:
    """Whether the function whose trace event fired from `frame` computes a gradient."""
    jaxpr = traced_jaxpr(frame)
    return jaxpr is not None and differentiates(jaxpr)
