"""Rule `straggler`: a host whose judged steps are slower than the pod's by more than the noise.

In a pod every collective waits for the last host, so one slow host makes every host's
step as slow as its own. The rule compares each host's judged step times with the
pod's median step time, step by step (analyze/pod_view.py): a host whose median
excess is above the noise between steps (NOISE_FACTOR x the hosts' robust spread, and
at least MIN_SHARE of the median step and 1 ms) is a straggler, on the steps where its excess
is, if it has MIN_JUDGED_STEPS judged steps (a host lost early has too few to tell from the
OS's scheduling). The cause is what its slow steps spent more on than the pod's: its own compiles,
device execution, or time outside both (input pipeline, Python work, host syncs), with
the compiles, CPU fallbacks and host syncs it had more of. Cost: its excess summed over
its slow steps (what the other hosts wait); severity its share of the pod's judged time.
"""

from __future__ import annotations

from typing import Any

from tpuscope.analyze import judge
from tpuscope.analyze.contract import StragglerEvidence
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding

RULE = "straggler"
FIXES = {
    "compile": (
        "Find what this host compiles that the others do not (the rank_divergence finding names the "
        "line): rank-dependent Python (`if rank == 0:`) traced into the step, or shapes that differ on "
        "this host's shard of the data."
    ),
    "execute": (
        "The device of this host runs the same step slower: check its chips (`tpu-info`), its data "
        "shard's sizes (padding to a common shape keeps every host's graph the same) and thermal or "
        "hardware alerts for that worker."
    ),
    "host": (
        "This host spends longer outside XLA in each step: its input pipeline (more workers or "
        "prefetch, data local to the host), rank-specific logging or checkpointing (move it off the step "
        "or to every N steps), or `.item()`/print reads that only this host makes."
    ),
}


def _steps_text(steps: list[int]) -> str:
    return ", ".join(map(str, steps[:10])) + (
        f" ... ({len(steps)} steps)" if len(steps) > 10 else ""
    )


def _cause_text(cause: dict[str, Any] | None) -> str:
    if not cause:
        return "not told apart by the tables"
    more = "; ".join(f"{n:g} more {label}" for label, n in cause["more_than_pod"].items())
    return f"{cause['text']}, +{cause['excess_ms']:.1f} ms per slow step" + (
        f" ({more} than the pod's median)" if more else ""
    )


def _finding(
    host: dict[str, Any], view: dict[str, Any], total_hosts: int, pod_wall_s: float
) -> Finding:
    slow = host["slow_steps"]
    cost = host["excess_ms"] * len(slow) / 1e3
    title = (
        f"Straggler {host['host']}: {host['excess_ms']:.1f} ms slower per step than the pod's median "
        f"({view['pod_p50_ms']:.1f} ms) on {len(slow)} of {host['steps']} judged steps"
    )
    detail = (
        f"Host {host['host']} (1 of {total_hosts}) took {host['p50_ms']:.1f} ms per judged step against the "
        f"pod's median of {view['pod_p50_ms']:.1f} ms: a median excess of {host['excess_ms']:.1f} ms, above "
        f"the noise between steps ({view['noise_ms']:.2f} ms; threshold {view['threshold_ms']:.2f} ms). "
        f"Slow steps: {_steps_text(slow)}. Where the time went: {_cause_text(host['cause'])}. Every "
        f"collective of the pod waits for the slowest host. Cost: its excess over the pod's step times "
        f"summed over those steps, {cost:.3f} s."
    )
    part = (host["cause"] or {}).get("part", "host")
    evidence = StragglerEvidence(
        host=host["host"],
        p50_ms=host["p50_ms"],
        pod_p50_ms=view["pod_p50_ms"],
        excess_ms=host["excess_ms"],
        noise_ms=view["noise_ms"],
        threshold_ms=view["threshold_ms"],
        cause=host["cause"],
    ).with_values(hosts=[host["host"]], hosts_total=total_hosts)
    runs, count = Finding.of_steps(slow)
    return Finding(
        RULE,
        judge.severity(cost, pod_wall_s),
        title,
        detail,
        FIXES[part],
        None,
        cost,
        runs,
        evidence,
        count,
    )


def detect_straggler(tables: RunTables) -> list[Finding]:
    """One finding per host that is slower than the pod by more than the noise between steps."""
    view = tables.pod_view
    if not view:
        return []
    # the pod's judged time: its median host's judged steps (the hosts run side by side)
    pod_wall_s = view["pod_p50_ms"] * max(h["steps"] for h in view["hosts"]) / 1e3
    return [
        _finding(h, view, len(view["hosts"]), pod_wall_s) for h in view["hosts"] if h["straggler"]
    ]
