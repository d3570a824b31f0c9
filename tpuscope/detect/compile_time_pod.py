"""Rule compile_time on a pod (two or more hosts): judged once, on the slowest host to compile.

Every host of a pod compiles the same program at once, so the pod waits for the slowest; summing
the hosts would count the same wait N times. Judging each host alone (detect/pod.py) would read
every host's step rows for this one rule, which the pod gate (detect/pod_gate.py) exists to avoid
at 128 hosts x 100k steps, since every host of a real pod compiles for seconds. So the card is
made from what the pod analysis holds without reading a host's steps: the compiles and their
graph families, the processes' meta (JAX's step function: `jax_step_source`), each process's
loop end and the slowest host's wall time (its step rows' sum, or the pod's duration when
longer), both from the pod's one pass over the steps (analyze/pod_sql.PodSteps: over the parts,
or over the frame of a pod read whole). A compile is the step's when JAX says its function is the one
whose calls are the steps, or (torch_xla) when it was made in a step of the loop (step 0 to the
loop's end). The earlier runs of a pod are not read (no history).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpuscope.analyze.contract import CompileTimeEvidence
from tpuscope.detect import common
from tpuscope.detect.compile_kinds import step_sources
from tpuscope.detect.compile_time import CALLBACK, EAGER, OTHER, STEP, card, first_compiles
from tpuscope.detect.pod import hosts_text
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding


def _step_functions(meta: dict[str, Any]) -> set[str]:
    return {match["name"].rsplit(".", 1)[-1] for match in step_sources(meta)}


def _host_wall_s(tables: RunTables, host: str) -> float:
    """The host's wall time (every step row of its processes, as analyze/judge.run_wall_s takes a
    run's), or the pod's duration when longer: what the host's compiles are a share of."""
    steps_ns = float(tables.step_sql.host_walls().get(host) or 0)
    start, end = tables.meta.get("start_ns"), tables.meta.get("end_ns")
    duration = (end - start) / common.NS if start and end else 0.0
    return max(steps_ns / common.NS, duration)


def pod_kinds(tables: RunTables, rows: pd.DataFrame) -> pd.Series:
    """Each compile's kind, from the compiles, the meta and the loop's ends (module doc)."""
    out = pd.Series(OTHER, index=rows.index, dtype=object)
    if rows.empty:
        return out
    eager = rows["eager"].fillna(False).astype(bool) if "eager" in rows else out.eq("")
    functions = _step_functions(tables.meta)
    if functions and "function" in rows:
        step = rows["function"].isin(functions)
    else:
        ends = tables.step_sql.loop_ends()
        process = rows["host"].astype(str) + "/" + rows["pid"].astype(str)
        last = process.map(ends)
        step = (rows["step"] >= 0) & last.notna() & (rows["step"] <= last.fillna(-1))
    out[(step & ~eager).to_numpy()] = STEP
    out[eager.to_numpy()] = EAGER
    if "callback" in rows:
        out[rows["callback"].notna().to_numpy()] = CALLBACK
    return out


def detect_compile_time_pod(tables: RunTables, hosts: list[str]) -> list[Finding]:
    """The card of the slowest host's first compiles against the pod's wall time."""
    first = first_compiles(tables.families)
    if first.empty or "host" not in first:
        return []
    first = first[first["host"].astype(str).isin(hosts)]
    if first.empty:
        return []
    per_host = first.groupby(first["host"].astype(str), sort=True)["duration_ns"].sum()
    per_host = per_host.astype(float) / common.NS
    worst = str(per_host.idxmax())
    rows = first[first["host"].astype(str) == worst]
    wall = _host_wall_s(tables, worst)
    found = card(tables, rows, wall, pod_kinds(tables, rows), None)
    named = sorted(per_host.index)
    where = hosts_text(named, len(hosts))
    out = []
    for finding in found:
        finding.evidence = CompileTimeEvidence.of(finding).on_hosts(
            named, len(hosts), worst, {h: round(float(s), 6) for h, s in per_host.items()}
        )
        finding.detail += (
            f" On {where}, which compile at once: figures of {worst}, the slowest to compile."
        )
        out.append(finding)
    return out
