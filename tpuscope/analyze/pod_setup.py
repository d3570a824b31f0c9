"""Which of a process's first steps are setup, in DuckDB over the steps view of
analyze/pod_sql.py (its temporary table `procs`, its view `s`): the leading runs of steps at a
boundary kind the loop never passes again (an evaluation before the training loop, a setup
sync), as analyze/step_stream.py reads a frame."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

LEAD_SHARE = 4  # a lead with more steps than its loop is setup at under 1/4 of its time


def mark_setup(con: duckdb.DuckDBPyConnection) -> None:
    """procs.loop_from: each process's first step of its loop, after its setup steps
    (analyze/step_stream: leading runs of steps at a boundary kind the loop never passes
    again, with at least two steps after them, each with fewer steps than what follows, or
    fewer than twice as many in under a quarter of its time outside compiles). Only a
    process whose loop has more than one kind can have setup; its kinds' spans are read in
    one grouped pass (no row comes to Python, no pass per process)."""
    con.execute("ALTER TABLE procs ADD COLUMN loop_from BIGINT")
    con.execute("UPDATE procs SET loop_from = first_loop")
    if not _rows(con, "SELECT 1 FROM procs WHERE cardinality(kinds) > 1 AND n_loop > 2 LIMIT 1"):
        return
    spans: dict[tuple[Any, Any], list[KindSpan]] = {}
    for host, pid, *span in _rows(
        con,
        "SELECT host, pid, count(*), min(step), max(step), "
        "coalesce(sum(greatest(wall_ns - coalesce(compile_ns, 0), 0)), 0), count(wall_ns) FROM s "
        "WHERE NOT is_after GROUP BY host, pid, boundary",
    ):
        spans.setdefault((host, pid), []).append(KindSpan(*span))
    for (host, pid), kinds in spans.items():
        loop_from = _loop_from(kinds)
        if loop_from is not None:
            con.execute(
                "UPDATE procs SET loop_from = ? WHERE host IS NOT DISTINCT FROM ? "
                "AND pid IS NOT DISTINCT FROM ?",
                [loop_from, host, pid],
            )


@dataclass(frozen=True)
class KindSpan:
    """A process's loop steps at one boundary kind: how many, their first and last step,
    their time outside compiles and how many of them have a wall time."""

    n: int
    lo: int
    hi: int
    busy_ns: int
    timed: int


def _loop_from(kinds: list[KindSpan]) -> int | None:
    """The first step after the process's setup (see mark_setup), None without setup. A
    leading run holds every step of its kind: its kind's steps all come before any other's
    (a kind seen once: a setup sync; 79 calls of an evaluation before the training steps took
    over, collect/jax/steps.py; jax-ai-stack's miniGPT generates 256 tokens, a jitted call
    each, before 250 training steps that hold most of its time)."""
    kinds = sorted(kinds, key=lambda span: span.lo)
    n_loop = sum(span.n for span in kinds)
    timed = all(span.timed == span.n for span in kinds)
    busy_left = sum(span.busy_ns for span in kinds)
    lead, loop_from = 0, None
    for i, span in enumerate(kinds[:-1]):
        after, busy_left = n_loop - lead - span.n, busy_left - span.busy_ns
        if after < 2 or span.hi > min(rest.lo for rest in kinds[i + 1 :]):
            break
        fewer = span.n == 1 or span.n < after
        briefer = timed and span.n < 2 * after and span.busy_ns * LEAD_SHARE < busy_left
        if not (fewer or briefer):
            break
        lead, loop_from = lead + span.n, kinds[i + 1].lo
    return loop_from


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[Any, ...]]:
    return con.execute(sql).fetchall()
