"""The step figures of every run, in DuckDB over its steps table: the one implementation.

The rules of analyze/judge.py (phases), analyze/hosts.py (per-host steps, the pod view, the
host x step matrix) and the step figures of analyze/summary.py are SQL here, for a pod over the
steps table's Parquet parts (read column by column with DuckDB, projection push-down; a remote
run through fsspec; only small results come to Python, so a pod of 128 hosts x 100k steps,
12.8M rows, needs no frame of them: held as pandas frames they took ~6 GB) and for any other
run over its frame in memory (PodSteps.over_frame: a run of one host, one host of a pod, the
rows a live run has so far). Each row's phase comes back in row order (labels) for the rules
that select rows in pandas. The pod's medians are taken from host x step matrices of one
column at a time (analyze/pod_matrix.py: DuckDB's grouped median keeps every value per group
and was ~7 s a column at 12.8M rows), as pandas takes a median ((lo + hi) / 2 of the middle
two, NaN skipped); DuckDB's own quantiles are only asked of integers (nanosecond counts).
tests/test_pod_sql.py checks the figures against ones computed by hand.
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from tpuscope.analyze.hosts import COUNTS, natural_key
from tpuscope.analyze.pod_matrix import StepMatrix, around
from tpuscope.analyze.pod_setup import mark_setup
from tpuscope.analyze.pod_view import PodFigures, pod_figures
from tpuscope.schema_consts import AFTER_LOOP, NO_SYNC_BOUNDARIES

NUMERIC = ("compile_ns", "execute_ns", *COUNTS)  # summed per (host, step), nulls as 0
MAX_STEP_SPAN = 1 << 21  # steps a process's bitmap may span (256 kB), else steps_once says unsure
PHASES = np.array(["warmup", "judged", "setup", "after"], dtype=object)
STEP_COLUMNS = ("host", "pid", "step", "wall_ns", "boundary", "executions", *NUMERIC)


def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class PodSteps:
    """The step figures of a pod, as SQL on a connection whose view `steps` is the steps table.

    Builds temporary views: `phased` (every step row with its phase, analyze/judge.phases),
    `host_steps` (the judged steps, one row per (host, step): a host's time of a step is its
    slowest process's, its parts summed)
    and one small table, `procs` (per process: rows, last loop step)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, warmup: int) -> None:
        self.con, self.warmup = con, int(warmup)
        self._figures: PodFigures | None = None  # the pod view's pass, once (pod_view)
        self._step_figures: dict[str, Any] | None = None
        self._settled = False
        present = {r[0] for r in con.execute("DESCRIBE steps").fetchall()}
        self.present = present
        cols = ", ".join(c if c in present else f"NULL AS {c}" for c in STEP_COLUMNS)
        cols += ", _row" if "_row" in present else ""
        after = f"coalesce(boundary = {_q(AFTER_LOOP)}, false)"
        con.execute(f"CREATE TEMP VIEW s AS SELECT {cols}, {after} AS is_after FROM steps")
        con.execute(f"CREATE TEMP TABLE procs AS {_procs_sql(self.warmup)}")
        mark_setup(con)
        self.simple = self._simple_phases()
        if self.simple:  # every process past its warm-up, none a single step
            phase = (
                f"CASE WHEN is_after THEN 'after' WHEN step >= {self.warmup} THEN 'judged' "
                "ELSE 'warmup' END"
            )
            con.execute(f"CREATE TEMP VIEW phased AS SELECT *, {phase} AS phase FROM s")
        else:
            phase = (
                "CASE WHEN s.is_after AND p.n = 1 THEN 'judged' WHEN s.is_after THEN 'after' "
                "WHEN s.step < p.loop_from THEN 'setup' "
                f"WHEN s.step >= least(p.loop_from + {self.warmup}, p.last_loop) THEN 'judged' "
                "ELSE 'warmup' END"
            )
            con.execute(
                f"CREATE TEMP VIEW phased AS SELECT s.*, {phase} AS phase FROM s JOIN procs p "
                "ON s.host IS NOT DISTINCT FROM p.host AND s.pid IS NOT DISTINCT FROM p.pid"
            )
        self.grouped = not self._one_process_per_host()
        self._host_steps()

    @classmethod
    def over_frame(cls, steps: pd.DataFrame, warmup: int) -> PodSteps:
        """The same figures of a steps table held in memory (a run of one host, one host of a
        pod, a live run's rows so far): the frame's columns that are read, scanned by DuckDB
        where they lie, each row's position kept as `_row` (labels() gives them back in order)."""
        con = duckdb.connect()
        cols = [c for c in STEP_COLUMNS if c in steps.columns]
        if steps.empty:  # no rows to take the types from: the store's schema's
            from tpuscope.schema import TABLES

            table = TABLES["steps"].empty_table().select(cols)
            frame = table.append_column("_row", pa.array([], pa.int64()))
        else:
            frame = steps[cols].assign(_row=np.arange(len(steps)))  # copy-on-write: no copy
        con.register("steps", frame)
        return cls(con, warmup)

    def labels(self) -> np.ndarray:
        """Each row's phase (analyze/judge.phases), in the rows' order (their `_row`)."""
        code = "CASE phase WHEN 'warmup' THEN 0 WHEN 'judged' THEN 1 WHEN 'setup' THEN 2 ELSE 3 END"
        got = self.con.execute(
            f"SELECT {code}::TINYINT AS c FROM phased ORDER BY _row"
        ).fetchnumpy()["c"]
        return PHASES[np.asarray(got, dtype=np.int64)]

    def _host_steps(self) -> None:
        """The view `host_steps`: one row per (host, step) of the judged steps, the slowest
        process's wall time and the host's summed parts."""
        sums = ", ".join(f"coalesce({c}, 0) AS {c}" for c in NUMERIC)
        if not self.grouped:  # one process per host, each step once: the judged rows are those
            body = f"SELECT host, step, wall_ns, {sums} FROM phased WHERE phase = 'judged'"
        else:
            aggs = ", ".join(f"sum(coalesce({c}, 0)) AS {c}" for c in NUMERIC)
            body = (
                f"SELECT host, step, max(wall_ns) AS wall_ns, {aggs} FROM phased "
                "WHERE phase = 'judged' GROUP BY host, step"
            )
        self.con.execute(
            "CREATE OR REPLACE TEMP VIEW host_steps AS SELECT *, "
            "greatest(wall_ns - compile_ns - execute_ns, 0) AS host_ns "
            f"FROM ({body}) WHERE host IS NOT NULL"
        )

    def group_steps(self) -> None:
        """A process wrote a step twice (never seen from a collector): take each (host, step)
        as pandas' groupby does, the slowest row and the summed parts."""
        if not self.grouped:
            self.grouped = True
            self._host_steps()
            self._figures = self._step_figures = None  # of the rows before grouping

    def settle(self) -> None:
        """Before the per-(host, step) figures: a step written twice anywhere (steps_once) makes
        each (host, step) the slowest row and the summed parts (group_steps); asked once."""
        if not self._settled:
            self._settled = True
            if not self.steps_once():
                self.group_steps()

    def steps_once(self) -> bool:
        """Whether every process wrote each of its steps once (a collector's steps only grow),
        proven per (host, pid) by a bitmap of its steps (one pass; a count(DISTINCT) was ~5 s
        CPU at 12.8M rows); False when it cannot be proven cheaply (a null step, a wide span)."""
        if self.grouped:
            return True  # grouped already: a step written twice is taken as pandas takes it
        lo, hi, nulls = self.rows(
            "SELECT min(first_step), max(last_step), sum(n) - sum(n_step) FROM procs"
        )[0]
        if lo is None or nulls or int(hi) - int(lo) >= MAX_STEP_SPAN:
            return lo is None
        twice = self.rows(
            f"SELECT count(*) FROM (SELECT count(*) AS n, bit_count(bitstring_agg(step, {int(lo)}, "
            f"{int(hi)})) AS once FROM s GROUP BY host, pid) WHERE n <> once"
        )[0][0]
        return not twice

    def _simple_phases(self) -> bool:
        row = self.con.execute(
            f"SELECT bool_and(n > 1 AND (last_loop IS NULL OR last_loop >= {self.warmup}) "
            "AND coalesce(loop_from, 0) = 0) FROM procs"
        ).fetchall()[0]
        return bool(row[0])

    def _one_process_per_host(self) -> bool:
        row = self.con.execute(
            "SELECT count(*) = count(DISTINCT host) FROM procs WHERE host IS NOT NULL"
        ).fetchall()[0]
        return bool(row[0])

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return self.con.execute(sql).fetchall()

    def frame(self, sql: str) -> pd.DataFrame:
        return self.con.execute(sql).df()

    # -- whole-run figures (analyze/summary.py, analyze/families.loop_ends) ------------------
    def hosts(self) -> list[str]:
        """Every host with a step row."""
        return [
            str(r[0]) for r in self.rows("SELECT DISTINCT host FROM procs WHERE host IS NOT NULL")
        ]

    def loop_ends(self) -> dict[str, int]:
        """analyze/families.loop_ends: 'host/pid' -> the last step of its loop."""
        # max(step) of the phases but after and setup, per process, from procs (no pass over the
        # rows): setup steps lead the loop (its last step is last_loop), and a process of one
        # row at the after-the-loop boundary has that row judged (phased), its step its last
        rows = self.rows(
            "SELECT host, pid, CASE WHEN last_loop IS NOT NULL THEN last_loop "
            "WHEN n = 1 THEN last_step END FROM procs"
        )
        if not {"host", "pid"} <= self.present:  # no process to name the ends by
            return {}
        return {f"{h}/{p}": int(s) for h, p, s in rows if s is not None}

    def unsynced_steps(self) -> set[tuple[str, int]]:
        """analyze/step_stream.unsynced_steps: ('host/pid', step) of a loop with no sync."""
        rows = self.rows(
            "SELECT host, pid, unnest(unsynced) FROM procs WHERE unsynced IS NOT NULL"
        )  # listed by the pass that made procs
        return {(f"{h}/{p}", int(step)) for h, p, step in rows}

    def host_walls(self) -> dict[str, int]:
        """Per host, the wall time of every step row of its processes (ns)."""
        rows = self.rows(
            "SELECT CAST(host AS VARCHAR), sum(all_wall) FROM procs WHERE host IS NOT NULL GROUP BY 1"
        )
        return {str(h): int(w) for h, w in rows if w is not None}

    def last_steps(self) -> dict[str, int]:
        """Per host, its last step (any phase)."""
        rows = self.rows(
            "SELECT host, max(last_step) FROM procs WHERE host IS NOT NULL GROUP BY host"
        )
        return {str(h): int(s) for h, s in rows if s is not None}

    def judged_wall_s(self) -> float:
        """analyze/judge.wall_s of the judged steps."""
        return float(self.step_figures()["judged_wall_ns"]) / 1e9  # its sum, asked once

    def after_rows(self) -> pd.DataFrame:
        """The after-the-loop steps (one per process at most): few rows, in pandas; with the
        simple phases, those procs listed (every row at the after-the-loop boundary)."""
        if self.simple:
            rows = self.frame(
                "SELECT host, pid, unnest(after_rows, recursive := true) FROM procs "
                "WHERE after_rows IS NOT NULL"
            )
        else:
            rows = self.frame(
                "SELECT host, pid, step, wall_ns, executions FROM phased WHERE phase = 'after'"
            )
        return rows[[c for c in rows.columns if c in self.present]]  # a table without a host

    def step_figures(self) -> dict[str, Any]:
        """Counts and sums of the phases: what analyze/summary.summarize reads of the steps."""
        if self._step_figures is None:
            self._step_figures = self._count_phases()
        return self._step_figures

    def _count_phases(self) -> dict[str, Any]:
        if self.simple:  # the sums of procs' per-process counts of the simple phases
            sql = (
                "SELECT sum(n_loop), sum(j_n), sum(j_wall), sum(j_transfers), sum(j_transfers_n), "
                "sum(all_wall), count(*), sum(all_transfers), sum(n) FROM procs"
            )
        else:
            sql = (
                "SELECT count(*) FILTER (WHERE phase NOT IN ('after', 'setup')), "
                "count(*) FILTER (WHERE phase = 'judged'), "
                "sum(wall_ns) FILTER (WHERE phase = 'judged'), "
                "sum(transfers_from_device) FILTER (WHERE phase = 'judged'), "
                "count(transfers_from_device) FILTER (WHERE phase = 'judged'), sum(wall_ns), "
                "(SELECT count(*) FROM procs), sum(transfers_from_device), count(*) FROM phased"
            )
        (
            loop,
            judged,
            judged_wall,
            transfers,
            transfers_n,
            all_wall,
            procs,
            all_transfers,
            rows,
        ) = self.rows(sql)[0]
        return {
            "loop": int(loop),
            "judged": int(judged),
            "judged_wall_ns": int(judged_wall or 0),
            "all_wall_ns": int(all_wall or 0),
            "transfers_mean": float(int(transfers)) / transfers_n if transfers_n else None,
            "transfers": int(all_transfers or 0),
            "processes": int(procs),
            "rows": int(rows),
        }

    def judged_quantile(self, q: float, n: int) -> float:
        """pandas' Series.quantile(q) of the judged steps' wall_ns (numpy's linear method),
        from the two order statistics around its index (DuckDB's quantile_disc at k is
        the (k+1)-th smallest when asked at (k + 0.5) / n), or from the pod view's wall matrix
        when it held every judged row (pod_matrix.order_stats: no second sort of 12.8M rows)."""
        below, above, gamma = around(q, n)
        ranked = self._figures.ranked if self._figures is not None else {}
        if (n, below) in ranked and (n, above) in ranked:
            a, b = ranked[(n, below)], ranked[(n, above)]
        else:
            a, b = self.rows(
                f"SELECT quantile_disc(wall_ns, {(below + 0.5) / n!r}), "
                f"quantile_disc(wall_ns, {(above + 0.5) / n!r}) FROM phased WHERE phase = 'judged'"
            )[0]
        return float(np.quantile(np.array([a, b], dtype=np.int64), gamma))

    # -- the pod view (analyze/pod_view.py) --------------------------------------------------
    def judged_hosts(self) -> list[str]:
        """The hosts with judged steps, in natural order."""
        return sorted(self._judged_span()[0], key=natural_key)

    def _judged_span(self) -> tuple[list[str], int | None, int | None]:
        """The hosts with judged steps and their lowest and highest judged step, in one pass
        (with the simple phases, from procs' per-process figures of them)."""
        sql = (
            "SELECT list(DISTINCT CAST(host AS VARCHAR)) FILTER (WHERE j_n > 0), min(j_lo), "
            "max(j_hi) FROM procs WHERE host IS NOT NULL"
            if self.simple
            else "SELECT list(DISTINCT CAST(host AS VARCHAR)), min(step), max(step) FROM host_steps"
        )
        hosts, lo, hi = self.rows(sql)[0]
        return [str(h) for h in hosts or []], lo, hi

    def pod_view(self) -> dict[str, Any]:
        """The hosts judged against each other (analyze/hosts.py's rule, analyze/pod_view.py's
        numpy over host x step matrices), computed once; empty below two hosts with judged
        steps (a run of one host makes no matrix for it)."""
        if self._figures is None and len(self._judged_span()[0]) < 2:
            return {}
        return self._pod_figures().view

    def _pod_figures(self) -> PodFigures:
        if self._figures is None:
            self.settle()  # each (host, step) one row: the matrix holds them all
            found, lo, hi = self._judged_span()
            hosts = sorted(found, key=natural_key)
            if not hosts:
                return PodFigures({})
            # no judged row with a part not 0 (procs counted them): no rows to read for them
            zero = self.simple and not self.rows("SELECT sum(j_some) FROM procs")[0][0]
            self._figures = pod_figures(StepMatrix(self.con, hosts, (lo, hi)), zero)
            if len(hosts) < 2:  # its hosts' medians and matrix, but no host to judge against
                self._figures.view = {}
        return self._figures

    # -- the summary's hosts and host_steps ---------------------------------------------------
    def host_summary(self, meta: dict[str, Any]) -> list[dict[str, Any]]:
        """Per host with a step row: its processes, steps, median judged step and how it ended."""
        ended = {str(h.get("host")): h.get("status") for h in meta.get("hosts", [])}
        procs: dict[str, int] = {}
        for proc in meta.get("processes", []):
            procs[str(proc.get("host"))] = procs.get(str(proc.get("host")), 0) + 1
        counts = {
            str(h): int(n)
            for h, n in self.rows(
                "SELECT CAST(host AS VARCHAR), sum(n) FROM procs WHERE host IS NOT NULL GROUP BY 1"
            )
        }
        p50 = self._pod_figures().p50_ms  # from the wall matrix
        return [
            {
                "host": host,
                "processes": procs.get(host, 0),
                "steps": counts[host],
                "p50_ms": p50.get(host),
                "status": ended.get(host),
            }
            for host in sorted(counts, key=natural_key)
        ]

    def step_matrix_record(self) -> dict[str, Any] | None:
        """The summary's `host_steps`: per host and bin of at most MAX_COLUMNS bins of steps,
        the median judged wall time in ms (analyze/pod_view.step_matrix_record), so the Hosts
        page draws a pod of millions of steps without reading them."""
        return self._pod_figures().record


def _procs_sql(warmup: int) -> str:
    """One pass over the steps, per process: what the phases need (analyze/judge.phases), and
    what the pod's figures take of the steps: the judged rows' counts and sums as the simple
    phases (every process past its warm-up, none a single step, no setup) count them (used
    only when the phases are those), whether a judged row has a part that is not 0, the
    after-the-loop rows and the steps of a loop with no sync (listed: few rows), so that no
    other pass over the parts is made for them. The rows' conditions are columns computed once
    and aggregated (`max(CASE ..)`): a FILTER per aggregate cost ~0.7 s CPU more at 12.8M rows."""
    judged = f"NOT is_after AND step >= {int(warmup)}"
    marked = ", ".join(_q(b) for b in NO_SYNC_BOUNDARIES)
    some = " OR ".join(f"coalesce({c}, 0) <> 0" for c in ("compile_ns", *COUNTS))
    rows = (
        "SELECT *, CASE WHEN NOT is_after THEN step END AS loop_step, "
        "CASE WHEN NOT is_after THEN boundary END AS loop_kind, "
        f"coalesce({judged}, false) AS judged, CASE WHEN {judged} THEN step END AS j_step, "
        f"CASE WHEN {judged} THEN wall_ns END AS j_wall_ns, "
        f"CASE WHEN {judged} THEN transfers_from_device END AS j_transfers_row, "
        f"coalesce({judged} AND ({some}), false) AS some_part FROM s"
    )
    return (
        "SELECT host, pid, count(*) AS n, max(loop_step) AS last_loop, "
        "min(loop_step) AS first_loop, sum((NOT is_after)::INT) AS n_loop, "
        "arg_min(boundary, loop_step) AS first_kind, histogram(loop_kind) AS kinds, "
        "coalesce(max(transfers_from_device) > 0, false) AS transfers, max(step) AS last_step, "
        "min(step) AS first_step, count(step) AS n_step, sum(judged::INT) AS j_n, "
        "sum(j_wall_ns) AS j_wall, sum(j_transfers_row) AS j_transfers, "
        "count(j_transfers_row) AS j_transfers_n, min(j_step) AS j_lo, max(j_step) AS j_hi, "
        "sum(some_part::INT) AS j_some, "
        "sum(wall_ns) AS all_wall, sum(transfers_from_device) AS all_transfers, "
        "list(struct_pack(step := step, wall_ns := wall_ns, executions := executions)) "
        "FILTER (WHERE is_after) AS after_rows, "
        f"list(step) FILTER (WHERE boundary IN ({marked})) AS unsynced "
        f"FROM ({rows}) GROUP BY host, pid"
    )
