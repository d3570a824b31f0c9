"""Rule `host_callback`: Python run on the host from inside a compiled JAX step.

`jax.debug.print`, `jax.debug.callback`, `jax.pure_callback` and
`jax.experimental.io_callback` compile into the step a hand-over to the host: the step's
operands go to the host, Python runs, and for a callback with results (pure, io) or an ordered
effect the results come back while the device waits (JAX's external-callbacks guide). It is
JAX's CPU fallback: work the compiled program cannot do itself. tpuscope times each run on
the host (collect/jax/callbacks.py: `call_sites` kind `host_callback`, its time in the
`metrics` rows `jax.host_callbacks/...`). One card per callback that ran in the judged steps,
at the line that wrote it.

Cost, on a TPU with a trace of the steps (tpuscope takes one by default there): what the device
waited for the callback a step, measured, its host transfers' time in the trace at the
callback's line (analyze/host_waits.py): on a v5e a `jax.debug.print`, which the device waits
for there too, held it 2.39 ms a step in a bare trace and cost 2.45 ms a step bare; the card
said 2.51 and 2.11 ms in two runs under tpuscope. Without such a trace:
the CPU time of the callback's runs on the host in the judged steps (its wall time, on the
card too, also holds sleeps, I/O and waits for Python's lock while the program's thread works,
which may overlap the program's work), where the step waits for it: a callback with results or
an ordered one, and every callback on the CPU and GPU backends, where XLA runs it inside the
step's stream. On a TPU that is a lower bound (a pure_callback whose Python took 11 us a step
held the device 1.8 ms a step). An unordered print on a TPU with no trace is no card, its
cost not measured, unless its runs' CPU time was OUTPACED or more of the judged steps' time
outside compiles: one host thread runs them in order, so the host falls behind the device and
the program waits for the runs still queued (at its next read or its exit); the cost is then
their wall time. purejaxrl's PPO on a v5e: 18.3 s of `jax.debug.callback` runs (13.2 s of CPU)
in one step of 12.4 s outside compiles; the fix saved 16.8 s.

A callback whose Python runs JAX ops on its arguments (jax.Arrays) dispatches each one on its
own, compiled at each new shape (collect/jax/callbacks.py counts them on its runs and names it
on their compiles): the card says how many and leads its fix with making the arguments numpy
arrays first. That PPO's callback indexed its arguments with a boolean mask: 22,988 ops and 202
compiles; with `np.asarray` first its training took 4.6 s instead of 20.9-21.9 s on the v5e.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from tpuscope.analyze.contract import HostCallbackEvidence
from tpuscope.analyze.host_waits import host_waits
from tpuscope.detect.callback_ops import CallbackOps, callback_ops
from tpuscope.detect.common import file_and_line, judged_rows, judged_severity, traced_judged
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding
from tpuscope.schema_consts import HOST_CALLBACK_KIND, host_callback_metric

RULE = "host_callback"
FIXES = {
    "jax.debug.print": (
        "Take the print out of the jitted step: return the value from the step and print it "
        "from the loop every N steps (`if step % 100 == 0: print(float(loss))`, one read per N "
        "steps), or keep it for debugging runs only."
    ),
    "jax.debug.callback": (
        "Take the callback out of the jitted step: return what it reads and hand it to the "
        "callback from the loop every N steps."
    ),
    "jax.pure_callback": (
        "Write the function in jax.numpy (or lax) so that it compiles into the step, or compute "
        "it outside the step and pass its result in as an argument: the step then never waits "
        "for the host."
    ),
    "jax.experimental.io_callback": (
        "Return the values from the step and log them from the loop every N steps; an ordered "
        "io_callback also makes each step wait for the host."
    ),
    "jax.experimental.checkify": (
        "checkify's checks hand their errors to the host in every step: check in debugging "
        "runs only, or with fewer error kinds (`errors=checkify.user_checks`)."
    ),
}
AS_NUMPY_FIX = (
    "Make the callback's arguments numpy arrays before its Python works on them "
    "(`args = jax.tree_util.tree_map(np.asarray, args)` as its first line): numpy indexes, "
    "masks and sums them with no dispatch and no compile. "
)
OUTPACED = 0.5  # of the judged steps' time outside compiles, in one callback's runs
INLINE = ("cpu", "gpu", "cuda", "rocm")  # backends whose XLA runs a callback inside the step
# each API's HLO `op_type` (the callback's host transfers in a TPU trace)
OP_TYPES = {
    "jax.debug.print": "debug_print",
    "jax.debug.callback": "debug_callback",
    "jax.pure_callback": "pure_callback",
    "jax.experimental.io_callback": "io_callback",
}


def detect_host_callback(tables: RunTables) -> list[Finding]:
    """One finding per host callback that ran on the host in the judged steps."""
    calls = tables.extra.get("call_sites", pd.DataFrame())
    if calls.empty or not (calls["kind"] == HOST_CALLBACK_KIND).any():
        return []
    judged = tables.judged
    calls = judged_rows(calls[calls["kind"] == HOST_CALLBACK_KIND], judged)
    if calls.empty:
        return []
    times = _host_times(tables, calls)
    platform = str(tables.meta.get("platform") or _process_platform(tables.meta) or "")
    waits = _device_waits(tables)
    outside_compiles_ns = _outside_compiles_ns(judged)
    findings = []
    for (name, location), rows in calls.groupby(["name", "location"], dropna=False, sort=False):
        found = times.get((str(name), _text(location)))
        if found is None:  # its runs' host time was not written: nothing measured to say
            continue
        waited, wall_ns, cpu_ns = found
        device_wait = _wait_at(waits, _text(location), str(name).split("(", 1)[0])
        # its Python's own CPU time, not its wall time (which holds waits for Python's lock)
        outpaced = not waited and cpu_ns >= OUTPACED * outside_compiles_ns > 0
        if not waited and platform not in INLINE and device_wait is None and not outpaced:
            continue  # the device does not wait for it; what it costs there is not measured
        host = HostTime(
            waited, wall_ns, cpu_ns, device_wait, outpaced and platform not in INLINE,
            outside_compiles_ns,
        )  # fmt: skip
        ops = callback_ops(tables, str(name), _text(location))
        findings.append(
            _finding(str(name), _text(location), rows, host, ops, len(judged), platform, tables)
        )
    return sorted(findings, key=lambda f: -f.cost_s)


def _outside_compiles_ns(judged: pd.DataFrame) -> float:
    """The judged steps' wall time less their compiles', in ns."""
    if judged.empty:
        return 0.0
    compiles = judged["compile_ns"].fillna(0).sum() if "compile_ns" in judged else 0.0
    return float(judged["wall_ns"].sum() - compiles)


def _device_waits(tables: RunTables) -> pd.DataFrame:
    """(source, kind, seconds a traced judged step the device spent in host transfers)."""
    events = tables.extra.get("trace_events", pd.DataFrame())
    hlo_ops = tables.extra.get("hlo_ops", pd.DataFrame())
    return host_waits(events, hlo_ops, traced_judged(tables))


def _wait_at(waits: pd.DataFrame, location: str, api: str) -> float | None:
    """The device's wait a step for this callback: its line's host transfers (the same path,
    else the one file of that name and line: the trace's metadata and the collector may spell
    the folder differently), those of its kind where the line holds several."""
    if waits.empty or not location:
        return None
    here = waits[waits["source"] == location]
    if here.empty:
        tail = location.rsplit("/", 1)[-1]
        here = waits[waits["source"].astype(str).str.rsplit("/", n=1).str[-1] == tail]
        if here["source"].nunique() != 1:  # none, or files of one name in several folders
            return None
    mine = here[here["kind"] == OP_TYPES.get(api, "")]
    if mine.empty and here["kind"].nunique() == 1:  # one kind on the line, unnamed or other
        mine = here
    wait = float(mine["time_s"].sum())
    return wait if wait > 0 else None


def _host_times(
    tables: RunTables, calls: pd.DataFrame
) -> dict[tuple[str, str], tuple[bool, float, float]]:
    """(name, location) -> (the device waits for it, its wall ns and its CPU ns on the host in
    the judged steps)."""
    names = {}
    for name, location in set(zip(calls["name"], calls["location"], strict=True)):
        for waited in (True, False):
            for cpu in (False, True):
                key = host_callback_metric(waited, str(name), _text(location) or None, cpu)
                names[key] = (str(name), _text(location), waited, cpu)
    metrics = judged_rows(tables.metric_rows(list(names)), tables.judged)
    out: dict[tuple[str, str], tuple[bool, float, float]] = {}
    if metrics.empty:
        return out
    for metric, total in metrics.groupby("name")["total"].sum().items():
        site, line, waited, cpu = names[str(metric)]
        seen, wall, used = out.get((site, line), (False, 0.0, 0.0))
        if cpu:
            used += float(total)
        else:
            wall += float(total)
        out[(site, line)] = (waited or seen, wall, used)
    return out


@dataclass(frozen=True)
class HostTime:
    """A callback's runs on the host in the judged steps (wall and CPU ns), whether the device
    waits for it (results, an ordered effect), what it waited a step where a trace measured it,
    and whether the runs outpaced the steps."""

    waited: bool
    wall_ns: float
    cpu_ns: float
    device_wait: float | None
    outpaced: bool
    steps_ns: float  # the judged steps' time outside compiles, what `outpaced` compares with


def _finding(
    name: str,
    location: str,
    rows: pd.DataFrame,
    host: HostTime,
    ops: CallbackOps,
    judged: int,
    platform: str,
    tables: RunTables,
) -> Finding:
    api = name.split("(", 1)[0]
    runs = int(rows["count"].sum())
    per_step_s = host.cpu_ns / 1e9 / judged
    wall_s = host.wall_ns / 1e9
    if host.device_wait is not None:
        cost, what = (
            host.device_wait * judged,
            f"the device waits {_ms(host.device_wait)} a step for it (measured)",
        )
    elif host.outpaced:
        cost, what = (
            wall_s,
            f"{_ms(wall_s / judged)} of host time a step, which the program waits for",
        )
    else:
        cost, what = (
            host.cpu_ns / 1e9,
            f"at least {_ms(per_step_s)} of Python a step, which the step waits for",
        )
    title = (
        f"{name} runs on the host inside the compiled step ({runs / judged:.2f} a judged step): "
        + what
    )
    detail = (
        f"At {file_and_line(location)}, {name} ran {runs} time(s) in the judged steps "
        f"({runs / judged:.2f} a step): {_ms(per_step_s)} of CPU a step on the host, "
        f"{_ms(wall_s / judged)} of wall time (timed by tpuscope around the Python the "
        "runtime calls; the wall time also holds its sleeps, I/O and waits for Python's lock "
        "while the program's own thread runs, which may overlap the program's work). "
        + _ops_text(ops, judged)
        + (
            _outpaced_text(wall_s, host.steps_ns / 1e9)
            if host.outpaced and host.device_wait is None
            else _how_it_waits(platform, host.device_wait)
        )
    )
    evidence = HostCallbackEvidence(
        api=api,
        function=name[len(api) + 1 : -1] if name.endswith(")") else "",
        runs_per_step=runs / judged,
        host_s_per_step=wall_s / judged,
        cpu_s_per_step=per_step_s,
        waited=host.waited or platform in INLINE,
        judged_steps=judged,
        platform=platform or None,
        device_wait_s_per_step=host.device_wait,
        outpaced=host.outpaced and host.device_wait is None,
        ops_per_step=ops.ops / judged,
        ops_s_per_step=ops.ops_s / judged,
        op_compiles=ops.compiles,
        op_compile_s=ops.compile_s,
    )
    step_runs, count = Finding.of_steps(sorted(set(rows["step"].astype(int))))
    fix = FIXES.get(api, FIXES["jax.debug.callback"])
    return Finding(
        RULE,
        judged_severity(cost, tables),
        title,
        detail,
        AS_NUMPY_FIX + fix if ops.ops or ops.compiles else fix,
        location or None,
        cost,
        step_runs,
        evidence,
        count,
    )


def _ops_text(ops: CallbackOps, judged: int) -> str:
    """What the callback's Python did with JAX: its ops on its arguments and their compiles
    (ops JAX dispatched in C++, a jitted jnp function's calls once compiled, are not counted:
    a callback whose ops all took that path after their first calls shows its compiles alone)."""
    compiled = f"{ops.compiles} compiles of them in the run, {ops.compile_s:.1f} s"
    if ops.ops:
        counted = (
            f"Its Python ran {ops.ops / judged:,.0f} JAX ops a step on its arguments outside jit "
            f"({_ms(ops.ops_s / judged)} of host time a step"
            + (f"; {compiled}" if ops.compiles else "")
            + ")"
        )
    elif ops.compiles:
        counted = f"Its Python ran JAX ops on its arguments outside jit ({compiled})"
    else:
        return ""
    return (
        counted + ": a callback's arguments are jax.Arrays, and each index, mask or sum on them "
        "is dispatched on its own, compiled at each new shape (ops JAX dispatches in C++ are "
        "not counted). "
    )


def _outpaced_text(wall_s: float, steps_s: float) -> str:
    """The account of a cost that is the runs' wall time: no trace, an unordered callback."""
    return (
        f"Its runs took {wall_s:.2f} s against the judged steps' {steps_s:.2f} s outside "
        "compiles: one host thread runs them in order, so the host falls behind the device, and the "
        "program waits for the runs still queued (at its next read of a value, or at its "
        "exit). Cost = their wall time (on a v5e, purejaxrl's PPO: 18.3 s of callback runs, "
        "where making their arguments numpy arrays saved 16.8 s)."
    )


def _how_it_waits(platform: str, device_wait: float | None) -> str:
    """The detail's account of the device's wait and of the cost's basis."""
    if device_wait is not None:
        return (
            "The compiled step sends its operands to the host for it and waits for the host "
            "to answer: in the TPU trace the step's host transfers at this line (its send and "
            f"recv, `send-done` and `recv-done`) held the device {_ms(device_wait)} a traced "
            "step (the transfers, the runtime's hand-over to Python and back, and the Python "
            "itself). Cost = that wait a step x the judged steps (on a v5e a "
            "jax.debug.print held the device 2.39 ms a step in a bare trace, and cost 2.45 ms a "
            "step bare)."
        )
    if platform in INLINE:
        how = (
            f"The compiled step hands its operands to the host for it; on the "
            f"{platform.upper()} backend XLA runs it inside the step, so the step takes that "
            "time too"
        )
    else:
        how = (
            "The compiled step hands its operands to the host for it and waits for its results "
            "(or its ordered effect) before it goes on: the transfers to and from the host "
            "come on top (no trace of the steps measured them: on a v5e they held the device "
            "1.8-2.4 ms a step)"
        )
    return how + (
        ". Cost = its CPU time in the judged steps, a lower bound (its blocked time is not "
        "counted: on an upstream MNIST loop a jax.debug.print took 1.24 ms of wall time, 0.54 ms "
        "of CPU, and 0.45 ms a step bare)."
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} us"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _process_platform(meta: dict[str, Any]) -> str | None:
    for process in meta.get("processes") or []:
        if process.get("platform"):
            return str(process["platform"])
    return None
