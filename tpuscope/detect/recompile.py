"""Rule `recompile`: an XLA graph compiled after warm-up, with what changed.

For each compile in a judged step the closest earlier graph from the same call
site (fewest differing inputs, then dims) is diffed argument by argument
("arg 3: f32[4,41,128] -> f32[4,53,128]"); when the inputs match, the outputs are
diffed; when those match too, the graph itself changed (a Python number traced as
a constant, another code path). One finding per call site; when at least half of
the judged steps (and at least STORM_MIN_STEPS) compile, a single high-severity
"recompile storm" finding replaces them. Cost: the measured compile time of those
compiles. Imported evidence without steps is judged by totals: compiles per
MarkStep, or PT_XLA_DEBUG's "CompileTime too frequent" note.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd

from tpuscope.analyze.shapes import diff_shapes, shape_distance, varying_dims
from tpuscope.detect import common
from tpuscope.detect.registry import RunTables
from tpuscope.schema import Finding

RULE = "recompile"
STORM_SHARE = 0.5
STORM_MIN_STEPS = 3
DIFF_LIMIT = 50  # judged compiles diffed against an earlier graph
CANDIDATES = 64  # most recent graphs of the same call site searched for the closest
IMPORTED_STORM_PER_STEP = 0.5
IMPORTED_MIN_COMPILES = 5
VALUE_READ_CAUSE = "access tensor value"
NO_SHAPES_HINT = "run `tpuscope run --deep` for the argument-by-argument diff"


def _shapes(row: dict[str, Any], column: str) -> list[str] | None:
    value = row.get(column)
    return None if value is None or (isinstance(value, float) and value != value) else list(value)


def _closest(row: dict[str, Any], earlier: pd.DataFrame) -> dict[str, Any] | None:
    """The earlier compile from the same call site whose inputs differ least."""
    same = earlier[earlier["location"] == row.get("location")] if row.get("location") else earlier
    if same.empty:
        return None
    shapes = _shapes(row, "input_shapes")
    candidates = same.iloc[-CANDIDATES:].to_dict("records")
    if shapes is None:
        return candidates[-1]
    return min(reversed(candidates),
               key=lambda c: shape_distance(_shapes(c, "input_shapes") or [], shapes))


def what_changed(row: dict[str, Any], before: dict[str, Any] | None) -> list[str]:
    """Argument-by-argument diff of a compile against an earlier one."""
    if before is None:
        return []
    old_in, new_in = _shapes(before, "input_shapes"), _shapes(row, "input_shapes")
    if old_in is not None and new_in is not None:
        changes = diff_shapes(old_in, new_in)
        if changes:
            return changes
        old_out, new_out = _shapes(before, "output_shapes"), _shapes(row, "output_shapes")
        if old_out is not None and new_out is not None:
            changes = diff_shapes(old_out, new_out, prefix="output")
            if changes:
                return changes
        return ["same input and output shapes: the graph itself changed"]
    return _without_shapes(row, before)


def _known(value: Any) -> bool:
    return value is not None and value == value


def _without_shapes(row: dict[str, Any], before: dict[str, Any]) -> list[str]:
    """What PT_XLA_DEBUG alone tells: the number and total size of the graph inputs."""
    n_old, n_new = before.get("num_inputs"), row.get("num_inputs")
    if _known(n_old) and _known(n_new) and n_old != n_new:
        return [f"{int(n_old)} -> {int(n_new)} graph inputs"]
    gb_old, gb_new = before.get("input_gb"), row.get("input_gb")
    if _known(gb_old) and _known(gb_new) and gb_old != gb_new:
        return [f"graph input size {gb_old * 1e3:.3f} MB -> {gb_new * 1e3:.3f} MB with the same number "
                f"of inputs: an input's shape changed ({NO_SHAPES_HINT})"]
    return []


def fix_for(changes: list[str], causes: list[str]) -> str:
    """The concrete change, from what changed and torch_xla's stated cause."""
    if any(VALUE_READ_CAUSE in c for c in causes):
        return ("A value read in the middle of the step (.item(), print(t), bool(t), x[mask]) cuts the "
                "graph there, and the piece before it changed. Move the read after torch_xla.sync() "
                "(or into xm.add_step_closure) and keep data-dependent shapes out of the step.")
    if any(("->" in c and "[" in c) or "graph input size" in c for c in changes):
        return ("Keep input shapes fixed from step to step: pad the varying dim to a few bucket sizes "
                "(see the shape_churn finding for a plan) or to the maximum, and mask the padding.")
    if any("graph inputs" in c or "added" in c or "removed" in c for c in changes):
        return ("A different set of tensors enters the graph: create per-step tensors the same way "
                "every step (on the device, same dtype) and avoid Python branches inside the step.")
    return ("The graph changed with the same shapes: a Python number that changes every step (a "
            "learning rate, a step counter) is traced as a constant. Pass it as a device tensor, "
            "e.g. torch.tensor(lr, device=device), and update it in place.")


def _site(row: dict[str, Any]) -> str:
    return row.get("location") or row.get("cause") or "unknown call site"


def _describe(compiles: pd.DataFrame, judged_compiles: pd.DataFrame) -> list[dict[str, Any]]:
    """Each judged compile with its diff; only the first DIFF_LIMIT are diffed (a storm of
    thousands needs a few examples, not a quadratic search)."""
    out = []
    ordered = compiles.sort_values(["time_ns", "index"]).reset_index(drop=True)
    times = ordered["time_ns"].to_numpy()
    for n, row in enumerate(judged_compiles.sort_values(["time_ns", "index"]).to_dict("records")):
        before = None
        if n < DIFF_LIMIT:
            earlier = ordered.iloc[: int(times.searchsorted(row["time_ns"], side="left"))]
            before = _closest(row, earlier)
        out.append({
            "step": int(row["step"]), "graph_hash": row.get("graph_hash"),
            "cause": row.get("cause"), "location": row.get("location"),
            "duration_s": float(row.get("duration_ns") or 0) / common.NS,
            "changes": what_changed(row, before),
            "against_graph": before.get("graph_hash") if before else None,
        })
    return out


def _dims_summary(site_rows: pd.DataFrame) -> list[str]:
    lists = [list(s) for s in site_rows["input_shapes"] if s is not None and not isinstance(s, float)]
    return [f"arg {d.arg} dim {d.dim}: {len(d.distinct)} sizes, {d.distinct[0]}..{d.distinct[-1]}"
            for d in varying_dims(lists)]


def _finding(site: str, items: list[dict[str, Any]], wall: float, storm: dict[str, Any] | None,
             extra: dict[str, Any]) -> Finding:
    cost = sum(i["duration_s"] for i in items)
    first = next((i for i in items if i["changes"]), items[0])
    changes = first["changes"]
    location = items[0]["location"]
    steps = common.steps_list(i["step"] for i in items)
    where = common.short_path(location) if location else site
    if storm:
        title = (f"Recompile storm: {storm['compiling_steps']} of {storm['judged_steps']} steps after "
                 f"warm-up compiled a new graph ({cost:.1f} s compiling)")
        severity = "high"
    else:
        title = f"{len(items)} recompile{'s' if len(items) > 1 else ''} after warm-up at {where}"
        severity = common.severity_for(cost, wall, floor="medium")
    detail = (f"{len(items)} graph{'s' if len(items) > 1 else ''} compiled in steps "
              f"{_steps_text(steps)} (after {extra['warmup_steps']} warm-up steps), triggered at {where}; "
              f"cause: {items[0]['cause'] or 'unknown'}. What changed against the closest earlier graph "
              f"from the same call site: {'; '.join(changes[:4]) or 'not recorded (' + NO_SHAPES_HINT + ')'}. "
              f"Cost: the measured compile time of these compiles ({cost:.2f} s"
              + (f", {100 * cost / wall:.0f}% of the judged wall time" if wall else "") + ").")
    evidence = {"graph_hash": items[-1]["graph_hash"], "graph_hashes": [i["graph_hash"] for i in items],
                "changes": changes, "compiles": items[:50], "location": location, **extra}
    if storm:
        evidence["storm"] = storm
    causes = [i["cause"] or "" for i in items]
    return Finding(RULE, severity, title, detail, fix_for(changes, causes), location, cost, steps, evidence)


def _steps_text(steps: list[int]) -> str:
    return ", ".join(map(str, steps[:10])) + (f" ... ({len(steps)} steps)" if len(steps) > 10 else "")


def _live(tables: RunTables) -> list[Finding]:
    compiles = tables.compiles[tables.compiles["step"] >= 0]
    judged = common.judged_steps(tables)
    judged_compiles = common.judged_rows(compiles, judged)
    judged_compiles = judged_compiles[judged_compiles["step"] >= 0]
    if judged_compiles.empty:
        return []
    wall = common.wall_s(judged)
    items = _describe(compiles, judged_compiles)
    limits = common.warmups(tables)
    extra = {"warmup_steps": max(limits.values()) if limits else tables.warmup}
    compiling = judged[judged["compiles"].fillna(0) > 0] if not judged.empty else judged
    n_judged, n_compiling = len(judged), len(compiling)
    if n_judged and n_compiling >= max(STORM_MIN_STEPS, STORM_SHARE * n_judged):
        sites = Counter(_site(i) for i in items)
        top_site = sites.most_common(1)[0][0]
        site_rows = compiles[compiles["location"] == top_site] if "location" in compiles else compiles
        storm = {"judged_steps": n_judged, "compiling_steps": n_compiling,
                 "call_sites": dict(sites.most_common(5)), "varying_dims": _dims_summary(site_rows)}
        items.sort(key=lambda i: (_site(i) != top_site, i["step"]))
        return [_finding(top_site, items, wall, storm, extra)]
    by_site: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        by_site.setdefault(_site(item), []).append(item)
    return [_finding(site, group, wall, None, extra) for site, group in by_site.items()]


IMPORTED_SITE_GRAPHS = 3
_IMPORTED_FIX = ("Run it under `tpuscope run` (or with PT_XLA_DEBUG_LEVEL=1) to see which line compiles "
                 "and what changed between graphs; usually a shape that varies per step (pad it to a few "
                 "bucket sizes) or a Python number traced as a constant (pass it as a device tensor).")


def _imported_totals(tables: RunTables) -> list[Finding]:
    """Compiles per step marker, per imported file (metrics report or pt-xla-profiler note)."""
    metrics = tables.metrics
    compiles = common.per_process(metrics, ["CompileTime"]) or common.per_process(metrics, ["UncachedCompile"])
    steps = common.per_process(metrics, ["MarkStep"])
    counted = [k for k in compiles if steps.get(k) and compiles[k] >= IMPORTED_MIN_COMPILES
               and compiles[k] / steps[k] >= IMPORTED_STORM_PER_STEP]  # judged file by file
    if not counted:
        return []
    n_compiles = sum(compiles[k] for k in counted)
    n_steps = sum(steps[k] for k in counted)
    rate = n_compiles / n_steps
    seconds = sum(v for k, v in common.per_process(metrics, ["CompileTime"], "total").items()
                  if k in counted) / common.NS
    title = f"Recompile storm: {int(n_compiles)} compiles in {int(n_steps)} steps"
    detail = (f"The imported evidence counts {int(n_compiles)} XLA compiles over {int(n_steps)} step "
              f"markers ({rate:.1f} per step): the program keeps compiling new graphs. Cost: the "
              f"CompileTime total it recorded ({seconds:.2f} s; 0 when the source has no accumulator).")
    evidence = {"compiles": int(n_compiles), "steps": int(n_steps), "source": "imported totals",
                "files": sorted({str(k[0]) for k in counted if k})}
    return [Finding(RULE, "high", title, detail, _IMPORTED_FIX, None, seconds, [], evidence)]


def _imported_sites(tables: RunTables) -> list[Finding]:
    """A call site that compiled several distinct graphs in an imported PT_XLA_DEBUG log."""
    compiles = common.whole_run(tables.compiles)
    if compiles.empty:
        return []
    findings = []
    for location, rows in compiles.dropna(subset=["location"]).groupby("location"):
        hashes = [h for h in dict.fromkeys(rows["graph_hash"]) if h]
        if len(hashes) < IMPORTED_SITE_GRAPHS:
            continue
        items = [{"step": -1, "graph_hash": r.get("graph_hash"), "cause": r.get("cause"),
                  "location": location, "duration_s": float(r.get("duration_ns") or 0) / common.NS,
                  "changes": []} for r in rows.to_dict("records")]
        title = f"{len(hashes)} different graphs compiled at {common.short_path(location)}"
        detail = (f"The imported log shows {len(rows)} compiles of {len(hashes)} different graphs triggered "
                  f"at {common.short_path(location)} (cause: {items[0]['cause'] or 'unknown'}); the log "
                  "does not say which step or what changed. Cost: not timed in the log.")
        evidence = {"graph_hash": hashes[-1], "graph_hashes": hashes, "compiles": items[:50],
                    "location": location, "changes": [], "source": "imported PT_XLA_DEBUG log"}
        findings.append(Finding(RULE, "medium", title, detail, _IMPORTED_FIX, location, 0.0, [], evidence))
    return findings


def detect_recompile(tables: RunTables) -> list[Finding]:
    """Compiles after warm-up: one finding per call site, or one recompile storm."""
    findings = _live(tables) if not tables.compiles.empty else []
    if not findings and tables.steps.empty:
        findings = _imported_totals(tables) + _imported_sites(tables)
    return findings
