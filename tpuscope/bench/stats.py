"""Statistics of a benchmark: per-repeat figures, their spread, and speedups that beat the noise.

Pure functions of the workers' raw results (plain dicts), so they are tested on
hand-made numbers.

The noise rule. Each repeat is a fresh process, so the spread of a mode's
per-repeat medians contains everything that changes between runs (compiles,
memory layout, other load on the machine). A mode's *noise interval* is
[min, max] of its per-repeat p50 step times; with a single repeat it falls back
to the interquartile range of that repeat's measured steps. The speedup of a mode
over strict is strict_p50 / mode_p50 (medians of the per-repeat p50s), with the
range strict_lo / mode_hi .. strict_hi / mode_lo. The difference is called real
only when that range excludes 1, i.e. when the two noise intervals do not
overlap: with 3 repeats per mode, a difference this rule accepts cannot come
from one outlier process.

Two more figures resist a busy machine: the fastest step (timeit's reasoning:
slower runs are mostly other processes interfering) and the process's CPU time
per step (all its threads), which on an accelerator is the host's dispatch cost,
the very cost fused modes remove.
"""

from __future__ import annotations

from statistics import median
from typing import Any

import numpy as np

from tpuscope.bench.spec import BASELINE_MODE

NS_PER_MS = 1e6


def _ms(values: list[float]) -> list[float]:
    return [v / NS_PER_MS for v in values]


def repeat_summary(result: dict[str, Any]) -> dict[str, Any]:
    """Figures of one worker process, from its per-step timeline (warm-up excluded)."""
    t = result["timeline"]
    warmup = int(result["warmup"])
    wall = _ms(t["wall_ns"])
    judged = wall[warmup:] or wall[-1:]
    judged_s = sum(judged) / 1e3
    samples = sum(t["samples"][warmup:])
    tokens = sum(t["tokens"][warmup:]) if t.get("tokens") else 0
    compile_ns = t["compile_ns"]
    known = None not in compile_ns
    cpu = _ms(t.get("cpu_ns") or [])[warmup:]
    return {
        "min_ms": min(judged),
        "cpu_p50_ms": float(np.percentile(cpu, 50)) if cpu else None,
        "p25_ms": float(np.percentile(judged, 25)),
        "p50_ms": float(np.percentile(judged, 50)),
        "p75_ms": float(np.percentile(judged, 75)),
        "p90_ms": float(np.percentile(judged, 90)),
        "mean_ms": float(np.mean(judged)),
        "first_step_ms": wall[0],
        "samples_per_s": samples / judged_s if samples and judged_s else None,
        "tokens_per_s": tokens / judged_s if tokens and judged_s else None,
        "compiles": sum(t["compiles"]),
        "compiles_after_warmup": sum(t["compiles"][warmup:]),
        "compile_s": sum(compile_ns) / 1e9 if known else None,
        "compile_s_after_warmup": sum(compile_ns[warmup:]) / 1e9 if known else None,
    }


def _median_or_none(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def aggregate(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One row for a (backend, mode, model): medians across repeats, spread and noise interval."""
    first = results[0]
    row: dict[str, Any] = {
        k: first[k] for k in ("mode", "backend", "model", "size", "steps", "warmup")
    }
    ok = [r for r in results if r.get("status") == "ok"]
    row["repeats"] = len(ok)
    row["run_ids"] = [r["run_id"] for r in ok]
    if not ok:
        bad = results[0]
        row.update(
            status=bad.get("status", "error"),
            reason=bad.get("reason") or bad.get("error"),
            run_id=bad.get("run_id"),
            step_time_p50_ms=None,
            step_time_p90_ms=None,
            compiles=None,
        )
        return row
    per = [repeat_summary(r) for r in ok]
    p50s = [p["p50_ms"] for p in per]
    mid = median(p50s)
    representative = min(range(len(ok)), key=lambda i: abs(p50s[i] - mid))
    lo, hi = (min(p50s), max(p50s)) if len(per) > 1 else (per[0]["p25_ms"], per[0]["p75_ms"])
    row.update(
        status="ok",
        reason=None,
        run_id=ok[representative]["run_id"],
        step_time_p50_ms=mid,
        step_time_p90_ms=median(p["p90_ms"] for p in per),
        step_time_p50_ms_repeats=p50s,
        noise_ms=[lo, hi],
        step_time_min_ms=min(p["min_ms"] for p in per),
        host_cpu_p50_ms=_median_or_none([p["cpu_p50_ms"] for p in per]),
        noise_basis="min-max of per-repeat p50" if len(per) > 1 else "IQR of steps (1 repeat)",
        spread_pct=100 * (max(p50s) - min(p50s)) / mid if mid else 0.0,
        first_step_ms=median(p["first_step_ms"] for p in per),
        samples_per_s=_median_or_none([p["samples_per_s"] for p in per]),
        tokens_per_s=_median_or_none([p["tokens_per_s"] for p in per]),
        compiles=int(median(p["compiles"] for p in per)),
        compiles_after_warmup=int(median(p["compiles_after_warmup"] for p in per)),
        compile_s=_median_or_none([p["compile_s"] for p in per]),
        compile_s_after_warmup=_median_or_none([p["compile_s_after_warmup"] for p in per]),
        peak_host_mb=max(r["peak_host_bytes"] for r in ok) / 2**20,
        peak_device_mb=_peak_device_mb(ok),
        device_memory_note=ok[0].get("device_memory_note"),
        mechanism=(ok[0].get("describe") or {}).get("mechanism"),
        describe=ok[0].get("describe") or {},
        workload=ok[0].get("info") or {},
        findings=ok[representative].get("findings") or [],
        analysis_error=ok[representative].get("analysis_error"),
        errors=[r.get("error") or r.get("reason") for r in results if r.get("status") != "ok"],
    )
    return row


def _peak_device_mb(ok: list[dict[str, Any]]) -> float | None:
    peaks = [p for p in (r.get("peak_device_bytes") for r in ok) if p is not None]
    return max(peaks) / 2**20 if peaks else None


def compare(row: dict[str, Any], baseline: dict[str, Any] | None) -> dict[str, Any]:
    """Speedup of `row` over the strict `baseline` and whether it is larger than the noise."""
    empty = {"speedup_vs_strict": None, "speedup_range": None, "significant": None, "verdict": None}
    if (
        baseline is None
        or row.get("status") != "ok"
        or baseline.get("status") != "ok"
        or not row["step_time_p50_ms"]
    ):
        return empty
    if row is baseline:
        return {**empty, "speedup_vs_strict": 1.0, "verdict": "baseline"}
    (b_lo, b_hi), (m_lo, m_hi) = baseline["noise_ms"], row["noise_ms"]
    low, high = b_lo / m_hi if m_hi else None, b_hi / m_lo if m_lo else None
    significant = low is not None and high is not None and (low > 1.0 or high < 1.0)
    speedup = baseline["step_time_p50_ms"] / row["step_time_p50_ms"]
    verdict = ("faster" if speedup > 1 else "slower") if significant else "within noise"
    return {
        "speedup_vs_strict": speedup,
        "speedup_range": [low, high],
        "significant": significant,
        "verdict": verdict,
    }


def with_comparisons(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row plus its comparison with strict of the same backend and model."""
    strict = {(r["backend"], r["model"]): r for r in rows if r["mode"] == BASELINE_MODE}
    return [{**r, **compare(r, strict.get((r["backend"], r["model"])))} for r in rows]
