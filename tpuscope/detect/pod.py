"""Per-host facets of the rules: in a run of many hosts, every rule judges each host on its own.

Pooling a pod's rows would dilute a rule's per-step rates (an `.item()` on 1 of 64 hosts
is 1/64 of a read per step) and hide which host did it. So in a run whose rows come
from two or more hosts, each per-host rule runs on each host's tables alone; the
findings of the same root cause (rule, user's line, op / function / kind) on several
hosts become one card that names them: `hosts: host-3 (1 of 4)`, or `all 4 hosts`.
Its cost and severity are the worst host's (the pod's step waits for its slowest host);
evidence keeps every host's cost. A run of one host is judged exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pandas as pd

from tpuscope.analyze.hosts import hosts_of
from tpuscope.detect.registry import RunTables
from tpuscope.schema import SEVERITIES, Finding

HOSTS_SHOWN = 6


class HostTables(Mapping[str, pd.DataFrame]):
    """Another RunTables' extra tables, read lazily and cut to one host's rows."""

    def __init__(self, extra: Mapping[str, pd.DataFrame], host: str) -> None:
        self._extra, self._host, self._cache = extra, host, {}

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self._cache:
            self._cache[name] = only_host(self._extra[name], self._host)
        return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._extra)

    def __len__(self) -> int:
        return len(self._extra)


def only_host(frame: pd.DataFrame, host: str) -> pd.DataFrame:
    if frame.empty or "host" not in frame.columns:
        return frame
    return frame[frame["host"].astype(str) == host]


def run_hosts(tables: RunTables) -> list[str]:
    """The hosts of a live run: those of its profiled processes (procs/) that wrote rows.

    Imported evidence is not (each imported file is a process of status "imported" whose
    `host` is the file's name), so an import of many files is judged as one run, as before."""
    live = {
        str(p.get("host"))
        for p in tables.meta.get("processes", [])
        if p.get("host") and p.get("status") != "imported"
    }
    return [h for h in hosts_of(tables.steps, tables.compiles, tables.fallbacks) if h in live]


def for_host(tables: RunTables, host: str) -> RunTables:
    """The run as one host saw it: its rows, its processes' meta, its graph families."""
    meta = {
        **tables.meta,
        "processes": [p for p in tables.meta.get("processes", []) if str(p.get("host")) == host],
    }
    one = RunTables(
        meta=meta,
        steps=only_host(tables.steps, host),
        compiles=only_host(tables.compiles, host),
        fallbacks=only_host(tables.fallbacks, host),
        metrics=only_host(tables.metrics, host),
        extra=HostTables(tables.extra, host),
    )
    one.__dict__["families"] = only_host(tables.families, host)  # families are per process already
    return one


def _key(finding: Finding) -> tuple[Any, ...]:
    ev = finding.evidence
    return (finding.rule, finding.location, ev.get("op"), ev.get("function"), ev.get("kind"))


def hosts_text(named: list[str], total: int) -> str:
    """'host-3 (1 of 4)', 'host-1, host-2 (2 of 4)', 'all 4 hosts'."""
    if len(named) == total:
        return f"all {total} hosts"
    shown = ", ".join(named[:HOSTS_SHOWN]) + (
        f" +{len(named) - HOSTS_SHOWN} more" if len(named) > HOSTS_SHOWN else ""
    )
    return f"{shown} ({len(named)} of {total})"


def _merge(found: list[tuple[str, Finding]], total: int) -> Finding:
    """One card for a root cause seen on some hosts: the worst host's finding, naming them all."""
    hosts = [h for h, _ in found]
    worst_host, worst = max(found, key=lambda hf: (-SEVERITIES.index(hf[1].severity), hf[1].cost_s))
    where = hosts_text(hosts, total)
    evidence = {
        **worst.evidence,
        "hosts": hosts,
        "hosts_total": total,
        "worst_host": worst_host,
        "cost_s_per_host": {h: round(f.cost_s, 6) for h, f in found},
    }
    steps = sorted({s for _, f in found for s in f.steps})
    title = worst.title if len(hosts) == total else f"{worst.title} [hosts: {where}]"
    detail = f"{worst.detail} On {where}; figures of {worst_host}, the costliest."
    return Finding(
        worst.rule,
        worst.severity,
        title,
        detail,
        worst.fix,
        worst.location,
        worst.cost_s,
        steps,
        evidence,
    )


def detect_per_host(
    tables: RunTables, rules: list[Callable[[RunTables], list[Finding]]], hosts: list[str]
) -> list[Finding]:
    """Every rule on every host alone, the same root cause merged across hosts."""
    groups: dict[tuple[Any, ...], list[tuple[str, Finding]]] = {}
    for host in hosts:
        one = for_host(tables, host)
        for rule in rules:
            for finding in rule(one):
                groups.setdefault(_key(finding), []).append((host, finding))
    return [_merge(found, len(hosts)) for found in groups.values()]
