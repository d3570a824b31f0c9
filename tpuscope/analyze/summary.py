"""The headline figures of a run, computed from its tables (pure: DataFrames in, dict out)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpuscope.analyze.warmup import after_warmup, warmup_by_process

NS_PER_S = 1e9
NS_PER_MS = 1e6


def judged(frame: pd.DataFrame, warmup: int) -> pd.DataFrame:
    """Rows past a single warm-up count (summarize() gives the effective one as 'warmup')."""
    if frame.empty or "step" not in frame:
        return frame
    return frame[frame["step"] >= warmup]


def _percentile_ms(values: pd.Series, q: float) -> float | None:
    return None if values.empty else float(values.quantile(q) / NS_PER_MS)


def compile_causes(compiles: pd.DataFrame, top: int = 5) -> list[dict[str, Any]]:
    """Compiles grouped by (cause, user frame), most time first."""
    if compiles.empty:
        return []
    frame = compiles.assign(
        cause=compiles["cause"].fillna("(cause unknown)"), location=compiles["location"].fillna("")
    )
    grouped = frame.groupby(["cause", "location"], dropna=False).agg(
        count=("duration_ns", "size"), seconds=("duration_ns", "sum"), first_step=("step", "min")
    )
    grouped["seconds"] = grouped["seconds"] / NS_PER_S
    rows = grouped.reset_index().sort_values(["seconds", "count"], ascending=False).head(top)
    return [
        {**row, "location": row["location"] or None, "count": int(row["count"]),
         "first_step": int(row["first_step"])}
        for row in rows.to_dict("records")
    ]


def fallback_ops(fallbacks: pd.DataFrame, steps_judged: int, judged_index: pd.Index) -> list[dict[str, Any]]:
    """Per aten op that ran on the host: total count, steps it ran in, count per judged step.

    judged_index: the index labels of the rows past warm-up.
    """
    if fallbacks.empty:
        return []
    frame = fallbacks.assign(judged=fallbacks["count"].where(fallbacks.index.isin(judged_index), 0))
    grouped = frame.groupby("op").agg(
        count=("count", "sum"),
        judged=("judged", "sum"),
        steps=("step", lambda s: sorted(s.unique().tolist())),
        location=("location", lambda s: min(s.dropna(), default=None)),
    )
    out = [
        {
            "op": op,
            "count": int(row["count"]),
            "steps": row["steps"],
            "per_step": float(row["judged"] / steps_judged) if steps_judged else 0.0,
            "location": row["location"] if isinstance(row["location"], str) else None,
        }
        for op, row in grouped.iterrows()
    ]
    return sorted(out, key=lambda r: -r["count"])


def summarize(meta: dict[str, Any], steps: pd.DataFrame, compiles: pd.DataFrame,
              fallbacks: pd.DataFrame) -> dict[str, Any]:
    requested = int(meta.get("warmup", 2))
    warmups = warmup_by_process(steps, requested)
    warmup = max(warmups.values(), default=requested)
    after = after_warmup(steps, warmups, requested)
    if "boundary" in after:
        after = after[after["boundary"] != "end"]  # work after the loop is not a step to judge
    compiles_after = after_warmup(compiles, warmups, requested)
    fallbacks_after = after_warmup(fallbacks, warmups, requested)
    wall_after_ns = float(after["wall_ns"].sum()) if not after.empty else 0.0
    compile_after_ns = float(compiles_after["duration_ns"].sum()) if not compiles_after.empty else 0.0
    transfers = after["transfers_from_device"] if not after.empty else pd.Series(dtype=float)
    start, end = meta.get("start_ns"), meta.get("end_ns")
    return {
        "run_id": meta.get("run_id"),
        "name": meta.get("name"),
        "command": meta.get("command"),
        "status": meta.get("status"),
        "exit_code": meta.get("exit_code"),
        "backend": _first_process_value(meta, "backend"),
        "device_kind": _first_process_value(meta, "device_kind"),
        "processes": len(meta.get("processes", [])),
        "warmup": warmup,
        "warmup_requested": requested,
        "duration_s": (end - start) / NS_PER_S if start and end else None,
        "steps": int(len(steps)),
        "steps_after_warmup": int(len(after)),
        "step_time_p50_ms": _percentile_ms(after["wall_ns"], 0.5) if not after.empty else None,
        "step_time_p90_ms": _percentile_ms(after["wall_ns"], 0.9) if not after.empty else None,
        "compiles": int(len(compiles)),
        "compiles_after_warmup": int(len(compiles_after)),
        "compile_s": float(compiles["duration_ns"].sum() / NS_PER_S) if not compiles.empty else 0.0,
        "compile_s_after_warmup": compile_after_ns / NS_PER_S,
        "compile_share_after_warmup": compile_after_ns / wall_after_ns if wall_after_ns else 0.0,
        "compile_causes": compile_causes(compiles),
        "fallback_ops": fallback_ops(fallbacks, len(after), fallbacks_after.index),
        "transfers_from_device_per_step": float(transfers.mean()) if not transfers.empty else 0.0,
        "profiler_ms_per_step": profiler_ms_per_step(meta),
    }


def profiler_ms_per_step(meta: dict[str, Any]) -> float | None:
    """What collection costs per step once compiles are done, as the processes measured it
    themselves: time in the step hooks of steps that compiled nothing, plus the flush
    thread's CPU time spread over every step (None when no such step was timed)."""
    costs = [p["profiler_cost"] for p in meta.get("processes", []) if p.get("profiler_cost")]
    calls = sum(c.get("hook_calls", 0) for c in costs)
    if not calls:
        return None
    all_calls = calls + sum(c.get("compile_hook_calls", 0) for c in costs)
    hook = sum(c.get("hook_ns", 0) for c in costs) / calls
    flush = sum(c.get("flush_cpu_ns", 0) for c in costs) / all_calls
    return (hook + flush) / NS_PER_MS


def _first_process_value(meta: dict[str, Any], key: str) -> Any:
    for proc in meta.get("processes", []):
        if proc.get(key):
            return proc[key]
    return meta.get(key)
