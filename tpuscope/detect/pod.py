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

from tpuscope.analyze.contract import HostSummary, PodSummary, evidence_of
from tpuscope.analyze.hosts import host_blocks, hosts_of
from tpuscope.analyze.judge import in_loop
from tpuscope.detect.pod_tables import PodTables
from tpuscope.detect.tables import RunTables
from tpuscope.schema import SEVERITIES, Finding

HOSTS_SHOWN = 6


def by_host(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """A frame's rows per host, as groupby("host", sort=False) splits them. A run's parts are
    read host after host, so each host's rows are usually one block: then its frame is a slice
    (no copy under pandas' copy-on-write; the groupby copied a 6.4M-row pod's tables once
    more, each), else the groupby's split."""
    blocks = host_blocks(frame)
    if blocks is not None:
        starts, labels = blocks
        ends = [*starts[1:], len(frame)]
        return {h: frame.iloc[a:b] for h, a, b in zip(labels, starts, ends, strict=True)}
    return {str(h): part for h, part in frame.groupby("host", sort=False, observed=True)}


class HostSplit:
    """A run's tables split by host, each table once (not once per host: a pod of 64 hosts
    and 100k steps has 6.4M step rows), on first use."""

    def __init__(self, tables: RunTables) -> None:
        self._tables = tables
        self._parts: dict[Any, Any] = {}

    def get(self, name: str, host: str) -> pd.DataFrame:
        if name not in self._parts:
            frame = getattr(self._tables, name) if name in MAIN else self._tables.extra[name]
            self._parts[name] = (
                by_host(frame) if not frame.empty and "host" in frame.columns else None
            )
            self._parts[name + ":empty"] = frame.iloc[0:0]
        return self._pick(name, host)

    def derived(self, key: str, compute: Any, host: str) -> pd.DataFrame:
        """compute(the whole run's tables), split by host once, this host's part."""
        if key not in self._parts:
            frame = compute(self._tables)
            self._parts[key] = by_host(frame)
            self._parts[key + ":empty"] = frame.iloc[0:0]
        return self._pick(key, host)

    def _pick(self, name: str, host: str) -> pd.DataFrame:
        parts = self._parts[name]
        if parts is None:  # no host column: every host sees the whole table
            return getattr(self._tables, name) if name in MAIN else self._tables.extra[name]
        return parts.get(host, self._parts[name + ":empty"])


MAIN = ("steps", "compiles", "fallbacks", "metrics", "families")


class HostTables(Mapping[str, pd.DataFrame]):
    """Another RunTables' extra tables, read lazily and cut to one host's rows."""

    def __init__(self, split: HostSplit, names: Mapping[str, pd.DataFrame], host: str) -> None:
        self._split, self._names, self._host = split, names, host

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self._names:
            raise KeyError(name)
        return self._split.get(name, self._host)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def run_hosts(tables: RunTables) -> list[str]:
    """The hosts of a live run: those of its profiled processes (procs/) that wrote rows.

    Imported evidence is not (each imported file is a process of status "imported" whose
    `host` is the file's name), so an import of many files is judged as one run, as before."""
    if hasattr(tables, "pod"):  # detect/pod_tables.PodTables: its hosts were found by SQL
        return list(tables.hosts)  # type: ignore[attr-defined]  # PodTables imports this module
    live = {
        str(p.get("host"))
        for p in tables.meta.get("processes", [])
        if p.get("host") and p.get("status") != "imported"
    }
    return [h for h in hosts_of(tables.steps, tables.compiles, tables.fallbacks) if h in live]


def for_host(tables: RunTables, host: str, split: HostSplit | None = None) -> RunTables:
    """The run as one host saw it: its rows, its processes' meta, its graph families."""
    if hasattr(tables, "for_host"):  # a PodTables: the host's rows read from its own parts
        return tables.for_host(host)
    split = split or HostSplit(tables)
    meta = {
        **tables.meta,
        "processes": [p for p in tables.meta.get("processes", []) if str(p.get("host")) == host],
    }
    one = RunTables(
        meta=meta,
        steps=split.get("steps", host),
        compiles=split.get("compiles", host),
        fallbacks=split.get("fallbacks", host),
        metrics=split.get("metrics", host),
        extra=HostTables(split, tables.extra, host),
    )
    one.__dict__["families"] = split.get("families", host)  # families are per process already
    # steps are judged per process: the whole run's judged steps cut to this host (the pod
    # view reads them all anyway), and its loop steps by the whole run's phases of its rows
    # (only the per-host rules read them: no copy of a pod's every step row for them)
    if not one.steps.empty:  # RunTables' cached properties, filled from the whole run's
        one.__dict__["judged"] = split.derived("judged", lambda whole: whole.judged, host)
        phase = tables.phase.loc[one.steps.index]
        one.__dict__["loop"] = one.steps[in_loop(phase).to_numpy()]
    return one


def _key(finding: Finding) -> tuple[Any, ...]:
    ev = evidence_of(finding)  # what tells two cards of a rule at one line apart, by rule
    return (
        finding.rule,
        finding.location,
        getattr(ev, "op", None),
        getattr(ev, "function", None),
        getattr(ev, "kind", None),
        "weak_type" in (getattr(ev, "facets", None) or []),  # a site's weak-type recompile card
    )


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
    evidence = evidence_of(worst).on_hosts(
        hosts, total, worst_host, {h: round(f.cost_s, 6) for h, f in found}
    )
    runs, count = Finding.of_steps(_union([f.step_runs for _, f in found]))
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
        runs,
        evidence,
        count,
    )


def _union(all_runs: list[list[list[int]]]) -> Any:
    """Every step any of these step runs covers (an array: a run can span 100k steps)."""
    import numpy as np

    spans = [np.arange(first, last + 1) for runs in all_runs for first, last in runs]
    return np.concatenate(spans) if spans else np.array([], dtype=np.int64)


def detect_per_host(
    tables: RunTables, rules: list[Callable[[RunTables], list[Finding]]], hosts: list[str]
) -> list[Finding]:
    """Every rule on every host alone, the same root cause merged across hosts. A PodTables
    runs a rule only on the hosts whose aggregates hold its inputs (detect/pod_gate.py): the
    others would return nothing, and their rows are never read."""
    groups: dict[tuple[Any, ...], list[tuple[str, Finding]]] = {}
    todo = {host: rules for host in hosts}
    if isinstance(tables, PodTables):  # each host's rows read from its own parts,
        todo = tables.plan(hosts, rules)  # and only the rules that can find something there
        each = tables.each_host(list(todo))
    else:
        split = HostSplit(tables)
        each = ((host, for_host(tables, host, split)) for host in hosts)
    for host, one in each:
        for rule in todo[host]:
            for finding in rule(one):
                groups.setdefault(_key(finding), []).append((host, finding))
    return [_merge(found, len(hosts)) for found in groups.values()]


def hosts_section(tables: RunTables, findings: list[Finding]) -> list[dict[str, Any]] | None:
    """The summary's `hosts` (runs of two or more hosts only): each host's figures, whether it is
    a straggler and the rules whose findings name it (not every host)."""
    rows = tables.step_sql.host_summary(tables.meta)
    if len(rows) < 2:
        return None
    view = {h["host"]: h for h in tables.pod_view.get("hosts", [])}
    for row in rows:
        named = sorted(
            {
                f.rule
                for f in findings
                if row["host"] in (hosts := evidence_of(f).hosts or []) and len(hosts) < len(rows)
            }
        )
        mine = view.get(row["host"], {})
        row.update(
            rules=named, straggler=bool(mine.get("straggler")), excess_ms=mine.get("excess_ms")
        )
    return rows


def pod_summary(tables: RunTables, findings: list[Finding]) -> PodSummary | None:
    """The summary's pod part, None for a run of one host: `hosts` and `host_steps`."""
    hosts = hosts_section(tables, findings)
    if not hosts:
        return None
    record = tables.step_sql.step_matrix_record()
    return PodSummary([HostSummary(**h) for h in hosts], record)
