"""Earlier runs of the same program in the same store, and which graphs each one compiled.

Rule `compile_time` (detect/compile_time.py) is a pure function of tables; this module makes
the one table it reads from outside the run: `RunTables.history`, one row per (earlier run,
graph hash) with that run's compile seconds of the graph, read on first use from the store of
the run the tables were read from (`RunTables.from_run`: the analysis, `show`, the samples). The same program is the same command (argv) or the same run name
(`--name`, whose default is the script's stem); the graphs themselves are matched by hash, so
two programs that only share a name share no graph and nothing is said. Only runs that started
before this one count: analysing a run again later gives the same history.

Reading the store never fails the analysis: a store that cannot be listed, or a run whose
compiles cannot be read, is history not known (an empty table, or that run left out).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

HISTORY_RUNS = 10  # the newest earlier runs of the program that are read
COLUMNS = ["run_id", "start_ns", "graph_hash", "compiles", "compile_s", "backend_s", "hits"]
READ = ["graph_hash", "duration_ns", "backend_compile_ns", "persistent_cache"]


def empty() -> pd.DataFrame:
    return pd.DataFrame(columns=COLUMNS)


def same_program(meta: dict[str, Any], other: dict[str, Any]) -> bool:
    """Same argv (the launcher's, or the profiled process's), or the same run name."""
    argv = meta.get("argv")
    if argv and other.get("argv") == argv:
        return True
    name = meta.get("name")
    return bool(name) and other.get("name") == name


def store_of(run: Any) -> Any:
    """The store the run belongs to: the object store its meta names (a run analysed in its
    local stage before shipping), else the folder that holds the run's folder."""
    from tpuscope.store.location import Location

    url = run.meta.get("store")
    if url:
        return Location.of(url)
    loc = run.loc
    return Location(loc.fs, loc.path.rsplit("/", 1)[0])


def earlier_runs(run: Any) -> list[dict[str, Any]]:
    """The metas of the newest HISTORY_RUNS earlier runs of the same program, newest first."""
    from tpuscope.store import RunStore

    meta = run.meta
    start = meta.get("start_ns")
    if not start:
        return []
    metas = RunStore(store_of(run)).list_runs(warn=[])
    found = [
        m
        for m in metas
        if m.get("run_id") != run.run_id
        and (m.get("start_ns") or 0) < start
        and m.get("status") != "running"
        and same_program(meta, m)
    ]
    return found[:HISTORY_RUNS]  # list_runs: newest first


def run_history(run: Any) -> pd.DataFrame:
    """One row per (earlier run of the program, graph hash): compiles (not loaded from a
    persistent cache), their seconds (`compile_s`: trace, lower and compile; `backend_s`: the
    backend compile alone where recorded, else the same), and loads from the cache (`hits`)."""
    try:
        earlier = earlier_runs(run)
    except Exception:  # a store that cannot be listed: no history, never a failed analysis
        return empty()
    frames = []
    for meta in earlier:
        frame = _compiles_of(store_of(run) / str(meta["run_id"]))
        if frame is not None and not frame.empty:
            frames.append(_per_graph(frame, str(meta["run_id"]), int(meta.get("start_ns") or 0)))
    return pd.concat(frames, ignore_index=True) if frames else empty()


def _compiles_of(where: Any) -> pd.DataFrame | None:
    from tpuscope.store.run import Run

    try:
        return Run(where).table("compiles", columns=READ)
    except Exception:  # a damaged or foreign run: left out
        return None


def _per_graph(frame: pd.DataFrame, run_id: str, start_ns: int) -> pd.DataFrame:
    hit = frame["persistent_cache"].astype(object).eq("hit")
    duration = frame["duration_ns"].fillna(0).astype(float)
    backend = frame["backend_compile_ns"].astype(float).fillna(duration)
    table = pd.DataFrame(
        {
            "graph_hash": frame["graph_hash"].astype(object),
            "compiles": (~hit).astype(int),
            "compile_s": duration.where(~hit, 0.0) / 1e9,
            "backend_s": backend.where(~hit, 0.0) / 1e9,
            "hits": hit.astype(int),
        }
    ).dropna(subset=["graph_hash"])
    out = table.groupby("graph_hash", sort=False).sum().reset_index()
    out.insert(0, "start_ns", start_ns)
    out.insert(0, "run_id", run_id)
    return out[COLUMNS]
