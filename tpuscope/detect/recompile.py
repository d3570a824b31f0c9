"""Rule `recompile`: a graph family compiled again, with what changed and what it cost.

Judged by graph family (analyze/families.py), not by step count: the first compile of
every family is a first compile wherever it happens (setup, the first eval pass, the
optimizer's first step, work after the loop); a recompile is a further compile of a
family. One card per call site (torch_xla: the user's line that cut the graph; JAX:
the jitted function) carries every facet of that root cause:
- what changed, against the closest earlier compile of the same family only
  (torch_xla: argument by argument, "arg 3: f32[4,41,128] -> f32[4,53,128]"; JAX: what
  JAX's cache-miss explanation says, naming the user's argument, `batch['x']`);
- shape churn: the varying dim, its sizes and a bucketing plan (detect/shape_churn.py);
- compile time: the measured compile time of the recompiles, and its share of the
  program's wall time in steps; a "storm" when at least half of the loop's steps
  (and STORM_MIN_STEPS) recompiled.
Severity: that measured cost's share of the wall time (analyze/judge.severity).
The fix is the backend's own (torch_xla, JAX). Imported metrics reports without
compile rows are judged by totals: compiles per MarkStep.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpuscope.analyze.families import recompiles
from tpuscope.analyze.shapes import diff_shapes, shape_distance
from tpuscope.detect import common, jax_advice, xla_advice
from tpuscope.detect.shape_churn import churn_facet, data_dependent_ops, facet_text
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding
from tpuscope.step_runs import runs_text

RULE = "recompile"
STORM_SHARE = 0.5
STORM_MIN_STEPS = 3
DIFF_LIMIT = 50  # recompiles diffed against an earlier graph (a storm needs examples, not all)
CANDIDATES = 64  # most recent compiles of the family searched for the closest
IMPORTED_STORM_PER_STEP = 0.5
IMPORTED_MIN_COMPILES = 5
NO_SHAPES_HINT = "run `tpuscope run --deep` for the argument-by-argument diff"


def _shapes(row: dict[str, Any], column: str) -> list[str] | None:
    value = row.get(column)
    return None if value is None or (isinstance(value, float) and value != value) else list(value)


def _closest(row: dict[str, Any], earlier: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The earlier compile of the same family whose inputs differ least."""
    if not earlier:
        return None
    shapes = _shapes(row, "input_shapes")
    candidates = earlier[-CANDIDATES:]
    if shapes is None:
        return candidates[-1]
    return min(reversed(candidates), key=lambda c: shape_distance(_shapes(c, "input_shapes") or [], shapes))


def xla_changes(row: dict[str, Any], before: dict[str, Any] | None) -> list[str]:
    """Argument-by-argument diff of a torch_xla compile against an earlier one of its family."""
    if before is None:
        return []
    old_in, new_in = _shapes(before, "input_shapes"), _shapes(row, "input_shapes")
    if old_in is not None and new_in is not None:
        for old, new, prefix in ((old_in, new_in, "arg"),
                                 (_shapes(before, "output_shapes"), _shapes(row, "output_shapes"), "output")):
            if old is not None and new is not None and (changes := diff_shapes(old, new, prefix=prefix)):
                return changes
        return ["same input and output shapes: the graph itself changed"]
    gb_old, gb_new = before.get("input_gb"), row.get("input_gb")
    if gb_old is not None and gb_new is not None and gb_old == gb_old and gb_new == gb_new and gb_old != gb_new:
        return [f"graph input size {gb_old * 1e3:.3f} MB -> {gb_new * 1e3:.3f} MB with the same inputs: "
                f"an input's shape changed ({NO_SHAPES_HINT})"]
    return []


def site_of(row: dict[str, Any]) -> str:
    if row.get("backend") == "jax" and row.get("function"):
        return f"jit {row['function']}"
    location = row.get("location")
    return location if isinstance(location, str) and location else (row.get("cause") or "unknown call site")


def where_text(site: str, location: str | None, function: str | None) -> str:
    """How a card (and a live alert) names a call site: `train.py:44`, `step (train.py:44)`."""
    where = common.file_and_line(location) if location else site
    if function:
        return f"{function} ({where})" if location else function
    return where


def _items(tables: RunTables) -> list[dict[str, Any]]:
    """Each recompile with what changed against its family's closest earlier compile."""
    families = tables.families
    retraces = tables.extra.get("retraces", pd.DataFrame())
    by_family: dict[str, list[dict[str, Any]]] = {}
    out = []
    for row in families.to_dict("records"):
        earlier = by_family.setdefault(row["family"], [])
        if row["recompile"]:
            item = recompile_item(row, earlier, retraces, diff=len(out) < DIFF_LIMIT)
            out.append(item)
        earlier.append(row)
    return out


def recompile_item(row: dict[str, Any], earlier: list[dict[str, Any]], retraces: pd.DataFrame,
          diff: bool) -> dict[str, Any]:
    before = _closest(row, earlier) if diff else None
    diffs = jax_advice.diffs_of(retraces, int(row["index"]), row.get("function")) \
        if row.get("backend") == "jax" else []
    changes = jax_advice.changes_of(diffs) if diffs else []
    if not changes and diff:
        changes = xla_changes(row, before)
    return {"step": int(row["step"]), "index": int(row["index"]), "graph_hash": row.get("graph_hash"),
            "cause": row.get("cause"), "location": row.get("location"), "family": row["family"],
            "function": row.get("function"), "duration_s": float(row.get("duration_ns") or 0) / common.NS,
            "changes": changes, "against_graph": before.get("graph_hash") if before else None,
            "diffs": diffs}


def _facet(tables: RunTables, items: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Shape churn of the site's recompiled family with the most compiles."""
    families = tables.families
    names = sorted({i["family"] for i in items}, key=lambda f: -int((families["family"] == f).sum()))
    rows = families[families["family"] == names[0]]
    return churn_facet(rows, _jax_arg_names(rows, items))


def _jax_arg_names(rows: pd.DataFrame, items: list[dict[str, Any]]) -> dict[int, str]:
    """Flat argument index -> the user's name (`batch['x']`). JAX's explanations name the
    changed arguments by pytree path but the shapes list is flat, so a name goes to the flat
    argument that has the explained shape after the change and before it in another compile."""
    if not any(d["kind"] == "input_types" and d.get("arg") for item in items for d in item["diffs"]):
        return {}  # nothing to name (torch_xla has no explanations): skip reading every graph's shapes
    shapes = {int(r["index"]): list(r["input_shapes"]) for r in rows.to_dict("records")
              if r.get("input_shapes") is not None and not isinstance(r.get("input_shapes"), float)}
    names: dict[int, str] = {}
    for item in items:
        after = shapes.get(item["index"], [])
        for diff in item["diffs"]:
            if diff["kind"] != "input_types" or not diff.get("arg"):
                continue
            flat = [i for i, s in enumerate(after) if s == diff.get("after") and i not in names
                    and any(diff.get("before") == other[i] for other in shapes.values() if len(other) > i)]
            if flat:
                names[flat[0]] = jax_advice.arg_name(diff["arg"])
    return names


def _storm(tables: RunTables, items: list[dict[str, Any]]) -> dict[str, Any] | None:
    loop = common.loop_steps(tables)
    stepped = {(i["step"]) for i in items if i["step"] >= 0}
    if len(loop) and len(stepped) >= max(STORM_MIN_STEPS, STORM_SHARE * len(loop)):
        return {"loop_steps": int(len(loop)), "recompiling_steps": len(stepped)}
    return None


def _title(items: list[dict[str, Any]], where: str, storm: dict[str, Any] | None,
           facet: dict[str, Any] | None, cost: float) -> str:
    if storm:
        return (f"Recompile storm at {where}: {storm['recompiling_steps']} of {storm['loop_steps']} "
                f"steps compiled again ({cost:.1f} s compiling)")
    what = f": dim {facet['dim']} of {facet['arg_name']} took {len(facet['values'])} sizes" if facet else ""
    return f"{len(items)} recompile{'s' * (len(items) > 1)} at {where}{what}"


def _fix(tables: RunTables, items: list[dict[str, Any]], facet: dict[str, Any] | None) -> str:
    if tables.backend == "jax":
        function = items[0].get("function") or "the jitted function"
        diffs = next((i["diffs"] for i in items if i["diffs"]), [])
        changes = next((i["changes"] for i in items if i["changes"]), [])
        fix = jax_advice.fix_for(function, diffs, changes)
        if facet and "plan" in facet:
            fix += f" Bucketing plan: pad {facet['arg_name']} dim {facet['dim']} to {facet['plan']}."
        return fix
    changes = next((i["changes"] for i in items if i["changes"]), [])
    causes = [i["cause"] or "" for i in items]
    return xla_advice.recompile_fix(changes, causes, facet, data_dependent_ops(tables.fallbacks))


def _finding(tables: RunTables, site: str, items: list[dict[str, Any]], wall: float) -> Finding:
    cost = sum(i["duration_s"] for i in items)
    first = next((i for i in items if i["changes"]), items[0])
    location = next((i["location"] for i in reversed(items) if i["location"]), None)
    where = where_text(site, location, items[0].get("function"))
    facet = _facet(tables, items)
    storm = _storm(tables, items)
    runs, count = Finding.of_steps([i["step"] for i in items])
    share = f", {100 * cost / wall:.1f}% of the judged steps' wall time" if wall else ""
    detail = (f"{len(items)} further compile{'s' * (len(items) > 1)} of a graph this program had already "
              f"compiled at {where} (steps {runs_text(runs, count, limit=10) or 'not known'}); cause: "
              f"{items[0]['cause'] or 'unknown'}. What changed against the closest earlier compile of the "
              f"same graph: {'; '.join(first['changes'][:4]) or 'not recorded (' + NO_SHAPES_HINT + ')'}."
              + (f" Shape churn: {facet_text(facet)}." if facet else "")
              + f" Cost: the measured compile time of these recompiles, {cost:.2f} s{share}.")
    evidence = {"graph_hash": items[-1]["graph_hash"], "graph_hashes": [i["graph_hash"] for i in items],
                "changes": first["changes"], "compiles": [{k: v for k, v in i.items() if k != "diffs"}
                                                          for i in items[:50]],
                "location": location, "function": items[0].get("function"), "backend": tables.backend,
                "recompiles": len(items), "compile_s": cost,
                "facets": ["compile_time"] + (["shape_churn"] if facet else []) + (["storm"] if storm else [])}
    if facet:
        evidence["shape_churn"] = facet
    if storm:
        evidence["storm"] = storm
    title = _title(items, where, storm, facet, cost)
    return Finding(RULE, common.severity(cost, tables), title, detail, _fix(tables, items, facet),
                   location, cost, runs, evidence, count)


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
    seconds = sum(v for k, v in common.per_process(metrics, ["CompileTime"], "total").items()
                  if k in counted) / common.NS
    title = f"Recompile storm: {int(n_compiles)} compiles in {int(n_steps)} steps"
    detail = (f"The imported evidence counts {int(n_compiles)} XLA compiles over {int(n_steps)} step "
              f"markers ({n_compiles / n_steps:.1f} per step): the program keeps compiling new graphs. Cost: "
              f"the CompileTime total it recorded ({seconds:.2f} s; 0 when the source has no accumulator).")
    evidence = {"compiles": int(n_compiles), "steps": int(n_steps), "source": "imported totals",
                "files": sorted({str(k[0]) for k in counted if k})}
    return [Finding(RULE, "high", title, detail, xla_advice.IMPORTED_FIX, None, seconds, [], evidence)]


def detect_recompile(tables: RunTables) -> list[Finding]:
    """One card per call site whose graphs compiled again (facets: changes, churn, compile time)."""
    again = recompiles(tables.families)
    if again.empty:
        return _imported_totals(tables) if tables.steps.empty else []
    wall = common.run_wall_s(tables)
    by_site: dict[str, list[dict[str, Any]]] = {}
    backend = tables.backend
    for item in _items(tables):
        by_site.setdefault(site_of({**item, "backend": backend}), []).append(item)
    return [_finding(tables, site, items, wall) for site, items in by_site.items()]
