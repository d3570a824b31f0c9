"""Which of a process's first steps are setup, in DuckDB over the steps view of
analyze/pod_sql.py (its temporary table `procs`, its view `s`): the leading runs of steps at a
boundary kind the loop never passes again (an evaluation before the training loop, a setup
sync), as analyze/step_stream.py reads a frame."""

from __future__ import annotations

from typing import Any

import duckdb


def mark_setup(con: duckdb.DuckDBPyConnection) -> None:
    """procs.loop_from: each process's first step of its loop, after its setup steps
    (analyze/step_stream: leading runs of steps at a boundary kind the loop never passes
    again, each with fewer steps or less time than what follows it, with at least two steps
    after them). A process can have setup only where its loop's steps are of more than one
    kind; each leading run is checked in SQL, its rows never brought to Python."""
    con.execute("ALTER TABLE procs ADD COLUMN loop_from BIGINT")
    con.execute("UPDATE procs SET loop_from = first_loop")
    maybe = _rows(
        con,
        "SELECT host, pid, n_loop, kinds FROM procs "
        "WHERE first_kind IS NOT NULL AND cardinality(kinds) > 1 AND n_loop > 2",
    )
    for host, pid, n_loop, kinds in maybe:
        lead = _setup_rows(con, host, pid, n_loop, kinds)
        if lead:
            con.execute(
                "UPDATE procs SET loop_from = ? WHERE host IS NOT DISTINCT FROM ? "
                "AND pid IS NOT DISTINCT FROM ?",
                [_loop_rows(con, host, pid, lead, 1)[0][0], host, pid],
            )


def _setup_rows(
    con: duckdb.DuckDBPyConnection, host: Any, pid: Any, n_loop: int, kinds: dict[str, int]
) -> int:
    """How many of the process's leading loop rows are setup (see mark_setup): each
    leading run holds every step of its kind (a kind seen once: a setup sync; 79 calls of an
    evaluation before the training steps took over, collect/jax/steps.py), and has fewer
    steps than follow it or less time outside compiles (jax-ai-stack's miniGPT generates 256
    tokens, a jitted call each, before 250 training steps that hold most of its time)."""
    lead = 0
    while True:
        kind = _loop_rows(con, host, pid, lead, 1)[0][1]
        count = kinds.get(kind, 0)
        after = n_loop - lead - count
        if not count or after < 2:
            return lead
        others, busy_ns = _span(con, host, pid, lead, count, kind)
        if others or (
            count > 1
            and count >= after
            and busy_ns >= _span(con, host, pid, lead + count, after)[1]
        ):
            return lead
        lead += count


def _span(
    con: duckdb.DuckDBPyConnection, host: Any, pid: Any, offset: int, limit: int, kind: str = ""
) -> tuple[int, int]:
    """Of a process's loop rows from the `offset`-th, `limit` rows: how many are not at
    boundary `kind`, and their wall time outside compiles (a phase's first steps compile,
    which says nothing of how much of the run it is)."""
    got = con.execute(
        "SELECT count(*) FILTER (WHERE boundary IS DISTINCT FROM ?), "
        "sum(wall_ns - coalesce(compile_ns, 0)) FROM (SELECT boundary, wall_ns, compile_ns "
        "FROM s WHERE host IS NOT DISTINCT FROM ? AND pid IS NOT DISTINCT FROM ? "
        "AND NOT is_after ORDER BY step LIMIT ? OFFSET ?)",
        [kind, host, pid, limit, offset],
    ).fetchone()
    return (int(got[0]), int(got[1] or 0)) if got else (0, 0)


def _loop_rows(
    con: duckdb.DuckDBPyConnection, host: Any, pid: Any, offset: int, limit: int
) -> list[tuple[Any, ...]]:
    """(step, boundary) of a process's loop rows from the `offset`-th, in step order."""
    return con.execute(
        "SELECT step, boundary FROM s WHERE host IS NOT DISTINCT FROM ? AND "
        "pid IS NOT DISTINCT FROM ? AND NOT is_after ORDER BY step LIMIT ? OFFSET ?",
        [host, pid, limit, offset],
    ).fetchall()


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[Any, ...]]:
    return con.execute(sql).fetchall()
