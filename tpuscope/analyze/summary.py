"""The headline figures of a run, computed once from its tables (pure: DataFrames in, a
`RunSummary` out: tpuscope/analyze/contract.py).

Every surface (console report, `show --json`, the dashboard, the pytest plugin and
imports) shows these figures as written into the run at analysis time
(tpuscope.detect.run_analysis), so they cannot disagree. Compiles are counted by graph family
(analyze/families.py): `recompiles` are the compiles judged recompiles by graph identity and
recurrence, wherever they happen (a family's warm-up and a bounded set of buckets are not);
`recompile_share` is their compile time's share of the whole run's wall time (`run_wall_s`,
analyze/judge.run_wall_s), never above 1; step times and per-step rates are over the judged
steps (analyze/judge.py); value reads are host reads, not CPU fallbacks.

The step figures (counts, sums and quantiles of the phases) are DuckDB's over the steps table,
wherever it lies (analyze/pod_sql.PodSteps: a pod's Parquet parts, a run's frame in memory):
one statement of them for a run of one process and a pod of 512 hosts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from tpuscope.analyze.contract import AfterLoop, CompileCause, FallbackOp, RunSummary
from tpuscope.analyze.families import recompiles
from tpuscope.analyze.frames import records
from tpuscope.analyze.judge import VALUE_READ_OPS, run_wall_s, share
from tpuscope.schema_consts import DEFAULT_WARMUP
from tpuscope.step_runs import step_runs

if TYPE_CHECKING:
    from tpuscope.analyze.pod_sql import PodSteps

NS_PER_S = 1e9
NS_PER_MS = 1e6


def _seconds(frame: pd.DataFrame, column: str = "duration_ns") -> float:
    return float(frame[column].fillna(0).sum()) / NS_PER_S if not frame.empty else 0.0


def compile_causes(families: pd.DataFrame, top: int = 5) -> list[CompileCause]:
    """Compiles grouped by (cause, user frame), most time first, with how many were recompiles."""
    if families.empty:
        return []
    frame = families.assign(
        cause=families["cause"].fillna("(cause unknown)"),
        location=families["location"].fillna(""),
        recompile=families["recompile"].astype(bool) if "recompile" in families else False,
    )
    grouped = frame.groupby(["cause", "location"], dropna=False).agg(
        count=("duration_ns", "size"),
        seconds=("duration_ns", "sum"),
        first_step=("step", "min"),
        recompiles=("recompile", "sum"),
    )
    grouped["seconds"] = grouped["seconds"].fillna(0) / NS_PER_S
    rows = grouped.reset_index().sort_values(["seconds", "count"], ascending=False).head(top)
    return [
        CompileCause(
            cause=str(row["cause"]),
            location=row["location"] or None,
            count=int(row["count"]),
            seconds=float(row["seconds"]),
            first_step=int(row["first_step"]),
            recompiles=int(row["recompiles"]),
        )
        for row in records(rows)
    ]


def fallback_ops(fallbacks: pd.DataFrame, loop_steps: int) -> list[FallbackOp]:
    """Per op (any namespace) that ran on the host (value reads excluded): count, its steps as runs
    (tpuscope.step_runs), count per step, its first call site."""
    if fallbacks.empty:
        return []
    rows = fallbacks[~fallbacks["op"].isin(VALUE_READ_OPS)]
    if rows.empty:
        return []
    out = []
    for op, group in rows.groupby("op", observed=True, sort=False):
        count = int(group["count"].sum())
        runs, n_steps = step_runs(group["step"])
        located = group["location"].dropna()
        out.append(
            FallbackOp(
                op=str(op),
                count=count,
                step_runs=runs,
                step_count=n_steps,
                per_step=float(count / loop_steps) if loop_steps else 0.0,
                location=str(located.min()) if len(located) else None,
            )
        )
    return sorted(out, key=lambda r: (-r.count, r.op))


def _value_reads(fallbacks: pd.DataFrame, steps: PodSteps, backend: str | None) -> int:
    """torch_xla's `.item()`-style reads (a fallback counter), or a JAX run's value reads
    (`float(x)`, `.item()`, `np.asarray`, `jax.device_get`: its steps' transfers_from_device)."""
    if backend == "jax":
        return int(steps.step_figures()["transfers"])
    if fallbacks.empty:
        return 0
    return int(fallbacks.loc[fallbacks["op"].isin(VALUE_READ_OPS), "count"].sum())


def _after_loop(after: pd.DataFrame, families: pd.DataFrame) -> AfterLoop | None:
    """The work after the program's last step boundary (its rows: PodSteps.after_rows): its own
    phase, not a step."""
    if after.empty:
        return None
    keys = [k for k in ("host", "pid", "step") if k in after.columns and k in families.columns]
    compiles = (
        families.merge(after[keys], on=keys) if not families.empty and keys else families.iloc[0:0]
    )
    return AfterLoop(
        wall_s=float(after["wall_ns"].sum()) / NS_PER_S,
        compiles=int(len(compiles)),
        compile_s=_seconds(compiles),
        executions=int(after["executions"].fillna(0).sum()) if "executions" in after else 0,
    )


def _imported_compiles(metrics: pd.DataFrame | None) -> tuple[int, float] | None:
    """(compiles, seconds) from whole-run totals (an imported metrics report has no compile rows,
    only its CompileTime metric or UncachedCompile counter)."""
    if metrics is None or metrics.empty:
        return None
    whole = metrics[metrics["step"] == -1]
    for name in ("CompileTime", "UncachedCompile"):
        rows = whole[whole["name"] == name]
        if not rows.empty and int(rows["count"].sum()):
            return int(rows["count"].sum()), float(
                rows["total"].sum()
            ) / NS_PER_S if name == "CompileTime" else 0.0
    return None


def distinct_graphs(families: pd.DataFrame) -> int:
    """The graphs compiled, counted as the recompile cards count them ("2 graphs of one family"):
    one per graph hash, a compile whose hash is unknown one of its own. A graph compiled again
    (an evicted cache) is one graph; a family is the graphs cut at one place (analyze/families)."""
    if families.empty:
        return 0
    if "graph_hash" not in families:
        return int(len(families))
    hashes = families["graph_hash"]
    known = hashes.notna() & (hashes.astype(str) != "")
    return int(hashes[known].nunique() + (~known).sum())


def summarize(
    meta: dict[str, Any],
    steps: PodSteps,
    families: pd.DataFrame,
    fallbacks: pd.DataFrame,
    metrics: pd.DataFrame | None = None,
) -> RunSummary:
    """The run's headline figures; `steps` is the steps table's figures (PodSteps: a pod's
    parts or a frame in memory), `families` analyze.families.graph_families(compiles);
    `metrics` gives the compile totals of imported evidence that has no compile rows."""
    warmup = int(meta.get("warmup", DEFAULT_WARMUP))
    fig = steps.step_figures()
    judged = fig["judged"]
    again = recompiles(families)
    start, end = meta.get("start_ns"), meta.get("end_ns")
    duration = (end - start) / NS_PER_S if start and end else None
    run_wall = run_wall_s(fig["all_wall_ns"] / NS_PER_S, fig["processes"], duration)
    totals = _imported_compiles(metrics) if families.empty else None
    n_compiles, compile_s = totals if totals else (int(len(families)), _seconds(families))
    mean = fig["transfers_mean"]
    return RunSummary(
        run_id=meta.get("run_id"),
        name=meta.get("name"),
        command=meta.get("command"),
        status=meta.get("status"),
        exit_code=meta.get("exit_code"),
        backend=_first_process_value(meta, "backend"),
        device_kind=_first_process_value(meta, "device_kind"),
        processes=len(meta.get("processes", [])),
        warmup=warmup,
        duration_s=duration,
        steps=fig["loop"],
        steps_judged=judged,
        step_time_p50_ms=steps.judged_quantile(0.5, judged) / NS_PER_MS if judged else None,
        step_time_p90_ms=steps.judged_quantile(0.9, judged) / NS_PER_MS if judged else None,
        steps_batched=steps_batched(meta),
        wall_s_judged=float(fig["judged_wall_ns"]) / NS_PER_S,
        compiles=n_compiles,
        compile_s=compile_s,
        graph_families=int(families["family"].nunique()) if not families.empty else 0,
        graphs=distinct_graphs(families),
        recompiles=int(len(again)),
        recompile_s=_seconds(again),
        run_wall_s=run_wall,
        recompile_share=share(_seconds(again), run_wall),
        compile_causes=compile_causes(families),
        fallback_ops=fallback_ops(fallbacks, fig["loop"]),
        value_reads=_value_reads(fallbacks, steps, _first_process_value(meta, "backend")),
        transfers_from_device_per_step=mean if judged and mean is not None else 0.0,
        after_loop=_after_loop(steps.after_rows(), families),
        profiler_ms_per_step=profiler_ms_per_step(meta),
        profiler_hook_ms_per_step=hook_ms_per_step(meta),
        profiler_ms_per_compile=profiler_ms_per_compile(meta, n_compiles),
        profiler_trace_s=profiler_trace_s(meta),
        profiler_trace_stop_s=profiler_trace_s(meta, "trace_stop_ns"),
        profiler_trace_wait_s=profiler_trace_s(meta, "trace_wait_ns"),
        trace_untaken=_first_process_value(meta, "trace_untaken"),
    )


def steps_batched(meta: dict[str, Any]) -> int | None:
    """Steps the JAX lane timed as their batch's mean (collect/jax/lane.py); None when none."""
    count = sum(
        (proc.get("jax_step_paths") or {}).get("batched", 0) for proc in meta.get("processes", [])
    )
    return count or None


def profiler_trace_s(meta: dict[str, Any], part: str = "trace_ns") -> float | None:
    """Seconds the processes' profiler windows took to start and stop (collect/trace_steps.py:
    outside every step's time, so the step figures do not hold them); None without a window.
    `part`: "trace_stop_ns", the stops' share, or "trace_wait_ns", the stops' wait for the
    device to finish the traced steps (the rest of a stop is the profiler's own work)."""
    spent = sum(c.get(part, 0) for c in _costs(meta))
    return spent / NS_PER_S if spent else None


def profiler_ms_per_step(meta: dict[str, Any]) -> float | None:
    """What collection costs per step once compiles are done, as the processes measured it
    themselves: time in the step hooks of steps that compiled nothing, plus the flush
    thread's CPU time spread over every step (None when no such step was timed). The flush
    thread's per-compile work (`compile_flush_cpu_ns`: an HLO dump's files deleted) is not a
    step's: profiler_ms_per_compile says it."""
    hook_ms = hook_ms_per_step(meta)
    if hook_ms is None:
        return None
    costs = _costs(meta)
    all_calls = sum(c.get("hook_calls", 0) + c.get("compile_hook_calls", 0) for c in costs)
    return hook_ms + sum(c.get("flush_cpu_ns", 0) for c in costs) / all_calls / NS_PER_MS


def hook_ms_per_step(meta: dict[str, Any]) -> float | None:
    """The part of profiler_ms_per_step spent on the program's own thread (its step hooks, the
    eager-dispatch hook's walk): what a step that waits on the program's thread pays. The
    flush thread runs beside it (None when no such step was timed)."""
    costs = _costs(meta)
    calls = sum(c.get("hook_calls", 0) for c in costs)
    return sum(c.get("hook_ns", 0) for c in costs) / calls / NS_PER_MS if calls else None


def profiler_ms_per_compile(meta: dict[str, Any], compiles: int) -> float | None:
    """What collection costs per compile, apart from the steps: the hooks of the steps that
    compiled (reading their compile reports) and the flush thread's per-compile work (the HLO
    dump's files deleted, off the step's path). None for runs that did not count the latter
    apart (made before it was) or without compiles."""
    costs = _costs(meta)
    if not compiles or not any("compile_flush_cpu_ns" in c for c in costs):
        return None
    spent = sum(c.get("compile_hook_ns", 0) + c.get("compile_flush_cpu_ns", 0) for c in costs)
    return spent / compiles / NS_PER_MS


def _costs(meta: dict[str, Any]) -> list[dict[str, Any]]:
    return [p["profiler_cost"] for p in meta.get("processes", []) if p.get("profiler_cost")]


def _first_process_value(meta: dict[str, Any], key: str) -> Any:
    for proc in meta.get("processes", []):
        if proc.get(key):
            return proc[key]
    return meta.get(key)
