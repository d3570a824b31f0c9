"""Rule `host_sync`: device-to-host reads inside the step (`.item()`, `print(t)`, `bool(t)`, `.tolist()`).

Each read waits for the device to finish the graph cut at that point and copies
the value back, so Python stalls once per read. Reads per judged step come from
the steps table (TransferFromDeviceTime samples for torch_xla, value reads for
JAX), minus the reads that CPU fallbacks cause (reported by `cpu_fallback`);
`aten::_local_scalar_dense` counts `.item()`-style reads. Call sites come from the
`call_sites` table (kind host_sync) and the fallbacks table. Fires at READS_PER_STEP
or more per step of the loop (warm-up included; the after-the-loop phase is not a
step), read in at least READS_PER_STEP of its steps: reads every N steps are what the fix
asks for, however many values they read at once (flax's imagenet example reads 2 metrics
every 100 steps and its checkpoint's 430 arrays after its last step: "2.2 reads per step"
on the mean of its 200 loop steps, 2 of which read). Imported totals (a metrics report) have
no steps to tell apart: their rate alone decides. Cost: the measured device-to-host wait of
those steps, in the share that these reads make of all host reads; severity its share of the
wall time (analyze/judge).

JAX has no such counter (detect/read_idle): on a traced chip the cost is the device's idle
time in the traced steps that read, at most the longer of the host's wait in the reads and
the device's busy time; without a trace it is not measured.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpuscope.analyze import judge
from tpuscope.analyze.contract import HostSyncEvidence
from tpuscope.analyze.frames import records
from tpuscope.analyze.mxu import fmt_time
from tpuscope.analyze.step_stream import has_step_structure
from tpuscope.detect import common
from tpuscope.detect.compile_kinds import OWN_FUNCTION_JITS
from tpuscope.detect.cpu_fallback import HOST_SYNC_OPS, TRANSFER_METRICS
from tpuscope.detect.read_idle import read_idle
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding

RULE = "host_sync"
READS_PER_STEP = 0.5
FIX = (
    "Keep the value on the device inside the step and read it every N steps after torch_xla.sync(): "
    "e.g. `running += loss.detach()` in the step and `if step % 50 == 0: print(running.item())`, or "
    "`xm.add_step_closure(lambda: log(loss.item()))`, which reads after the step's graph is launched. "
    "Replace `if tensor:` control flow with `torch.where`."
)

JAX_FIX = (
    "Keep values on the device inside the step and read them every N steps: accumulate metrics "
    "as arrays returned by the jitted step and call `jax.device_get` (or float()) on them only when "
    "logging; replace Python `if` on array values with `jnp.where` or `jax.lax.cond`."
)


def _fallback_steps(fallbacks: pd.DataFrame) -> pd.DataFrame:
    """Per (process, step): fallback ops that read from the host (not value reads) and value reads."""
    keys = [k for k in ("host", "pid", "step") if k in fallbacks.columns]
    if fallbacks.empty:
        return pd.DataFrame(columns=[*keys, "fallback", "value_reads"])
    frame = fallbacks.assign(value=fallbacks["op"].isin(HOST_SYNC_OPS))
    frame = frame.assign(
        fallback=frame["count"].where(~frame["value"], 0),
        value_reads=frame["count"].where(frame["value"], 0),
    )
    return frame.groupby(keys, dropna=False)[["fallback", "value_reads"]].sum().reset_index()


def _sites(tables: RunTables) -> list[dict[str, Any]]:
    """Host-read call sites that are not CPU-fallback sites, most reads first.

    Sites are lines of code, so every traced step counts, warm-up included (the tracer
    runs right after a read first shows up, often in warm-up).
    """
    fallbacks = tables.fallbacks
    fallback_sites = (
        set(fallbacks.loc[~fallbacks["op"].isin(HOST_SYNC_OPS), "location"].dropna().unique())
        if not fallbacks.empty
        else set()
    )
    sites: dict[str, dict[str, Any]] = {}
    calls = tables.extra.get("call_sites", pd.DataFrame())
    if not calls.empty:
        calls = calls[(calls["kind"] == "host_sync") & ~calls["location"].isin(fallback_sites)]
        for row in records(calls.dropna(subset=["location"])):
            site = sites.setdefault(row["location"], _new_site(row["location"]))
            _count(site, str(row["name"]), int(row["count"]), int(row["step"]), row)
    if (
        not fallbacks.empty
    ):  # .item()-style reads move no copy counter: their sites are the fallbacks table's
        reads = fallbacks[fallbacks["op"].isin(HOST_SYNC_OPS)].dropna(subset=["location"])
        for loc, rows in reads.groupby("location"):
            if str(loc) not in sites:  # a traced transfer site already counts its reads
                site = sites[str(loc)] = _new_site(loc)
                for row in records(rows):
                    _count(site, "item", int(row["count"]), int(row["step"]), row)
    ordered = sorted(sites.values(), key=lambda s: -s["count"])
    return [
        {
            "location": s["location"],
            "calls": sorted(s["calls"]),
            "count": s["count"],
            "per_traced_step": s["count"] / max(len(s["steps"]), 1),
            "inside": [
                {"call": call, "frame": frame, "count": n}
                for (call, frame), n in sorted(s["inside"].items(), key=lambda kv: -kv[1])
            ],
        }
        for s in ordered
    ]


def _new_site(location: Any) -> dict[str, Any]:
    return {"location": location, "count": 0, "calls": set(), "steps": set(), "inside": {}}


def _count(site: dict[str, Any], call: str, count: int, step: int, row: dict[str, Any]) -> None:
    """One row's reads into its site; `inside`: reads by (call, the library frame that made
    them), where the read happened inside a library the user's line called (a model's forward,
    generate()): the line in that library is what reads, the user's line what to look at."""
    site["count"] += count
    site["calls"].add(call)
    site["steps"].add(step)
    frame = row.get("library_frame")
    if isinstance(frame, str) and frame:
        site["inside"][call, frame] = site["inside"].get((call, frame), 0) + count


def _untraced_site(tables: RunTables, steps: pd.Series) -> list[dict[str, Any]]:
    """No traced call site: the line torch_xla's compile analyses name for the value reads."""
    site = common.value_read_site(tables, steps)
    return (
        [
            {
                "location": site,
                "calls": ["value read"],
                "count": 0,
                "per_traced_step": 0,
                "source": "torch_xla's compile analyses (call sites not traced)",
            }
        ]
        if site
        else []
    )


def _live_reads(tables: RunTables, judged: pd.DataFrame) -> tuple[float, float, pd.Series]:
    """(reads per judged step, their share of the step's host reads, steps with reads)."""
    keys = [k for k in ("host", "pid", "step") if k in judged.columns]
    fallbacks = _fallback_steps(common.judged_rows(tables.fallbacks, judged))
    if fallbacks.empty:  # nothing to pair: skip a merge on (host, pid, step) of every judged step
        per_step = (
            judged[["step", "transfers_from_device"]].fillna(0).assign(fallback=0, value_reads=0)
        )
    else:
        per_step = (
            judged[keys + ["transfers_from_device"]].merge(fallbacks, on=keys, how="left").fillna(0)
        )
    sync = (per_step["transfers_from_device"] - per_step["fallback"]).clip(lower=0)
    sync = sync.where(sync >= per_step["value_reads"], per_step["value_reads"])
    total = float(per_step["transfers_from_device"].sum())
    share = float(sync.sum()) / total if total else 1.0
    return float(sync.mean()), min(share, 1.0), per_step.loc[sync > 0, "step"]


def _finding(
    per_step: float,
    cost: float,
    wall: float,
    steps: Any,
    sites: list[dict[str, Any]],
    evidence: HostSyncEvidence,
    fix: str = FIX,
    backend: str = "",
) -> Finding:
    """The card; `evidence` holds what this kind of reading adds (the reads' share of the host
    reads, or what imported totals count), the reads and their sites are set here."""
    runs, count = Finding.of_steps(steps)
    location = sites[0]["location"] if sites else None
    calls = (
        ", ".join(
            f"{'/'.join(s['calls'])} at {common.file_and_line(s['location'])} "
            + (
                f"({s['source']})"
                if s.get("source")
                else f"({s['per_traced_step']:g} per traced step{_inside(s, 2, '; ')})"
            )
            for s in sites[:3]
        )
        or "call sites not traced"
    )
    at = f" ({_first_read(sites[0])})" if location else ""
    wait = _cost_text(cost, evidence, backend)
    if evidence.unmarked_runs is not None:
        title = f"{per_step:.0f} device-to-host reads in a loop with no step marker{at}"
        detail = (
            "No step boundary was seen (no sync, no step function, no optimizer step), so "
            f"how many reads one iteration makes is not known: {per_step:.0f} reads came in one "
            f"stretch in which graphs ran {evidence.unmarked_runs} times: {calls}.{wait}"
        )
    else:
        span = (
            f"{count} steps"
            if evidence.step_markers is None
            else f"over {evidence.step_markers} step markers of the imported evidence"
        )
        title = f"{per_step:.1f} device-to-host reads per step{at}"
        detail = (
            f"The step reads values back from the device {per_step:.1f} times per step on "
            f"average ({span}): {calls}.{wait}"
        )
    severity = judge.severity(cost, wall)
    evidence.reads_per_step, evidence.sites = per_step, sites
    return Finding(RULE, severity, title, detail, fix, location, cost, runs, evidence, count)


def _cost_text(cost: float, evidence: HostSyncEvidence, backend: str) -> str:
    """What a read does and what it cost, in the terms of the backend that ran."""
    if backend != "jax":
        return (
            " Each read waits for the device to finish the graph cut at that point, so the host "
            f"stalls and the step runs as several smaller graphs. Cost: {cost:.3f} s of measured "
            "device-to-host wait (TransferFromDeviceTime) in these reads' share."
        )
    what = (
        " Each read blocks the host until the device has computed the value, and the host "
        "dispatches the next step only after it, so the device idles while the host runs the "
        "rest of the iteration."
    )
    idle, lost = evidence.device_idle_s_per_step, evidence.read_lost_s_per_step
    if idle is None or lost is None:
        return f"{what} Cost: not measured (no device trace of a step that read)."
    wait = evidence.read_wait_s_per_step
    bound = (
        f"the host waited {fmt_time(wait)} a traced step in them (JAX's trace marks each "
        "read): a read loses at most the idle time, and of it at most that wait, which a "
        "host-bound step adds to its time, or the device's busy time, which the host's work "
        "could have overlapped, whichever is longer"
        if wait
        else "a read loses at most the idle time, and of it at most the device's busy time, "
        "which the host's work could have overlapped (the trace marks no read's wait)"
    )
    return (
        f"{what} Cost: the device idled {fmt_time(idle)} a traced step that read (measured); "
        f"{bound}: {fmt_time(lost)} a step, {cost:.3f} s over the steps that read."
    )


def _first_read(site: dict[str, Any]) -> str:
    """'__bool__ at train.py:37, inside transformers/masking_utils.py:354': the site's call
    that made the most reads, and the library line that made them."""
    inside = site.get("inside") or []
    call = inside[0]["call"] if inside else site["calls"][0]
    return (
        f"{call} at {common.line_inside(site['location'], inside[0]['frame'] if inside else None)}"
    )


def _inside(site: dict[str, Any], most: int, lead: str) -> str:
    """'; inside transformers/x.py:354 (__bool__)': the library lines that made the site's
    reads, most reads first (empty when the user's line read the value itself)."""
    frames = [f"{i['frame']} ({i['call']})" for i in site.get("inside", [])[:most]]
    return f"{lead}inside {', '.join(frames)}" if frames else ""


def _imported(tables: RunTables) -> list[Finding]:
    """Host reads per step marker in imported totals, per file."""
    metrics, fallbacks = tables.metrics, tables.fallbacks
    steps = common.per_process(metrics, ["MarkStep"])
    value_reads = (
        common.per_process(fallbacks, HOST_SYNC_OPS, name_column="op")
        if not fallbacks.empty
        else {}
    )
    reads = common.per_process(metrics, TRANSFER_METRICS)
    both = {
        k: max(value_reads.get(k, 0.0), reads.get(k, 0.0)) for k in set(value_reads) | set(reads)
    }
    counted = [
        k for k in both if steps.get(k) and both[k] / steps[k] >= READS_PER_STEP
    ]  # file by file
    if not counted:
        return []
    per_step = sum(both[k] for k in counted) / sum(steps[k] for k in counted)
    wait = common.per_process(metrics, TRANSFER_METRICS, "total")
    cost = (
        sum(
            wait.get(k, 0.0) * min(value_reads.get(k, 0.0) / reads[k], 1.0)
            if reads.get(k) and value_reads.get(k)
            else wait.get(k, 0.0)
            for k in counted
        )
        / common.NS
    )
    totals = HostSyncEvidence(
        source="imported totals",
        value_reads=int(sum(value_reads.get(k, 0) for k in counted)),
        host_reads=int(sum(reads.get(k, 0) for k in counted)),
        step_markers=int(sum(steps[k] for k in counted)),
    )
    return [_finding(per_step, cost, 0.0, [], [], totals)]


def _few_steps_read(reading: pd.Series, judged: pd.DataFrame) -> bool:
    """Fewer than READS_PER_STEP of the loop's steps read (a read every N steps). Steps are
    counted by number, not per process: a pod where rank 0 alone reads every step reads in
    every step."""
    return reading.nunique() < READS_PER_STEP * judged["step"].nunique()


def _unmarked_runs(judged: pd.DataFrame) -> int | None:
    """Graph runs of a loop with no step marker (its one step is the whole program, ended by
    the end of the run, analyze/judge): the only count of its work there is; None for a loop
    with steps."""
    if len(judged) != 1 or "boundary" not in judged:
        return None
    if str(judged["boundary"].iloc[0]) != judge.AFTER_LOOP:
        return None
    return int(judged["executions"].fillna(0).iloc[0]) if "executions" in judged else 0


def detect_host_sync(tables: RunTables) -> list[Finding]:
    """One finding when the judged steps read from the device READS_PER_STEP times or more."""
    if tables.steps.empty:
        return _imported(tables)
    judged = common.loop_steps(tables)  # reads per step of the loop, warm-up included
    if judged.empty or "transfers_from_device" not in judged:
        return []
    if not has_step_structure(judged):  # issue 26 (xsteps): no steps to judge, no per-step rule
        return []
    per_step, share, steps = _live_reads(tables, judged)
    if per_step < READS_PER_STEP or _few_steps_read(steps, judged):
        return []
    measured = read_idle(tables)
    if measured is not None:
        cost = measured.lost_s * measured.reading_steps
    else:
        wait = common.metric_per_step(
            common.judged_rows(tables.metric_rows(TRANSFER_METRICS), judged), TRANSFER_METRICS
        )
        cost = float(wait["total"].sum()) * share / common.NS if not wait.empty else 0.0
    sites = _sites(tables) or _untraced_site(tables, steps)
    return [
        _finding(
            per_step,
            cost,
            common.judged_wall_s(tables),
            steps,
            sites,
            HostSyncEvidence(
                share_of_host_reads=round(share, 3),
                unmarked_runs=_unmarked_runs(judged),
                device_idle_s_per_step=None if measured is None else round(measured.idle_s, 9),
                read_wait_s_per_step=None if measured is None else round(measured.wait_s, 9),
                read_lost_s_per_step=None if measured is None else round(measured.lost_s, 9),
            ),
            _jax_fix(sites) if tables.backend == "jax" else FIX,
            tables.backend,
        )
    ]


EQX_WAIT = (
    " `eqx.filter_jit` waits for each call's result itself ({frame}: `marker.block_until_ready()`, "
    "so that `eqx.error_if` raises at the call), so the step never overlaps the host's next one. "
    "Plain `jax.jit` over the model's arrays (`params, static = eqx.partition(model, "
    "eqx.is_array)`, a jitted function of `params` that `eqx.combine`s them) does not wait: on a "
    "v5e Equinox's RNN example, its `.item()` dropped, so ran 0.41 ms a step faster (3.89 "
    "against 4.30 ms), and its ViT 0.39 ms once its keys were split in one call (nothing before: "
    "its host work a step was the bound, docs/tpu.md)."
)


def _jax_fix(sites: list[dict[str, Any]]) -> str:
    """JAX's fix, and where a jit wrapper's own wait made reads (Equinox's filter_jit), what
    that wait is and what dropping it measured."""
    frames = [i["frame"] for site in sites for i in site.get("inside") or []]
    waits = [f for f in frames if str(f).split(":")[0].endswith(OWN_FUNCTION_JITS)]
    return JAX_FIX + (EQX_WAIT.format(frame=waits[0]) if waits else "")
