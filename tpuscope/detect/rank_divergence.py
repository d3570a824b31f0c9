"""Rule `rank_divergence`: hosts that compiled other graphs, or fell back or synced where others did not.

Every host of an SPMD pod should run the same program: the same graph families
(analyze/families.py: the user's line and the graph's structure), CPU fallbacks and
host syncs. What only some hosts do is rank-dependent code (`if rank == 0:
print(loss.item())`, a rank-specific branch traced into the step, an MPMD program's
own graphs) and every other host waits for it at the next collective; PT_XLA_DEBUG
prints rank 0 only, so nothing else tells. One finding per user's line and set of
hosts, naming the hosts, the first step and what they did that the others did not
(or did not do that the others did). A host that ended before the step where the
others did it is not counted as missing it. Also: hosts that compiled a different
number of graphs of the same families (recompiles on some hosts only). Cost: the
compile time of those graphs on the costliest host; severity at least medium (a
collective waits, an MPMD program can hang).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpuscope.analyze import judge
from tpuscope.analyze.contract import RankDivergenceEvidence
from tpuscope.analyze.hosts import natural_key
from tpuscope.detect import common, xla_advice
from tpuscope.detect.advice import for_backend
from tpuscope.detect.pod import hosts_text, run_hosts
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding

RULE = "rank_divergence"
FIX = xla_advice.ADVICE["same_step_on_hosts"]  # a JAX run gets jax_advice's words
_UNSHARED = (
    " | eager #",
    " | unknown #",
)  # families numbered per process: not comparable across hosts


def _family_items(families: pd.DataFrame) -> pd.DataFrame:
    """(kind, key, location, host, step, n, seconds) per graph family and host."""
    if families.empty:
        return pd.DataFrame()
    frame = families[
        ~families["family"].str.contains("|".join(map(lambda s: s.replace("|", r"\|"), _UNSHARED)))
    ]
    frame = frame.assign(
        key=frame["family"].str.split(" | ", n=1, regex=False).str[1],
        host=frame["host"].astype(str),
        seconds=frame["duration_ns"].fillna(0) / common.NS,
    )
    grouped = frame.groupby(["key", "host"], dropna=False).agg(
        location=("location", "first"),
        step=("step", "min"),
        n=("step", "size"),
        seconds=("seconds", "sum"),
    )
    return grouped.reset_index().assign(kind="graph")


def _site_items(frame: pd.DataFrame, kind: str, name_col: str) -> pd.DataFrame:
    if frame.empty:
        return pd.DataFrame()
    located = frame.dropna(subset=["location"]).assign(host=lambda f: f["host"].astype(str))
    located = located.assign(
        key=located[name_col].astype(str) + " at " + located["location"].astype(str)
    )
    grouped = located.groupby(["key", "host"]).agg(
        location=("location", "first"), step=("step", "min"), n=("count", "sum")
    )
    return grouped.reset_index().assign(kind=kind, seconds=0.0)


def _items(tables: RunTables) -> pd.DataFrame:
    fallbacks = tables.fallbacks
    calls = tables.extra.get("call_sites", pd.DataFrame())
    syncs = calls[calls["kind"] == "host_sync"] if not calls.empty else calls
    reads = (
        fallbacks[fallbacks["op"].map(judge.is_value_read)] if not fallbacks.empty else fallbacks
    )
    parts = [
        _family_items(tables.families),
        _site_items(
            fallbacks[~fallbacks["op"].map(judge.is_value_read)]
            if not fallbacks.empty
            else fallbacks,
            "fallback",
            "op",
        ),
        _site_items(syncs, "host_sync", "name")
        if not syncs.empty
        else _site_items(reads, "host_sync", "op"),
    ]
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _last_steps(tables: RunTables) -> dict[str, int]:
    return tables.step_sql.last_steps()


def _what(rows: pd.DataFrame) -> str:
    """'compiled 2 graph families (3 compiles per host) and made host syncs (item)'."""
    out = []
    graphs = rows[rows["kind"] == "graph"]
    if len(graphs):
        families = graphs["key"].nunique()
        compiles = int(graphs.groupby("host")["n"].sum().max())
        out.append(
            f"compiled {families} graph famil{'ies' if families > 1 else 'y'} "
            f"({compiles} compile{'s' * (compiles > 1)} per host, at most)"
        )
    for kind, label in (("host_sync", "host sync"), ("fallback", "CPU fallback")):
        mine = rows[rows["kind"] == kind]
        if len(mine):
            names = sorted({k.split(" at ")[0] for k in mine["key"]})
            out.append(f"made {label}s ({', '.join(names)})")
    return " and ".join(out)


def _finding(
    location: Any,
    present: list[str],
    missing: list[str],
    rows: pd.DataFrame,
    total: int,
    wall: float,
) -> Finding:
    only = len(present) <= len(missing)
    named = present if only else missing
    where = common.file_and_line(location) if isinstance(location, str) else "an unknown line"
    what = _what(rows)
    if only:
        title = f"Rank divergence at {where}: {hosts_text(named, total)} {what.split(' (')[0]} the other hosts did not"
        detail = f"At {where}, {hosts_text(named, total)} {what}; the other hosts did not."
    else:
        title = f"Rank divergence at {where}: {hosts_text(named, total)} did not do what the other hosts did"
        detail = (
            f"At {where}, {hosts_text(present, total)} {what}; {', '.join(named)} did not "
            "(and reached that step)."
        )
    steps = sorted({int(v) for v in rows["step"] if int(v) >= 0})
    cost = float(rows.groupby("host")["seconds"].sum().max())
    detail += (
        f" First at step {steps[0] if steps else 'unknown'}. Every collective of the pod waits for the host "
        f"that does extra work. Cost: the compile time of those graphs on the costliest host, {cost:.3f} s."
    )
    severity = judge.severity(cost, wall)
    runs, count = Finding.of_steps(steps)
    evidence = RankDivergenceEvidence(
        hosts=named,
        present_on=present,
        missing_on=missing,
        hosts_total=total,
        items=rows[["kind", "key", "host", "step", "n"]].to_dict("records")[:100],
        only=only,
        key_order=RankDivergenceEvidence.AT_LINE,
    )
    return Finding(
        RULE,
        "medium" if severity == "low" else severity,
        title,
        detail,
        FIX,
        location if isinstance(location, str) else None,
        cost,
        runs,
        evidence,
        count,
    )


def _divergent(
    items: pd.DataFrame, hosts: list[str], last: dict[str, int]
) -> list[tuple[Any, list, list, pd.DataFrame]]:
    """(location, hosts with it, hosts without it, rows) for items not on every host that could have."""
    groups: dict[tuple[Any, tuple[str, ...], tuple[str, ...]], list[pd.DataFrame]] = {}
    for _key, rows in items.groupby("key", sort=False):
        present = sorted(rows["host"].unique(), key=natural_key)
        first = int(rows["step"].min())
        missing = [h for h in hosts if h not in present and last.get(h, -1) >= first]
        if missing:
            location = rows["location"].dropna().iloc[0] if rows["location"].notna().any() else None
            groups.setdefault((location, tuple(present), tuple(missing)), []).append(rows)
    return [(loc, list(p), list(m), pd.concat(r)) for (loc, p, m), r in groups.items()]


def _count_finding(
    tables: RunTables, items: pd.DataFrame, divergent: set[str], hosts: list[str], wall: float
) -> list[Finding]:
    """Hosts that compiled the same families a different number of times."""
    graphs = (
        items[(items["kind"] == "graph") & ~items["key"].isin(divergent)]
        if not items.empty
        else items
    )
    if graphs.empty:
        return []
    counts = graphs.groupby("host")["n"].sum().reindex(hosts, fill_value=0)
    usual = int(counts.mode().iloc[0])
    odd = [h for h in hosts if int(counts[h]) != usual]
    if not odd:
        return []
    text = ", ".join(f"{h} {int(counts[h])}" for h in odd)
    title = f"Rank divergence: {hosts_text(odd, len(hosts))} compiled another number of graphs ({text}; usual {usual})"
    detail = (
        f"Of the graph families every host compiled, hosts {text} compiled a different number of graphs "
        f"than the usual {usual}: recompiles on some hosts only (see the recompile finding's hosts)."
    )
    evidence = RankDivergenceEvidence(
        hosts=odd,
        hosts_total=len(hosts),
        graphs_per_host={h: int(counts[h]) for h in hosts},
        key_order=RankDivergenceEvidence.GRAPH_COUNTS,
    )
    return [Finding(RULE, "medium", title, detail, FIX, None, 0.0, [], evidence)]


def detect_rank_divergence(tables: RunTables) -> list[Finding]:
    """One finding per (user's line, hosts) where some hosts did what the others did not."""
    hosts = run_hosts(tables)
    items = _items(tables)
    if len(hosts) < 2 or items.empty:
        return []
    judged_s = tables.step_sql.judged_wall_s()
    wall = judged_s / len(hosts)
    found = _divergent(items, hosts, _last_steps(tables))
    findings = [_finding(loc, p, m, rows, len(hosts), wall) for loc, p, m, rows in found]
    divergent = {k for *_, rows in found for k in rows["key"]}
    findings += _count_finding(tables, items, divergent, hosts, wall)
    for finding in findings:  # FIX in the words of the backend that ran
        finding.fix = for_backend(tables.backend, "same_step_on_hosts")
    return findings
