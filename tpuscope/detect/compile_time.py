"""Rule `compile_time`: the run's first compiles against its wall time, and the cache that would
save them next time.

On a TPU a training step compiles in 4-14 s and every op run outside `jit` compiles on its own
for 0.5-2.5 s, so a short run (a debug session, a sweep's trial, a restart after preemption) is
mostly compiling, and the program compiles the same graphs again at every start. A persistent
compilation cache (JAX's `jax_compilation_cache_dir`, torch_xla's
`torch_xla.runtime.initialize_cache`) loads them instead.

What the card weighs: the first compiles (analyze/families.py; the recompiles are rule
`recompile`'s, whose card carries its own compile time, and a bounded set's later graphs its
note's), split at the user's lines into the step's own compiles (JAX: the function whose calls
are the steps, or where the program's own annotations mark them, the step's graphs in the
device trace; torch_xla: compiles inside the loop's steps), ops compiled one by one outside
`jit` (JAX's eager ops: an init outside jit), and the rest (setup, eval, library jits).

Whether the persistent cache was on and whether it hit is what the runtime said (the process
meta's `compile_cache`, `compiles.persistent_cache` from JAX's cache events, torch_xla's
PersistentCacheHit/Miss counters), never guessed: a run whose cache served its graphs gets no
advice to turn it on. Across runs (`RunTables.history`, detect/compile_history.py, read from the
run's store on first use): when the
same graphs compiled in the program's earlier runs in this store, the card says in how many
and what a cache would have saved.

A card when the first compiles cost at least MEDIUM_SHARE of the run's wall time and either
MIN_RUN_S by themselves or MIN_REPEAT_S of graphs the program compiled in its previous run too.
Severity by share of the whole run's wall time, as for `recompile` (analyze/judge.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tpuscope.analyze import judge
from tpuscope.analyze.contract import CompileTimeEvidence
from tpuscope.detect import common
from tpuscope.detect.common import UNKNOWN_LOCATION
from tpuscope.detect.compile_advice import JAX_MIN_S, cache_text, fix_text, history_text
from tpuscope.detect.compile_kinds import (
    CALLBACK,
    EAGER,
    OTHER,
    STEP,
    keras_step,
    kinds,
    library_step_function,
)
from tpuscope.detect.keras_fit import keras_eager_layers
from tpuscope.detect.recompile import whole_wall_s
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding

RULE = "compile_time"
# A run's first compiles are a card by themselves from this many seconds: a TPU training step
# compiles in 4-14 s, the v5e runs of issue 41 in 20.6 and 23.8-26.3 s; the test suite's tiny
# CPU runs mostly compile less. Below it, a card needs the program's earlier runs as evidence.
MIN_RUN_S = 10.0
# ...and from this many once the same graphs compiled in the program's previous run: JAX's own
# threshold for writing a compile to its cache (jax_persistent_cache_min_compile_time_secs).
MIN_REPEAT_S = 1.0
REPEAT_SHARE = 0.5  # an earlier run repeats this one when it compiled half its seconds or more
LINES = 5  # lines named per kind of compile
# torch_xla's counters of its persistent cache (a load that cannot be deserialized compiles
# again: torch_xla 2.9 on the CPU backend, measured here, fails to load every entry it wrote)
XLA_CACHE_COUNTERS = {
    "PersistentCacheHit": "hits",
    "PersistentCacheMiss": "misses",
    "PersistentCacheDeserializeFailure": "load_failures",
}


def _seconds(rows: pd.DataFrame, column: str = "duration_ns") -> float:
    if rows.empty or column not in rows:
        return 0.0
    return float(rows[column].fillna(0).astype(float).sum()) / common.NS


def first_compiles(families: pd.DataFrame) -> pd.DataFrame:
    """Compiles that are no recompile (rule recompile's) and no later graph of a bounded set
    (its note's): what a persistent cache, not a code change, saves."""
    if families.empty:
        return families
    keep = ~families["recompile"].astype(bool) & families["verdict"].ne("bounded")
    return families[keep.to_numpy()]


def _status(rows: pd.DataFrame) -> pd.Series:
    if "persistent_cache" not in rows:
        return pd.Series(None, index=rows.index, dtype=object)
    return rows["persistent_cache"].astype(object).where(rows["persistent_cache"].notna(), None)


def _lines(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """The user's lines of these compiles, costliest first: compiles, seconds, functions (the
    costliest first: the ahead-of-time advice names a line's first)."""
    if rows.empty:
        return []
    where = rows["location"].astype(object).where(rows["location"].notna(), UNKNOWN_LOCATION)
    frame = pd.DataFrame(
        {
            "location": where,
            "seconds": rows["duration_ns"].fillna(0).astype(float) / common.NS,
            "function": rows["function"].astype(object) if "function" in rows else None,
        }
    )
    out: list[dict[str, Any]] = []
    for location, group in frame.groupby("location", sort=False):
        named = group[group["function"].map(lambda f: isinstance(f, str))]
        seconds = named.groupby(named["function"].astype(str), sort=True)["seconds"].sum()
        functions = [str(f) for f in seconds.sort_values(ascending=False, kind="stable").index]
        out.append(
            {
                "location": str(location),
                "compiles": len(group),
                "seconds": round(float(group["seconds"].sum()), 3),
                "functions": functions[:6],
            }
        )
    return sorted(out, key=lambda d: -float(d["seconds"]))[:LINES]


def groups(
    rows: pd.DataFrame, kind: pd.Series, after: pd.DataFrame | None = None
) -> list[dict[str, Any]]:
    """The first compiles by kind (step, eager, setup and other), each with its lines and the
    seconds of them made after the loop (`after`: the after-the-loop steps' rows)."""
    out = []
    late = _in_steps(rows, after)
    for name in (STEP, EAGER, CALLBACK, OTHER):
        chosen = kind.to_numpy() == name
        part = rows[chosen]
        if not part.empty:
            out.append(
                {
                    "kind": name,
                    "compiles": len(part),
                    "seconds": round(_seconds(part), 3),
                    "after_s": round(_seconds(rows[chosen & late]), 3),
                    "after_compiles": int((chosen & late).sum()),
                    "after_lines": _lines(rows[chosen & late]),
                    "before_lines": _lines(rows[chosen & ~late]),
                    "lines": _lines(part),
                }
            )
    return out


def _in_steps(rows: pd.DataFrame, steps: pd.DataFrame | None) -> np.ndarray:
    """Which rows were made in one of these steps (their process's)."""
    if steps is None or steps.empty or rows.empty or "step" not in rows:
        return np.zeros(len(rows), dtype=bool)
    keys = [k for k in ("host", "pid", "step") if k in rows and k in steps]
    marked = rows[keys].merge(steps[keys].drop_duplicates(), "left", on=keys, indicator=True)
    return (marked["_merge"] == "both").to_numpy()


def cache_state(tables: RunTables, first: pd.DataFrame | None = None) -> dict[str, Any] | None:
    """The persistent cache as the runtime reported it: the processes' settings (meta) and the
    first compiles it served (hits), compiled and wrote (misses) or compiled without writing.
    Also the summary's `compile_cache` (run_analysis), which diff and the Compare page show."""
    settings = [p.get("compile_cache") for p in tables.meta.get("processes", []) or []]
    found = next((s for s in settings if isinstance(s, dict)), None)
    state: dict[str, Any] = dict(found) if found else {}
    first = first_compiles(tables.families) if first is None else first
    status = _status(first)
    if status.notna().any():
        state.update(
            hits=int(status.eq("hit").sum()),
            misses=int(status.eq("miss").sum()),
            unwritten=int(status.eq("unwritten").sum()),
            loaded_s=round(_seconds(first[status.eq("hit").to_numpy()]), 3),
        )
    counters = {
        key: int(common.counter_total(tables.metrics, [name]))
        for name, key in XLA_CACHE_COUNTERS.items()
    }
    if any(counters.values()):
        state.update(counters)
    return state or None


def repeats(history: pd.DataFrame, compiled: pd.DataFrame) -> dict[str, Any] | None:
    """The program's previous runs, newest first, that compiled (not loaded) the graphs this run
    compiled, in a row: at least REPEAT_SHARE of this run's seconds in each. The graphs compiled
    in all of them, their seconds in each run (this one first) and what a cache on since the
    oldest would have saved (each later run's backend compile of them)."""
    if history is None or history.empty or compiled.empty or "graph_hash" not in compiled:
        return None
    own = compiled.groupby("graph_hash")["duration_ns"].sum().astype(float) / common.NS
    backend_col = (
        compiled["backend_compile_ns"].astype(float).fillna(compiled["duration_ns"].astype(float))
        if "backend_compile_ns" in compiled
        else compiled["duration_ns"].astype(float)
    )
    own_backend = backend_col.groupby(compiled["graph_hash"]).sum() / common.NS
    total = float(own.sum())
    common_hashes = set(own.index)
    streak: list[pd.DataFrame] = []
    order = history.sort_values("start_ns", ascending=False)
    for _, rows in order.groupby("run_id", sort=False):
        done = set(rows.loc[rows["compiles"] > 0, "graph_hash"])
        shared = common_hashes & done
        if not total or float(own[list(shared)].sum()) < REPEAT_SHARE * total:
            break
        common_hashes, streak = shared, [*streak, rows]
    if not streak:
        return None
    keep = sorted(common_hashes)
    each = [float(own[keep].sum())] + [
        float(r.loc[r["graph_hash"].isin(keep), "compile_s"].sum()) for r in streak
    ]
    backend = [float(own_backend[keep].sum())] + [
        float(r.loc[r["graph_hash"].isin(keep), "backend_s"].sum()) for r in streak
    ]
    return {
        "runs": len(streak) + 1,
        "run_ids": [str(r["run_id"].iloc[0]) for r in streak],
        "graphs": len(keep),
        "seconds_each": [round(s, 3) for s in each],
        "repeat_s": round(each[0], 3),
        "saved_s": round(sum(backend[:-1]), 3),  # all but the oldest: it had to fill the cache
    }


def detect_compile_time(tables: RunTables) -> list[Finding]:
    """One card for the run's first compiles when they cost it (module doc), else none. A pod
    is judged once, on its slowest host (detect/compile_time_pod.py)."""
    first = first_compiles(tables.families)
    if first.empty:
        return []
    compiled = first[_status(first).ne("hit").to_numpy()]
    # the store is read only when what this run compiled could reach MIN_REPEAT_S
    history = repeats(tables.history, compiled) if _seconds(compiled) >= MIN_REPEAT_S else None
    return card(tables, first, whole_wall_s(tables), kinds(tables, first), history)


def card(
    tables: RunTables,
    first: pd.DataFrame,
    wall: float,
    kind: pd.Series,
    history: dict[str, Any] | None,
) -> list[Finding]:
    """The card of these first compiles (of one host) against this wall time, when they cost it."""
    cost = _seconds(first)
    compiled = first[_status(first).ne("hit").to_numpy()]
    enough = cost >= MIN_RUN_S or (history is not None and history["repeat_s"] >= MIN_REPEAT_S)
    # imported evidence has no wall time to weigh the compiles against: no card
    if not enough or not wall or judge.share(cost, wall) < judge.MEDIUM_SHARE:
        return []
    parts = groups(first, kind, tables.step_sql.after_rows())
    cache = cache_state(tables, first)
    backend = tables.backend
    share = judge.share(cost, wall)
    split = ", ".join(
        f"{_kind_words(g)} {g['seconds']:.1f} s" for g in sorted(parts, key=lambda g: -g["seconds"])
    )
    title = (
        f"Compiling took {cost:.1f} s"
        + (f" of the run's {wall:.1f} s ({100 * share:.0f}%)" if wall else "")
        + f": {split}"
        + (f"; compiled in each of your last {history['runs']} runs" if history else "")
    )
    detail = (
        f"{len(first)} first compile{'s' * (len(first) != 1)} ({split}). "
        + " ".join(_group_text(g) for g in parts)
        + " "
        + cache_text(cache, backend)
        + (" " + history_text(history, cache) if history else "")
        + f" Cost: the measured compile time of the run's first compiles, {cost:.2f} s"
        + (f", {100 * share:.1f}% of the run's wall time ({wall:.2f} s)" if wall else "")
        + "; recompiles are not counted here (rule recompile's cards carry their own compile time)."
    )
    location = _location(parts)
    evidence = CompileTimeEvidence(
        backend=backend,
        compile_s=round(cost, 3),
        compiles=len(first),
        run_wall_s=wall,
        share=share,
        groups=parts,
        cache=cache,
        history=history,
    )
    return [
        Finding(
            RULE,
            judge.severity(cost, wall),
            title,
            detail,
            fix_text(
                parts,
                cache,
                backend,
                history,
                _step_recompiled(tables, first[kind.to_numpy() == STEP])
                or library_step_function(tables.meta),
                _short(compiled, cache),
                keras_step(tables.meta) if backend == "jax" else None,
                keras_eager_layers(tables) is not None,
            ),
            location,
            cost,
            [],
            evidence,
            0,
        )
    ]


def _short(compiled: pd.DataFrame, cache: dict[str, Any] | None) -> tuple[int, float]:
    """The compiles whose backend compile took under the program's minimum for writing one to
    JAX's cache (its jax_persistent_cache_min_compile_time_secs, else JAX's default): their count
    and seconds. A cache turned on as it is would compile them again."""
    if compiled.empty or "backend_compile_ns" not in compiled:
        return 0, 0.0
    setting = (cache or {}).get("min_compile_time_s")
    min_s = JAX_MIN_S if setting is None else float(setting)
    backend = compiled["backend_compile_ns"].astype(float)
    rows = compiled[(backend.notna() & (backend < min_s * common.NS)).to_numpy()]
    return len(rows), _seconds(rows)


def _kind_words(group: dict[str, Any]) -> str:
    n = group["compiles"]
    if group["kind"] == STEP:
        return "the step"
    if group["kind"] == EAGER:
        return f"{n} op{'s' * (n != 1)} outside jit"
    if group["kind"] == CALLBACK:
        return f"{n} op{'s' * (n != 1)} run by host callbacks"
    return "setup and other"


def _group_text(group: dict[str, Any]) -> str:
    lines = "; ".join(
        f"{common.file_and_line(line['location'])} {line['compiles']}x {line['seconds']:.2f} s"
        + (f" ({', '.join(line['functions'][:3])})" if line["functions"] else "")
        for line in group["lines"]
    )
    words = {
        STEP: "The step's own compiles",
        EAGER: "Ops compiled one at a time outside jit",
        CALLBACK: "Ops that host callbacks' Python ran on their arguments outside jit",
        OTHER: "Setup and other compiles",
    }[group["kind"]]
    return f"{words}: {group['compiles']}, {group['seconds']:.2f} s, at {lines}."


def _location(parts: list[dict[str, Any]]) -> str | None:
    """The costliest line of the costliest kind: where the change (cache, jit) is made."""
    for group in sorted(parts, key=lambda g: -g["seconds"]):
        for line in group["lines"]:
            if line["location"] != UNKNOWN_LOCATION:
                return str(line["location"])
    return None


def _step_recompiled(tables: RunTables, step: pd.DataFrame) -> bool:
    """Whether the step recompiled (then AOT `.lower().compile()` of one shape does not fit): a
    recompile of the step's function (JAX) or at the step's line (torch_xla)."""
    families = tables.families
    if families.empty or step.empty:
        return False
    again = families[families["recompile"].astype(bool)]
    if again.empty:
        return False
    functions = {f for f in step.get("function", pd.Series(dtype=object)) if isinstance(f, str)}
    if functions:
        return bool(again["function"].isin(functions).any())
    return bool(again["location"].isin(set(step["location"].dropna())).any())
