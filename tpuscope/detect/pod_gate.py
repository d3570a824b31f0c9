"""Which per-host rules can find anything on which host of a pod, from aggregates over all hosts.

Judging a pod host by host (detect/pod.py) read every host's step and metrics rows into pandas
and ran every rule on them: at 128 hosts x 100k steps, ~80% of the analysis's CPU, nearly all
of it on hosts where no rule could fire (no syncs, no fallbacks, no compiles after warm-up).
Each default rule returns nothing unless some input of its own holds something; those inputs
are counted here for every host at once (the steps' pass that PodSteps makes anyway, one over the metrics,
one per device table; the small compiles and fallbacks frames are in memory already), and a
rule runs on a host's tables only when its inputs there are not empty. A rule not listed here
(a user's own) runs on every host, as before. The findings are the same by construction: a
rule skipped on a host is one that returns [] there (tests/test_pod_sql.py runs both ways).

What each rule needs (if a rule starts reading another input, add it here):
- recompile: a recompile or bounded-set row among the host's graph families (else, with
  steps, it returns []; a host without steps is judged by imported totals: always run);
- cpu_fallback: a fallback row of the host;
- host_sync: a fallback row, or a step with transfers_from_device > 0 (else every loop step
  reads 0 per step, under READS_PER_STEP); a host without steps: always run;
- op_by_op: steps, and a metrics row named jax.eager_dispatch_time or EagerOpExecuteTime;
- host_callback: steps, and a metrics row of a host callback (jax.host_callbacks/...);
- tensorcore_underuse: a row of xprof_overview, device_steps or hlo_ops for the host;
- compile_time: never on one host: a pod is judged once, on its slowest host to compile, from
  what the pod analysis holds without reading steps (detect/compile_time_pod.py).
Counts are taken over every part of a table (a superset of the host's own parts, which
HostReader reads): a host counted with rows it does not read is judged in full, never skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tpuscope.schema_consts import HOST_CALLBACK_METRICS

DEVICE_TABLES = ("xprof_overview", "device_steps", "hlo_ops")
DISPATCH_METRICS = ("jax.eager_dispatch_time", "EagerOpExecuteTime")


@dataclass
class HostFacts:
    """What the rules' early returns depend on, for one host (see the module doc)."""

    steps: int = 0
    transfers: bool = False
    dispatch_metrics: bool = False
    callback_metrics: bool = False
    device_rows: bool = False
    fallbacks: bool = False
    recompiles: bool = False


def _needs() -> dict[Callable[..., Any], Callable[[HostFacts], bool]]:
    from tpuscope.detect.compile_time import detect_compile_time
    from tpuscope.detect.cpu_fallback import detect_cpu_fallback
    from tpuscope.detect.host_callback import detect_host_callback
    from tpuscope.detect.host_sync import detect_host_sync
    from tpuscope.detect.op_by_op import detect_op_by_op
    from tpuscope.detect.recompile import detect_recompile
    from tpuscope.detect.tensorcore import detect_tensorcore_underuse

    return {
        detect_recompile: lambda f: not f.steps or f.recompiles,
        detect_cpu_fallback: lambda f: f.fallbacks,
        detect_host_sync: lambda f: not f.steps or f.fallbacks or f.transfers,
        detect_op_by_op: lambda f: bool(f.steps) and f.dispatch_metrics,
        detect_host_callback: lambda f: bool(f.steps) and f.callback_metrics,
        detect_tensorcore_underuse: lambda f: f.device_rows,
        detect_compile_time: lambda f: False,  # judged once on the pod (compile_time_pod.py)
    }


def plan(
    facts: dict[str, HostFacts], hosts: list[str], rules: list[Callable[..., Any]]
) -> dict[str, list[Callable[..., Any]]]:
    """Per host (in order), the rules to run on its tables; hosts with none are left out."""
    needs = _needs()
    out: dict[str, list[Callable[..., Any]]] = {}
    for host in hosts:
        fact = facts.get(host, HostFacts())
        mine = [rule for rule in rules if rule not in needs or needs[rule](fact)]
        if mine:
            out[host] = mine
    return out


def host_facts(
    con: Any, run: Any, hosts: list[str], fallbacks: dict[str, pd.DataFrame], families: pd.DataFrame
) -> dict[str, HostFacts]:
    """HostFacts of every host: `con` has the table `procs` (analyze/pod_sql.PodSteps: rows and
    whether a step read from the device, per process) and the view `metrics`; fallbacks are the pod's split by host, families the pod's (each host's part of
    them is split_by_host's: its rows whose host is that text, as recompiles/bounded filter rows)."""
    from tpuscope.analyze.families import bounded, recompiles

    facts = {host: HostFacts() for host in hosts}
    for host, n, transfers in con.execute(
        "SELECT CAST(host AS VARCHAR), sum(n), bool_or(transfers) FROM procs GROUP BY 1"
    ).fetchall():
        if host in facts:
            facts[host].steps, facts[host].transfers = int(n), bool(transfers)
    names = ", ".join("'" + n + "'" for n in DISPATCH_METRICS)
    for (host,) in con.execute(
        f"SELECT DISTINCT CAST(host AS VARCHAR) FROM metrics WHERE name IN ({names})"
    ).fetchall():
        if host in facts:
            facts[host].dispatch_metrics = True
    for (host,) in con.execute(
        f"SELECT DISTINCT CAST(host AS VARCHAR) FROM metrics WHERE name LIKE '{HOST_CALLBACK_METRICS}%'"
    ).fetchall():
        if host in facts:
            facts[host].callback_metrics = True
    for host in _device_hosts(con, run, set(hosts)):
        facts[host].device_rows = True
    again = pd.concat([recompiles(families), bounded(families)])  # row filters: the pod's at once
    judged = set(again["host"].astype(str)) if not again.empty and "host" in again else set()
    for host, fact in facts.items():
        fact.fallbacks = host in fallbacks and not fallbacks[host].empty
        fact.recompiles = host in judged
    return facts


def _device_hosts(con: Any, run: Any, hosts: set[str]) -> set[str]:
    """The hosts with a row in any of DEVICE_TABLES (every host when a table cannot be counted)."""
    import duckdb

    from tpuscope.store.sql import _list, part_urls

    found: set[str] = set()
    for name in DEVICE_TABLES:
        urls = part_urls(run.loc, name)
        if not urls:
            continue
        try:
            rows = con.execute(
                f"SELECT DISTINCT CAST(host AS VARCHAR) FROM read_parquet("
                f"{_list(urls)}, union_by_name=true)"
            ).fetchall()
        except duckdb.Error:  # no host column, a damaged part: judge every host in full
            return set(hosts)
        found.update(str(h) for (h,) in rows if h in hosts)
    return found
