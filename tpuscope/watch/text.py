"""The words of a failed watch: which step recompiled and why, which op fell back and where.

A test failure is read once, in a CI log, by someone who wants to fix it without
rerunning: so each message names the step, the cause, the user's line (with its
source text) and what changed, and stays short when there are many of them.
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Iterable
from typing import Any

from tpuscope.analyze.gate import fallback_name
from tpuscope.step_runs import runs_text

MAX_LINES = 6  # recompiles or ops listed in full; the rest are counted


def relative_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if rel.startswith("..") else rel


def site(location: str) -> str:
    """`/abs/test_x.py:12` -> `test_x.py:12` (relative when under the current folder)."""
    path, _, line = location.rpartition(":")
    return f"{relative_path(path)}:{line}" if path and line.isdigit() else location


def where(location: str | None) -> str:
    """`at test_x.py:12: y = x[mask]` (with the source text when the file is readable)."""
    if not location:
        return "(call site not recorded)"
    path, _, line = location.rpartition(":")
    if not path or not line.isdigit():
        return f"at {location}"
    source = linecache.getline(path, int(line)).strip()
    text = f"at {relative_path(path)}:{line}"
    return f"{text}: {source}" if source else text


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def describe_recompiles(
    recompiles: list[Any], limit: int, warmup_compiles: int, note: str | None = None
) -> str:
    """One block for every recompile, then the detectors' fixes."""
    lines = [
        f"tpuscope: {plural(len(recompiles), 'recompile')}, limit {limit} ({_rule(warmup_compiles)})"
    ]
    for item in recompiles[:MAX_LINES]:
        if item.function is not None:  # JAX: the function, not a step, is what recompiled
            defined = f" ({site(item.defined_at)})" if item.defined_at else ""
            cause = item.cause or "unknown"
            if item.changes and ": " in cause:  # the changes follow on their own line
                cause = cause.split(": ", 1)[0]
            lines.append(f"  compile {item.number} of {item.function}{defined}, cause: {cause}")
        else:
            graph = f"graph {item.graph_hash[:12]}" if item.graph_hash else "a graph"
            lines.append(f"  step {item.step}: {graph} compiled, cause: {item.cause or 'unknown'}")
        lines.append(f"    {where(item.location)}")
        if item.changes:
            lines.append(f"    what changed: {'; '.join(item.changes)}")
    if len(recompiles) > MAX_LINES:
        lines.append(
            f"  ... and {len(recompiles) - MAX_LINES} more (the run's compiles table has all)"
        )
    fixes: list[str] = []  # the detectors' fix for each recompile's card
    for item in recompiles:
        fix = item.fix or (item.finding.fix if item.finding is not None else None)
        if fix and fix not in fixes:
            fixes.append(fix)
            lines.append(f"  fix: {fix}")
    if note and not any(item.cause for item in recompiles):
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def _rule(warmup_compiles: int) -> str:
    """What counted as a recompile (tpuscope.analyze.families; warmup_compiles compiles of each
    graph family are let through first)."""
    if warmup_compiles == 0:
        return "warmup_compiles=0: every compile counts"
    first = "first compile" if warmup_compiles == 1 else f"first {warmup_compiles} compiles"
    return (
        f"a recompile: a graph compiled again after its {first}, judged per graph family: "
        "the same line and graph structure, or the same jitted function"
    )


def describe_fallbacks(fallbacks: list[Any], limit: int, allowed: Iterable[str] = ()) -> str:
    """One block per op that ran on the host (any namespace: aten, torchvision, a custom op), most calls first."""
    calls = sum(f.count for f in fallbacks)
    allow = ", ".join(fallback_name(a) for a in allowed)
    head = (
        f"tpuscope: {plural(calls, 'CPU fallback')} (ops torch_xla ran on the host), limit {limit}"
    )
    lines = [head + (f" (allowed: {allow})" if allow else "")]
    for item in fallbacks[:MAX_LINES]:
        lines.append(
            f"  {item.op} ran on the host {plural(item.count, 'time')} "
            f"(steps {runs_text(item.step_runs, item.step_count)})"
        )
        lines.append(f"    {where(item.location)}")
        if item.finding is not None and item.finding.fix:
            lines.append(f"    fix: {item.finding.fix}")
    if len(fallbacks) > MAX_LINES:
        lines.append(f"  ... and {len(fallbacks) - MAX_LINES} more ops")
    return "\n".join(lines)
