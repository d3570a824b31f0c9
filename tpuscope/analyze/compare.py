"""What got better or worse from run A to run B: `tpuscope diff A B` and the Compare page.

Pure: each side is its analysis (summary + findings, tpuscope.detect.run_analysis) and the wall
times of its judged steps (analyze/judge.py); the result is a plain dict. The runs may
differ in length and machine, so step time is compared as medians of the judged steps
with a percentile bootstrap interval (fixed seed, so the same runs always give the same
interval; each resample's median drawn exactly from its distribution, see _medians) for the ratio B/A and the difference B - A. The step time compared is the steady
one: judged steps that compiled are left out (a 40 s recompile among 20 ms steps made the
interval of ten churn steps +-46 s; the compiles are compared on their own rows), and how
many on each side is said; when a side keeps fewer than MIN_STEPS, all its judged steps
are compared and the result says so. Counts of compiles are compared
as totals and CPU fallbacks as calls per step. Findings are matched by (rule, user
location) (plus the op for `cpu_fallback` and the jitted function for JAX, which share
lines): new in B, gone from B, changed (severity, or cost by CHANGED_COST or more), same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpuscope.analyze.contract import RunSummary, as_summary, evidence_of
from tpuscope.schema import Finding
from tpuscope.schema_consts import ADVICE_RULES

SEED = 0
RESAMPLES = 2000
CONFIDENCE = 0.95
MIN_STEPS = 3  # fewer judged steps on a side: no interval (a bootstrap of 1-2 values means nothing)
CHANGED_COST = 0.25  # relative change of a finding's cost that makes it "changed"
MIN_COST_CHANGE_S = 0.001  # ... and at least this many seconds
NS_PER_MS = 1e6
STEADY = (
    "judged steps without a compile"  # step_time["steps"] when the compiling ones were left out
)


@dataclass
class Side:
    """One run as the comparison sees it."""

    summary: RunSummary
    findings: list[Finding] = field(default_factory=list)
    step_ns: Sequence[float] = ()
    # compiles in each of those steps (steps.compiles), same order; None: not given, none left out
    step_compiles: Sequence[float] | None = None

    def __post_init__(self) -> None:
        self.summary = as_summary(self.summary)  # its JSON form too (a stored or hand-built one)


def _medians(values: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """The median of each of `resamples` bootstrap resamples of values, drawn from exactly the
    distribution a resample's median has, without making the n draws of each resample
    (2000 x 100k steps took 10-20 s of CPU; this takes milliseconds).

    A resample is n draws with replacement of ranks 0..n-1 (values sorted). Its lower middle
    (sorted position (n-1)//2) is found by walking down halves of the rank range: the draws
    falling in the left half of a range holding c draws are Binomial(c, left share), and the
    walk follows the half holding the wanted position. For an even n the upper middle is the
    same rank when that rank was drawn again, else the smallest draw in the nearest right
    sibling range that holds draws (its c draws are uniform there: the minimum of c uniform
    draws is sampled by inversion)."""
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    lo, hi = np.zeros(resamples, np.int64), np.full(resamples, n, np.int64)
    count, target = np.full(resamples, n, np.int64), np.full(resamples, (n - 1) // 2, np.int64)
    next_lo, next_hi, next_count = np.zeros_like(lo), np.zeros_like(lo), np.zeros_like(lo)
    while (wide := hi - lo > 1).any():
        mid = (lo + hi) // 2
        left = rng.binomial(count, np.where(wide, (mid - lo) / np.maximum(hi - lo, 1), 0.0))
        go_left, go_right = wide & (target < left), wide & (target >= left)
        sibling = go_left & (count > left)
        next_lo, next_hi = np.where(sibling, mid, next_lo), np.where(sibling, hi, next_hi)
        next_count = np.where(sibling, count - left, next_count)
        hi, lo = np.where(go_left, mid, hi), np.where(go_right, mid, lo)
        target = np.where(go_right, target - left, target)
        count = np.where(go_left, left, np.where(go_right, count - left, count))
    if n % 2:
        return x[lo]
    u = rng.random(resamples)
    size = next_hi - next_lo
    first = next_lo + np.floor(size * (1 - u ** (1 / np.maximum(next_count, 1)))).astype(np.int64)
    upper = np.where(target + 1 < count, lo, np.clip(first, 0, n - 1))
    return (x[lo] + x[upper]) / 2


def judged_walls(steps: Any, warmup: int) -> tuple[list[float], list[float] | None]:
    """A run's judged steps as a Side takes them: (wall_ns, compiles), from its steps table
    (compiles None when the table has no such column). The one reading `tpuscope diff` and
    the Compare page share, so that both compare the same steps."""
    from tpuscope.analyze.judge import judged_steps

    judged = judged_steps(steps, warmup)
    if judged.empty:
        return [], []
    judged = judged[judged["wall_ns"].notna()]
    compiles = judged["compiles"].fillna(0).tolist() if "compiles" in judged.columns else None
    return judged["wall_ns"].tolist(), compiles


def steady_steps(side: Side) -> tuple[list[float], int | None]:
    """The side's judged step walls without the steps that compiled; how many were left out
    (None: which steps compiled was not given)."""
    walls = list(side.step_ns)
    if side.step_compiles is None or len(side.step_compiles) != len(walls):
        return walls, None
    kept = [w for w, c in zip(walls, side.step_compiles, strict=True) if not c]
    return kept, len(walls) - len(kept)


def steady_step_time(
    a: Side, b: Side, seed: int = SEED, resamples: int = RESAMPLES, confidence: float = CONFIDENCE
) -> dict[str, Any]:
    """step_time of the steps without a compile, or of all judged steps when a side keeps
    fewer than MIN_STEPS of them; "steps" says which, "a_compiled"/"b_compiled" how many
    judged steps compiled (None: not known), "a_left_out"/"b_left_out" how many were left out."""
    (ka, compiled_a), (kb, compiled_b) = steady_steps(a), steady_steps(b)
    counts = {"a_compiled": compiled_a, "b_compiled": compiled_b}
    if compiled_a is None or compiled_b is None:
        return {
            **step_time(a.step_ns, b.step_ns, seed, resamples, confidence),
            **counts,
            "steps": "all judged steps (which compiled is not known)",
            "a_left_out": 0,
            "b_left_out": 0,
        }
    if min(len(ka), len(kb)) >= MIN_STEPS:
        return {
            **step_time(ka, kb, seed, resamples, confidence, kind="judged steps without a compile"),
            **counts,
            "steps": STEADY,
            "a_left_out": compiled_a,
            "b_left_out": compiled_b,
        }
    out = step_time(a.step_ns, b.step_ns, seed, resamples, confidence)
    why = f"fewer than {MIN_STEPS} judged steps without a compile on a side: steps that compiled are kept"
    return {
        **out,
        **counts,
        "steps": "all judged steps",
        "a_left_out": 0,
        "b_left_out": 0,
        "note": f"{out['note']}; {why}" if out.get("note") else why,
    }


def step_time(
    a: Sequence[float],
    b: Sequence[float],
    seed: int = SEED,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    kind: str = "judged steps",
) -> dict[str, Any]:
    """Median step time of A and B (ms) over the steps given, B/A and B - A with bootstrap
    intervals; `kind` names those steps in the method."""
    xa, xb = np.asarray(a, dtype=float) / NS_PER_MS, np.asarray(b, dtype=float) / NS_PER_MS
    out: dict[str, Any] = {
        "a_median_ms": float(np.median(xa)) if len(xa) else None,
        "b_median_ms": float(np.median(xb)) if len(xb) else None,
        "a_steps": int(len(xa)),
        "b_steps": int(len(xb)),
        "method": f"percentile bootstrap of the medians, {resamples} resamples of each run's {kind}, "
        f"seed {seed}",
        "confidence": confidence,
        "ratio": None,
        "ratio_ci": None,
        "diff_ms": None,
        "diff_ci_ms": None,
    }
    if out["a_median_ms"] is None or out["b_median_ms"] is None:
        return {**out, "verdict": "unknown", "note": "a run has no judged step"}
    out["diff_ms"] = out["b_median_ms"] - out["a_median_ms"]
    out["ratio"] = out["b_median_ms"] / out["a_median_ms"] if out["a_median_ms"] > 0 else None
    if min(len(xa), len(xb)) < MIN_STEPS:
        return {
            **out,
            "verdict": "unknown",
            "note": f"fewer than {MIN_STEPS} judged steps: no interval",
        }
    rng = np.random.default_rng(seed)
    ma, mb = _medians(xa, rng, resamples), _medians(xb, rng, resamples)
    tail = 100 * (1 - confidence) / 2
    diff_lo, diff_hi = np.percentile(mb - ma, [tail, 100 - tail])
    out["diff_ci_ms"] = [float(diff_lo), float(diff_hi)]
    if out["ratio"] is not None and (ma > 0).all():
        lo, hi = np.percentile(mb / ma, [tail, 100 - tail])
        out["ratio_ci"] = [float(lo), float(hi)]
    verdict = "slower" if diff_lo > 0 else "faster" if diff_hi < 0 else "no clear change"
    return {**out, "verdict": verdict}


def _count(a: float, b: float) -> dict[str, float]:
    return {"a": a, "b": b, "delta": b - a}


def _fallback_rates(sa: RunSummary, sb: RunSummary) -> dict[str, Any]:
    """CPU fallback calls per step (value reads excluded, as the analysis counts them), per op."""
    ops: dict[str, dict[str, Any]] = {}
    for side, summary in (("a", sa), ("b", sb)):
        for op in summary.fallback_ops or []:
            row = ops.setdefault(
                op.op,
                {"op": op.op, "a_count": 0, "b_count": 0, "a_per_step": 0.0, "b_per_step": 0.0},
            )
            row[f"{side}_count"] = int(op.count)
            row[f"{side}_per_step"] = float(op.per_step or 0.0)
    rows = sorted(ops.values(), key=lambda r: -(r["a_count"] + r["b_count"]))
    return {
        "a_per_step": sum(r["a_per_step"] for r in rows),
        "b_per_step": sum(r["b_per_step"] for r in rows),
        "a_calls": sum(r["a_count"] for r in rows),
        "b_calls": sum(r["b_count"] for r in rows),
        "ops": rows,
    }


def finding_key(f: Finding) -> tuple[str, str, str]:
    """(rule, user location, op or jitted function): what makes two runs' findings the same one.
    Not the title: it carries the run's numbers ("5 of 6 steps"), which change."""
    evidence = evidence_of(f)
    sub = getattr(evidence, "op", None) or getattr(evidence, "function", None) or ""
    if "weak_type" in (getattr(evidence, "facets", None) or []):  # a site's weak-type card
        sub = f"{sub} (weak type)"
    return f.rule, f.location or "", str(sub)


def keyed(findings: Sequence[Finding]) -> dict[tuple[str, ...], Finding]:
    """Findings by key, in their order; a key seen again (e.g. two whole-run findings of one
    rule with no location) gets its ordinal, so the n-th matches the other run's n-th."""
    out: dict[tuple[str, ...], Finding] = {}
    for f in findings:
        key: tuple[str, ...] = finding_key(f)
        n = 1
        while key in out:
            n += 1
            key = (*finding_key(f), f"#{n}")
        out[key] = f
    return out


def _entry(key: tuple[str, ...], a: Finding | None, b: Finding | None) -> dict[str, Any]:
    f = b or a
    assert f is not None
    return {
        "key": list(key),
        "rule": f.rule,
        "location": f.location,
        "title": f.title,
        "a_severity": a.severity if a else None,
        "b_severity": b.severity if b else None,
        "a_cost_s": a.cost_s if a else None,
        "b_cost_s": b.cost_s if b else None,
    }


def _changed(a: Finding, b: Finding) -> bool:
    if a.severity != b.severity:
        return True
    delta = abs(b.cost_s - a.cost_s)
    return delta >= MIN_COST_CHANGE_S and delta >= CHANGED_COST * max(abs(a.cost_s), abs(b.cost_s))


def findings_delta(a: Sequence[Finding], b: Sequence[Finding]) -> dict[str, list[dict[str, Any]]]:
    """Findings new in B, gone from B, changed and the same, matched by finding_key."""
    by_a, by_b = keyed(a), keyed(b)
    out: dict[str, list[dict[str, Any]]] = {"new": [], "gone": [], "changed": [], "same": []}
    for key, fb in by_b.items():
        fa = by_a.get(key)
        kind = "new" if fa is None else "changed" if _changed(fa, fb) else "same"
        out[kind].append(_entry(key, fa, fb))
    out["gone"] = [_entry(key, fa, None) for key, fa in by_a.items() if key not in by_b]
    return out


def _identity(summary: RunSummary, steps: int) -> dict[str, Any]:
    return {
        "run_id": summary.run_id,
        "name": summary.name,
        "backend": summary.backend,
        "device_kind": summary.device_kind,
        "steps": summary.steps,
        "steps_judged": summary.steps_judged,
        "exit_code": summary.exit_code,
        "judged_steps_timed": steps,
    }


def compare(
    a: Side, b: Side, seed: int = SEED, resamples: int = RESAMPLES, confidence: float = CONFIDENCE
) -> dict[str, Any]:
    """Everything `tpuscope diff` reports, B against A."""
    sa, sb = a.summary, b.summary
    return {
        "a": _identity(sa, len(a.step_ns)),
        "b": _identity(sb, len(b.step_ns)),
        "step_time": steady_step_time(a, b, seed, resamples, confidence),
        "compiles": _count(int(sa.compiles or 0), int(sb.compiles or 0)),
        "recompiles": _count(int(sa.recompiles or 0), int(sb.recompiles or 0)),
        "compile_s": _count(float(sa.compile_s or 0), float(sb.compile_s or 0)),
        "recompile_s": _count(float(sa.recompile_s or 0), float(sb.recompile_s or 0)),
        "run_wall_s": _count(float(sa.run_wall_s or 0), float(sb.run_wall_s or 0)),
        "compile_cache": {"a": sa.compile_cache, "b": sb.compile_cache},
        "fallbacks": _fallback_rates(sa, sb),
        "findings": findings_delta(a.findings, b.findings),
    }


def regressions(diff: dict[str, Any], pct: float) -> list[str]:
    """Why B is a regression of A (empty: it is not): its median (steady) step time is more
    than pct% worse with the whole interval of B/A above 1 + pct/100, or B has a finding
    of high severity that A did not have at that severity (new, or changed to high), other than
    an advice rule's (compile_time: how fast this machine compiled)."""
    out = []
    st = diff["step_time"]
    if st.get("ratio_ci") and st["ratio_ci"][0] > 1 + pct / 100:
        lo, hi = st["ratio_ci"]
        word = "steady" if st.get("steps") == STEADY else "judged"
        out.append(
            f"median {word} step time {100 * (st['ratio'] - 1):+.1f}% "
            f"({100 * (lo - 1):+.1f}%..{100 * (hi - 1):+.1f}%) > {pct:g}%"
        )
    new_high = [
        f
        for kind in ("new", "changed")
        for f in diff["findings"][kind]
        if f["b_severity"] == "high"
        and f["a_severity"] != "high"
        and f["rule"] not in ADVICE_RULES  # compile_time: this machine's compile speed
    ]
    out.extend(
        f"{'new' if f['a_severity'] is None else 'now'} high-severity {f['rule']}"
        f"{' at ' + f['location'].rsplit('/', 1)[-1] if f['location'] else ''}"
        for f in new_high
    )
    return out
