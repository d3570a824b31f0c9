"""A pod's tables in bounded memory: its steps and metrics stay in the Parquet parts.

A run of many hosts is judged host by host (detect/pod.py) and the hosts against each
other (straggler, rank_divergence); neither needs every host's step rows in memory at once.
`PodTables` holds the small tables whole (compiles and their graph families, fallbacks,
the metrics' whole-run rows of imported evidence) and answers the rest from DuckDB over the
parts: the pod's step figures (analyze/pod_sql.PodSteps) and, for the per-host rules, one
host's tables at a time, read from that host's own parts (`for_host`). Its `steps` frame is
empty and its `judged`/`loop`/`phase` refuse to be read: a rule that wants a pod's whole
step table must ask PodSteps, never get a silently empty one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any

import pandas as pd

from tpuscope.analyze.hosts import natural_key
from tpuscope.analyze.pod_sql import PodSteps
from tpuscope.detect.tables import UNREAD_STEP_COLUMNS, LazyTables, RunTables
from tpuscope.schema_consts import DEFAULT_WARMUP
from tpuscope.store.sql import HostReader

MAIN = ("steps", "compiles", "fallbacks", "metrics", "findings")


class HostExtra(Mapping[str, pd.DataFrame]):
    """A run's other tables, each read on first access and only the host's rows (its parts)."""

    def __init__(self, reader: HostReader, names: list[str], host: str) -> None:
        self._reader, self._names, self._host = reader, names, host
        self._cache: dict[str, pd.DataFrame] = {}

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._cache:
            self._cache[name] = read_host(self._reader, name, self._host)
        return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def read_host(
    reader: HostReader,
    name: str,
    host: str,
    columns: list[str] | None = None,
    floats: frozenset[str] = frozenset(),
) -> pd.DataFrame:
    """One host's rows of a table (DuckDB over its own parts), with `floats` as float64: the
    integer columns that hold a null on some host, as the whole table's frame has them."""
    from tpuscope.store.run import table_to_frame

    frame = table_to_frame(reader.read(name, host, columns), consume=True)
    for col in floats & set(frame.columns):
        if frame[col].dtype.kind in "iu":
            frame[col] = frame[col].astype("float64")
    return frame


def split_by_host(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """A small frame's rows per host (its host column as text)."""
    if frame.empty or "host" not in frame.columns:
        return {}
    return {str(h): part for h, part in frame.groupby(frame["host"].astype(str), sort=False)}


class PodTables(RunTables):
    """RunTables of a pod whose step rows stay in its parts (see the module doc)."""

    def __init__(
        self,
        run: Any,
        meta: dict[str, Any],
        pod: PodSteps,
        hosts: list[str],
        compiles: pd.DataFrame,
        fallbacks: pd.DataFrame,
        whole_metrics: pd.DataFrame,
        extra: Mapping[str, pd.DataFrame],
        floats: dict[str, frozenset[str]],
    ) -> None:
        steps = pd.DataFrame(columns=[c for c in _step_columns()])
        super().__init__(
            meta=meta,
            steps=steps,
            compiles=compiles,
            fallbacks=fallbacks,
            metrics=whole_metrics,
            extra=extra,
        )
        self.run, self.pod, self.hosts, self._floats = run, pod, hosts, floats
        self.__dict__["step_sql"] = pod  # RunTables' step figures: the same SQL, over the parts
        self.reader = HostReader(run.loc)

    @classmethod
    def from_run(cls, run: Any) -> RunTables:
        """The pod's tables; a run whose rows come from one host only is read whole, as before."""
        from tpuscope.schema import TABLES
        from tpuscope.store import sql

        meta = run.meta
        con = sql.views(run.loc, ["steps", "metrics"])
        con.execute("SET preserve_insertion_order = false")  # aggregates only: any order
        pod = PodSteps(con, int(meta.get("warmup", DEFAULT_WARMUP)))
        compiles, fallbacks = run.compiles, run.fallbacks
        found = set(pod.hosts())
        for frame in (compiles, fallbacks):
            if not frame.empty and "host" in frame.columns:
                found.update(str(h) for h in frame["host"].dropna().unique())
        live = {
            str(p.get("host"))
            for p in meta.get("processes", [])
            if p.get("host") and p.get("status") != "imported"
        }
        hosts = sorted((h for h in found if h in live), key=natural_key)
        if len(hosts) < 2:
            con.close()
            return RunTables.from_run(run)
        whole = run.table("metrics", where="step = -1")
        extra = LazyTables(run, [name for name in TABLES if name not in MAIN])
        floats = {name: _null_ints(con, name) for name in ("steps", "metrics")}
        return cls(run, meta, pod, hosts, compiles, fallbacks, whole, extra, floats)

    @property
    def phase(self) -> pd.Series:
        raise TypeError("a pod's step rows stay in its parts: ask PodTables.pod")

    judged = phase  # type: ignore[assignment]
    loop = phase  # type: ignore[assignment]

    # -- one host ------------------------------------------------------------------------------
    @cached_property
    def _split(self) -> dict[str, dict[str, pd.DataFrame]]:
        return {
            "compiles": split_by_host(self.compiles),
            "fallbacks": split_by_host(self.fallbacks),
            "families": split_by_host(self.families),
        }

    def _part(self, name: str, host: str) -> pd.DataFrame:
        frame = getattr(self, name)
        return self._split[name].get(host, frame.iloc[0:0])

    def for_host(self, host: str) -> RunTables:
        """The run as one host saw it: its rows (its own parts), its processes, its families."""
        return self._host_tables(host, self._read(self.reader, host))

    def plan(self, hosts: list[str], rules: list[Any]) -> dict[str, list[Any]]:
        """Per host, the rules that can find something on it (detect/pod_gate.py); the hosts
        left out are never read. Their steps are checked for a step written twice (by SQL) as
        _host_tables checks a read host's, so the pod's step figures group them alike."""
        from tpuscope.detect.pod_gate import host_facts, plan

        split = self._split
        facts = host_facts(self.pod.con, self.run, hosts, split["fallbacks"], self.families)
        return plan(facts, hosts, rules)

    def each_host(self, hosts: list[str]) -> Iterator[tuple[str, RunTables]]:
        """(host, for_host(host)) in order, the next host's rows read by a second thread (its
        own DuckDB connection) while the rules judge this one: reading is a third of a host's
        time, and DuckDB and pyarrow's conversion leave the interpreter free meanwhile."""
        from concurrent.futures import ThreadPoolExecutor

        self._split  # noqa: B018  (the pod's families, computed here, not in the thread)
        ahead = HostReader(self.run.loc)
        try:
            with ThreadPoolExecutor(1) as pool:
                coming = pool.submit(self._read, ahead, hosts[0]) if hosts else None
                for n, host in enumerate(hosts):
                    assert coming is not None  # hosts is not empty here
                    rows = coming.result()
                    if n + 1 < len(hosts):
                        coming = pool.submit(self._read, ahead, hosts[n + 1])
                    yield host, self._host_tables(host, rows)
        finally:
            ahead.close()

    def _read(self, reader: HostReader, host: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        steps = read_host(reader, "steps", host, _step_columns(), self._floats["steps"])
        metrics = read_host(reader, "metrics", host, None, self._floats["metrics"])
        return steps, metrics

    def _host_tables(self, host: str, rows: tuple[pd.DataFrame, pd.DataFrame]) -> RunTables:
        steps, metrics = rows
        meta = {
            **self.meta,
            "processes": [p for p in self.meta.get("processes", []) if str(p.get("host")) == host],
        }
        one = RunTables(
            meta=meta,
            steps=steps,
            compiles=self._part("compiles", host),
            fallbacks=self._part("fallbacks", host),
            metrics=metrics,
            extra=HostExtra(self.reader, list(self.extra), host),
        )
        one.__dict__["families"] = self._part("families", host)  # families are per process already
        return one


def live_hosts(meta: dict[str, Any]) -> int:
    """How many hosts profiled processes of this run ran on (imported files are not hosts)."""
    return len(
        {
            str(p.get("host"))
            for p in meta.get("processes", [])
            if p.get("host") and p.get("status") != "imported"
        }
    )


def run_tables(run: Any) -> RunTables:
    """The tables the analysis reads: a pod's as PodTables (its steps and metrics stay in the
    parts), any other run's whole (RunTables.from_run)."""
    if live_hosts(run.meta) >= 2:
        return PodTables.from_run(run)
    return RunTables.from_run(run)


def _step_columns() -> list[str]:
    from tpuscope.schema import TABLES

    return [c for c in TABLES["steps"].names if c not in UNREAD_STEP_COLUMNS]


def _null_ints(con: Any, view: str) -> frozenset[str]:
    """The integer columns of a table that hold a null anywhere (pandas reads them as float64)."""
    ints = [
        name
        for name, kind, *_ in con.execute(f'DESCRIBE "{view}"').fetchall()
        if kind in ("BIGINT", "INTEGER", "SMALLINT", "TINYINT")
    ]
    if not ints:
        return frozenset()
    counts = con.execute(
        f'SELECT count(*), {", ".join(f"count({c})" for c in ints)} FROM "{view}"'
    ).fetchall()[0]
    return frozenset(c for c, n in zip(ints, counts[1:], strict=True) if n < counts[0])
