"""Rule `host_callback`: Python run on the host from inside a compiled JAX step.

`jax.debug.print`, `jax.debug.callback`, `jax.pure_callback` and
`jax.experimental.io_callback` compile into the step a hand-over to the host: the step's
operands go to the host, Python runs, and for a callback with results (pure, io) or an ordered
effect the results come back while the device waits (JAX's external-callbacks guide). It is
JAX's CPU fallback: work the compiled program cannot do itself. tpuscope times each run on
the host (collect/jax/callbacks.py: `call_sites` kind `host_callback`, its time in the
`metrics` rows `jax.host_callbacks/...`). One card per callback that ran in the judged steps,
at the line that wrote it.

Cost: the callback's measured host time in the judged steps, where the step waits for it: a
callback with results or an ordered one, and every callback on the CPU backend, where XLA runs
it inside the step. On an accelerator that is a lower bound (the transfers to and from the
host come on top; not measured on a TPU). A callback the device does not wait for (an
unordered debug print or callback) costs no device time there: its card says so, cost 0, and
gives its host time, Python that competes with the program's own dispatching.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpuscope.analyze.contract import HostCallbackEvidence
from tpuscope.collect.jax.callbacks import HOST_CALLBACK, METRIC_PREFIX
from tpuscope.detect.common import file_and_line, judged_severity
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding

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
}


def detect_host_callback(tables: RunTables) -> list[Finding]:
    """One finding per host callback that ran on the host in the judged steps."""
    calls = tables.extra.get("call_sites", pd.DataFrame())
    if calls.empty or not (calls["kind"] == HOST_CALLBACK).any():
        return []
    judged = tables.judged
    if judged.empty:
        return []
    steps = set(judged["step"].astype(int))
    calls = calls[(calls["kind"] == HOST_CALLBACK) & calls["step"].isin(steps)]
    times = _host_times(tables, calls)
    platform = str(tables.meta.get("platform") or _process_platform(tables.meta) or "")
    findings = []
    for (name, location), rows in calls.groupby(["name", "location"], dropna=False, sort=False):
        waited, host_ns = times.get((str(name), _text(location)), (True, 0.0))
        findings.append(
            _finding(
                str(name), _text(location), rows, host_ns, waited, len(steps), platform, tables
            )
        )
    return sorted(findings, key=lambda f: -f.cost_s)


def _host_times(
    tables: RunTables, calls: pd.DataFrame
) -> dict[tuple[str, str], tuple[bool, float]]:
    """(name, location) -> (the device waits for it, host ns in the judged steps)."""
    names = {}
    for name, location in set(zip(calls["name"], calls["location"], strict=True)):
        for waited in (True, False):
            label = "waited" if waited else "unwaited"
            key = f"{METRIC_PREFIX}{label}/{name} @ {_text(location) or '?'}"
            names[key] = (str(name), _text(location), waited)
    metrics = tables.metric_rows(list(names))
    if metrics.empty:
        return {}
    metrics = metrics[metrics["step"].isin(set(calls["step"]))]
    out: dict[tuple[str, str], tuple[bool, float]] = {}
    for key, total in metrics.groupby("name")["total"].sum().items():
        name, location, waited = names[str(key)]
        out[(name, location)] = (waited, float(total))
    return out


def _finding(
    name: str,
    location: str,
    rows: pd.DataFrame,
    host_ns: float,
    waited: bool,
    judged: int,
    platform: str,
    tables: RunTables,
) -> Finding:
    api = name.split("(", 1)[0]
    runs = int(rows["count"].sum())
    per_step_s = host_ns / 1e9 / judged
    on_cpu = platform == "cpu"
    counted = waited or on_cpu
    cost = host_ns / 1e9 if counted else 0.0
    ran_in = sorted(set(rows["step"].astype(int)))
    every = (
        "every judged step" if len(ran_in) == judged else f"{len(ran_in)} of {judged} judged steps"
    )
    wait_text = (
        "which the step waits for"
        if counted
        else "which the device does not wait for (no result, unordered)"
    )
    title = (
        f"{name} runs on the host inside the compiled step ({every}): "
        f"{_ms(per_step_s)} of Python a step, {wait_text}"
    )
    detail = (
        f"At {file_and_line(location)}, {name} ran {runs} time(s) in the judged steps "
        f"({runs / judged:.2f} a step), {_ms(host_ns / 1e9 / max(runs, 1))} a run on the host "
        "(timed by tpuscope around the Python the runtime calls). The compiled step hands its "
        "operands to the host for it"
        + (
            "; on the CPU backend XLA runs it inside the step, so the step takes that time too"
            if on_cpu
            else (
                " and waits for its results (or its ordered effect) before it goes on: the "
                "transfers to and from the host come on top (not measured on a TPU)"
                if waited
                else "; the device does not wait for it, so it costs the host's time only, "
                "Python that competes with the program's own dispatching (not measured on a TPU)"
            )
        )
        + f". Cost = that host time in the judged steps{'' if counted else ': none counted'}."
    )
    evidence = HostCallbackEvidence(
        api=api,
        function=name[len(api) + 1 : -1] if name.endswith(")") else "",
        runs_per_step=runs / judged,
        host_s_per_step=per_step_s,
        waited=counted,
        judged_steps=judged,
        platform=platform or None,
    )
    step_runs, count = Finding.of_steps(ran_in)
    return Finding(
        RULE,
        judged_severity(cost, tables) if counted else "low",
        title,
        detail,
        FIXES.get(api, FIXES["jax.debug.callback"]),
        location or None,
        cost,
        step_runs,
        evidence,
        count,
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
