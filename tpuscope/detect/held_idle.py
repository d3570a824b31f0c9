"""The device idle between steps while the host waits inside a call of a step that holds a host
callback: the device-idle card's cause, where the trace shows it (tensorcore_measured.py).

A jitted call returns once its step is enqueued, so a host that runs ahead leaves the device no
idle time inside its calls. On a TPU a step with a host callback is different: on the v5e each
call of the MLP step holding a `jax.debug.print`, a `jax.pure_callback` or an ordered
`io_callback` returned only once the device ran its step (docs/tpu.md), so the host could not
dispatch the next one ahead. With the ordered `io_callback` the device then idled 3.69 ms
between module runs a traced step, 3.60 ms of it while the host was inside the next call
(`tests/tpu/runs/cb_io`); the input-bound MLP's host, drawing its batches in Python, spent 0.68
of its 4.39 ms idle a step inside calls, Flax NNX's graph traversal 1.08 of 8.05 ms. Where half
the idle time or more was spent inside calls and a host callback of the step held the device
(rule host_callback's measured card), the idle card names that callback: without it the host
would run ahead again. Which of the runtime's waits holds the call is not in the trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from tpuscope.analyze.host_time import HeldIdle, idle_inside_calls
from tpuscope.analyze.mxu import fmt_time
from tpuscope.detect.common import file_and_line
from tpuscope.detect.host_callback import detect_host_callback
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding

HELD = 0.5  # of the device's idle time spent inside calls: the calls held the host


@dataclass(frozen=True)
class CallbackHold:
    """The host callback whose step's calls held the host, and the idle time measured."""

    callback: Finding  # rule host_callback's card (the costliest, with a measured device wait)
    held: HeldIdle


def callback_hold(tables: RunTables, steps: int) -> CallbackHold | None:
    """The callback holding the calls, or None where the idle time is not spent inside calls
    or no host callback of the step held the device (its wait measured in the trace). `steps`:
    the traced steps the trace holds."""
    held = idle_inside_calls(tables.extra.get("trace_events", pd.DataFrame()), steps)
    if held is None or held.idle_s <= 0 or held.inside_s < HELD * held.idle_s:
        return None
    cards = [
        card
        for card in detect_host_callback(tables)
        if getattr(card.evidence, "device_wait_s_per_step", None)
    ]
    return CallbackHold(cards[0], held) if cards else None


def hold_text(hold: CallbackHold) -> str:
    """The sentence the idle card says of it."""
    card, held = hold.callback, hold.held
    api, function = getattr(card.evidence, "api", ""), getattr(card.evidence, "function", "")
    name = f"{api}({function})" if function else api
    where = f" at {file_and_line(card.location)}" if card.location else ""
    return (
        f"Between its module runs the device idled {fmt_time(held.idle_s)} a traced step (the "
        "trace slows the host: more than the untraced step's idle time), "
        f"{fmt_time(held.inside_s)} of it while the host was inside a jitted call (JAX's "
        "dispatch and the runtime under it), not in the program's Python: the step holds "
        f"{name}{where}, and on a TPU a call of a step with a host callback returns only once "
        "the device runs it, so the host cannot dispatch the next step ahead. Without the "
        "callback this idle time goes too (rule host_callback's card measures the wait inside "
        "the step; which of the runtime's waits holds the call is not in the trace). "
    )
