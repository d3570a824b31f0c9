"""Rule `recompile`: a graph family compiled again, with what changed and what it cost.

Judged by graph identity and recurrence (analyze/families.py), not by being second: a
family's first compile, and the distinct graphs a library cuts at one line in one pass
(warm-up), are not recompiles wherever they happen; a recompile is the same graph hash
compiled again, the family compiling again in a later step, or the same graph at new shapes.
One card per call site (torch_xla: the user's line that cut the graph; JAX: the jitted
function) carries every facet of that root cause:
- what changed, against the closest earlier compile of the same family only, and only
  what the evidence shows (torch_xla: argument by argument, "arg 3: f32[4,41,128] ->
  f32[4,53,128]", when per-graph shapes were recorded; else that they were not, and how to
  get them; JAX: JAX's cache-miss explanation, naming the user's argument, `batch['x']`);
- shape churn: the varying dim, its sizes and a bucketing plan (detect/shape_churn.py);
- cost: the measured compile time, its share of the whole run's wall time (which decides
  the severity, analyze/judge.severity), and whether it recurs (new graphs still coming:
  its rate per 1,000 steps) or was one-off (no new graph for as many steps as they spanned);
  a "storm" when at least half of the loop's steps (and STORM_MIN_STEPS) recompiled.
The fix is the backend's own (torch_xla, JAX). What changed and the call site are
detect/compile_changes.py's (shared with the live alerts and the Recompiles page); a bounded
set of graphs (buckets) and imported totals get detect/recompile_notes.py's verdicts instead.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpuscope.analyze import judge
from tpuscope.analyze.contract import (
    RecompiledGraph,
    RecompileEvidence,
    ShapeChurnFacet,
    StormFacet,
)
from tpuscope.analyze.families import NEW_EVERY_STEP, STREAK, bounded, recompiles
from tpuscope.analyze.frames import records
from tpuscope.detect import common, jax_advice, xla_advice
from tpuscope.detect.compile_changes import NO_SHAPES_HINT, recompile_item, site_of, where_text
from tpuscope.detect.compile_kinds import keras_step
from tpuscope.detect.recompile_notes import RULE, bounded_notes, imported_totals
from tpuscope.detect.shape_churn import churn_facet, data_dependent_ops, facet_text, grew
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding
from tpuscope.step_runs import runs_text

STORM_SHARE = 0.5
STORM_MIN_STEPS = 3
DIFF_LIMIT = 50  # recompiles diffed against an earlier graph (a storm needs examples, not all)
PER_STEPS = 1000  # a recurring cost is told per this many steps


def _items(tables: RunTables) -> list[dict[str, Any]]:
    """Each recompile with what changed against its family's closest earlier compile (a line
    whose graph changes every step: against the line's previous compile, its family having
    none)."""
    families = tables.families
    retraces = tables.extra.get("retraces", pd.DataFrame())
    by_family: dict[str, list[dict[str, Any]]] = {}
    last_at: dict[str, dict[str, Any]] = {}  # call site -> its latest compile
    out: list[dict[str, Any]] = []
    for row in records(families):
        earlier = by_family.setdefault(row["family"], [])
        if row["recompile"]:
            previous = [last_at[site_of(row)]] if site_of(row) in last_at else []
            against = previous if row.get("reason") == NEW_EVERY_STEP else earlier
            item = recompile_item(row, against, retraces, diff=len(out) < DIFF_LIMIT)
            out.append(item)
        earlier.append(row)
        last_at[site_of(row)] = row
    return out


def _facet(tables: RunTables, items: list[dict[str, Any]]) -> ShapeChurnFacet | None:
    """Shape churn of the site's recompiled family with the most compiles (of equals, the first
    to recompile: the one "what changed" is told of, a forward before its backward)."""
    families = tables.families
    names = sorted(
        dict.fromkeys(i["family"] for i in items),
        key=lambda f: -int((families["family"] == f).sum()),
    )
    rows = families[families["family"] == names[0]]
    return churn_facet(rows, _jax_arg_names(rows, items))


def _jax_arg_names(rows: pd.DataFrame, items: list[dict[str, Any]]) -> dict[int, str]:
    """Flat argument index -> the user's name (`batch['x']`). JAX's explanations name the
    changed arguments by pytree path but the shapes list is flat, so a name goes to the flat
    argument that has the explained shape after the change and before it in another compile."""
    if not any(
        d["kind"] == "input_types" and d.get("arg") for item in items for d in item["diffs"]
    ):
        return {}  # nothing to name (torch_xla has no explanations): skip reading every graph's shapes
    shapes = {
        int(r["index"]): list(r["input_shapes"])
        for r in records(rows)
        if r.get("input_shapes") is not None and not isinstance(r.get("input_shapes"), float)
    }
    names: dict[int, str] = {}
    for item in items:
        after = shapes.get(item["index"], [])
        for diff in item["diffs"]:
            if diff["kind"] != "input_types" or not diff.get("arg"):
                continue
            flat = [
                i
                for i, s in enumerate(after)
                if s == diff.get("after")
                and i not in names
                and any(
                    diff.get("before") == other[i] for other in shapes.values() if len(other) > i
                )
            ]
            if flat:
                names[flat[0]] = jax_advice.arg_name(diff["arg"])
    return names


def _storm(tables: RunTables, items: list[dict[str, Any]]) -> StormFacet | None:
    loop = common.loop_steps(tables)
    stepped = {(i["step"]) for i in items if i["step"] >= 0}
    if len(loop) and len(stepped) >= max(STORM_MIN_STEPS, STORM_SHARE * len(loop)):
        return StormFacet(loop_steps=int(len(loop)), recompiling_steps=len(stepped))
    return None


def _title(
    items: list[dict[str, Any]],
    where: str,
    storm: StormFacet | None,
    facet: ShapeChurnFacet | None,
    cost: float,
) -> str:
    if storm:
        return (
            f"Recompile storm at {where}: {storm.recompiling_steps} of {storm.loop_steps} "
            f"steps compiled again ({cost:.1f} s compiling)"
        )
    what = f": dim {facet.dim} of {facet.arg_name} took {len(facet.values)} sizes" if facet else ""
    weak = next((d for d in items[0]["diffs"] if jax_advice.weak_only(d)), None)
    if weak is not None and jax_advice.weak_retrace(items[0]["diffs"]):
        what = f": {jax_advice.arg_name(weak.get('arg') or '')} changed its weak type"
    return f"{len(items)} recompile{'s' * (len(items) > 1)} at {where}{what}"


def _last_loop_step(tables: RunTables) -> int | None:
    loop = common.loop_steps(tables)
    return int(loop["step"].max()) if len(loop) else None


def _after_loop(tables: RunTables, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recompiles made after the loop's last step (an evaluation, a plot): once, not the
    loop's (diffrax's neural ODE example solved its fitted model once more to plot it)."""
    last = _last_loop_step(tables)
    return [i for i in items if last is not None and i["step"] > last]


def _fix(tables: RunTables, items: list[dict[str, Any]], facet: ShapeChurnFacet | None) -> str:
    if tables.backend == "jax":
        function = items[0].get("function") or "the jitted function"
        diffs: list[dict[str, Any]] = next((i["diffs"] for i in items if i["diffs"]), [])
        changes: list[str] = next((i["changes"] for i in items if i["changes"]), [])
        fix = jax_advice.fix_for(function, diffs, changes)
        if facet and facet.dim == 0 and len(facet.values) == 2 and _keras_steps(tables, items):
            fix += f" {jax_advice.KERAS_SHORT_BATCH}"
        elif (  # the one recompile a larger size, in the loop
            facet
            and len(items) == 1
            and len(facet.values) == 2
            and len(_after_loop(tables, items)) < len(items)
            and grew(tables.families, items[0]["family"], facet, _last_loop_step(tables))
        ):
            fix += f" {jax_advice.NEW_PHASE}"
        if facet and facet.plan is not None:
            fix += f" Bucketing plan: pad {facet.arg_name} dim {facet.dim} to {facet.plan}."
        return fix
    changes = next((i["changes"] for i in items if i["changes"]), [])
    causes = [i["cause"] or "" for i in items]
    if _in_loop_without_sync(tables, items):
        return xla_advice.NO_SYNC_FIX
    return xla_advice.recompile_fix(changes, causes, facet, data_dependent_ops(tables.fallbacks))


KERAS_STEPS = ("train_step", "test_step", "predict_step")  # keras/src/backend/jax/trainer.py's


def _keras_steps(tables: RunTables, items: list[dict[str, Any]]) -> bool:
    """The recompiled function is Keras's own step, in a run whose loop Keras's `fit` runs."""
    name = str(items[0].get("function") or "").rsplit(".", 1)[-1]
    return name in KERAS_STEPS and keras_step(tables.meta) is not None


def _in_loop_without_sync(tables: RunTables, items: list[dict[str, Any]]) -> bool:
    """Every recompile is in a step that an optimizer step ended in a loop with no sync
    (collect/xla/steps.py): the evidence that nothing ever cuts the lazy graph."""
    marked = tables.unsynced  # ('host/pid', step); a family's name starts with its process
    return bool(marked) and all((i["family"].split(" | ")[0], i["step"]) in marked for i in items)


def whole_wall_s(tables: RunTables) -> float:
    """The run's wall time that compile costs are shares of (analyze/judge.run_wall_s)."""
    start, end = tables.meta.get("start_ns"), tables.meta.get("end_ns")
    duration = (end - start) / common.NS if start and end else None
    fig = tables.step_sql.step_figures()
    return judge.run_wall_s(fig["all_wall_ns"] / common.NS, fig["processes"], duration)


def _recurrence(tables: RunTables, items: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the loop's recompiles go on (their rate per 1,000 loop steps) or stopped: a
    one-off cost once the loop ran as many steps after the last one as they spanned (and as
    there were). Those before their process's loop (its setup: jax-ai-stack's miniGPT generated
    text before training, recompiling at 3 new lengths) or after it are not the loop's rate."""
    loop = common.loop_steps(tables)
    loop = loop[loop["step"] >= 0] if len(loop) else loop
    if not len(loop):
        return {"recurring": None}
    bounds = _loop_bounds(loop)
    last_loop = int(loop["step"].max())
    whole = (int(loop["step"].min()), last_loop)
    inside = [i for i in items if _within(i, bounds.get(_process(i), whole))]
    before = [i for i in items if 0 <= i["step"] < bounds.get(_process(i), whole)[0]]
    if not inside:  # all in the setup: whether the loop after it compiled them again
        inside, before = before, []
    steps = [i["step"] for i in inside]
    if not steps:
        return {"recurring": None}
    quiet = last_loop - max(steps)
    span = last_loop - min(steps) + 1
    cost = sum(i["duration_s"] for i in inside)
    return {
        "recurring": quiet < max(len(inside), max(steps) - min(steps) + 1),
        "quiet_steps": quiet,
        "last_step": max(steps),
        "before_loop": len(before),
        "per_1000_steps": PER_STEPS * len(inside) / max(span, 1),
        "s_per_1000_steps": PER_STEPS * cost / max(span, 1),
    }


def _loop_bounds(loop: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """Each process's first and last loop step, keyed as a compile family's name starts."""
    if not {"host", "pid"} <= set(loop.columns):
        return {}
    spans = loop.groupby(["host", "pid"])["step"].agg(["min", "max"]).reset_index()
    return {
        f"{host}/{pid}": (int(lo), int(hi))
        for host, pid, lo, hi in spans[["host", "pid", "min", "max"]].itertuples(index=False)
    }


def _process(item: dict[str, Any]) -> str:
    return str(item.get("family") or "").split(" | ")[0]


def _within(item: dict[str, Any], bounds: tuple[int, int]) -> bool:
    return bounds[0] <= item["step"] <= bounds[1]


def _cost_text(cost: float, wall: float, recurrence: dict[str, Any]) -> str:
    share = (
        f", {100 * judge.share(cost, wall):.1f}% of the run's wall time ({wall:.2f} s)"
        if wall
        else ""
    )
    text = f" Cost: the measured compile time of these recompiles, {cost:.2f} s{share}"
    if recurrence.get("before_loop"):
        text += f"; {recurrence['before_loop']} of them before the loop (its setup), not its rate"
    if recurrence.get("recurring") and recurrence["quiet_steps"] > 0:
        # not seen again, but for too few steps to call it one-off: say so, not "still recurring"
        return (
            text + f"; none in the {recurrence['quiet_steps']} step(s) after step "
            f"{recurrence['last_step']}, too few to tell whether they recur; at their rate so far, "
            f"about {recurrence['per_1000_steps']:.0f} recompiles and "
            f"{recurrence['s_per_1000_steps']:.1f} s per {PER_STEPS:,} steps."
        )
    if recurrence.get("recurring"):
        return (
            text + f"; still recurring at the end of the loop: at its rate, about "
            f"{recurrence['per_1000_steps']:.0f} recompiles and {recurrence['s_per_1000_steps']:.1f} s "
            f"per {PER_STEPS:,} steps."
        )
    if recurrence.get("recurring") is False:
        return (
            text + f"; one-off so far: no new graph in the {recurrence['quiet_steps']} steps after "
            f"step {recurrence['last_step']}."
        )
    return text + "."


def _after_text(after: list[dict[str, Any]], count: int) -> str:
    if not after:
        return ""
    s = sum(i["duration_s"] for i in after)
    which = "It was" if count == 1 else "All were" if len(after) == count else f"{len(after)} were"
    return (
        f" {which} made after the loop's last step ({s:.2f} s), once: the work after the "
        "loop (an evaluation, a plot), not the loop's steps compiling again."
    )


def _changes_text(first: dict[str, Any]) -> str:
    return "; ".join(first["changes"][:4]) or f"not known ({NO_SHAPES_HINT})"


REASONS = {
    "evicted": "the same graph compiled again (the compile cache lost it)",
    "recurred": "compiled again in a later step, after the graph had run",
    "new shapes": "the same graph at new input shapes",
    NEW_EVERY_STEP: "a new graph at this line in every step",
}


def _finding(tables: RunTables, site: str, items: list[dict[str, Any]], wall: float) -> Finding:
    cost = sum(i["duration_s"] for i in items)
    first = next((i for i in items if i["changes"]), items[0])
    location = next((i["location"] for i in reversed(items) if i["location"]), None)
    where = where_text(site, location, items[0].get("function"))
    weak = jax_advice.weak_retrace(items[0]["diffs"])
    facet = None if weak else _facet(tables, items)
    storm = _storm(tables, items)
    recurrence = _recurrence(tables, items)
    after = _after_loop(tables, items)
    runs, count = Finding.of_steps([i["step"] for i in items])
    reasons = sorted({REASONS.get(i.get("reason") or "", "") for i in items} - {""})
    steps = runs_text(runs, count, limit=10) or "not known"
    changing = all(i.get("reason") == NEW_EVERY_STEP for i in items)
    graphs = f"{len(items)} new graph{'s' * (len(items) > 1)}"
    lead = (
        f"{graphs} compiled at {where} (steps {steps}), a line that compiled a graph it had "
        f"never compiled in each of the last {STREAK} steps: the graph it cuts changes from "
        "step to step, and none of its graphs has run again"
        if changing and location
        else f"{graphs} with no line known (in eager mode each op is a graph of its own) compiled "
        f"in steps {steps}, after new ones in each of the last {STREAK} steps: the program "
        "compiles something new every step"
        if changing
        else f"{len(items)} further compile{'s' * (len(items) > 1)} of a graph this program had "
        f"already compiled at {where} (steps {steps})"
    )
    against = (
        "the line's previous graph" if changing else "the closest earlier compile of the same graph"
    )
    detail = (
        lead
        + (f": {'; '.join(reasons)}" if reasons and not changing else "")
        + f"; torch_xla's cause: {items[0]['cause'] or 'unknown'}. What changed against "
        f"{against}: {_changes_text(first)}."
        + (f" Shape churn: {facet_text(facet)}." if facet else "")
        + _cost_text(cost, wall, recurrence)
        + _after_text(after, len(items))
    )
    if tables.backend == "jax":
        detail = detail.replace("; torch_xla's cause:", "; cause:")
    evidence = RecompileEvidence(
        graph_hash=items[-1]["graph_hash"],
        graph_hashes=[i["graph_hash"] for i in items],
        changes=first["changes"],
        compiles=[
            RecompiledGraph.from_dict({k: v for k, v in i.items() if k != "diffs"})
            for i in items[:50]
        ],
        location=location,
        function=items[0].get("function"),
        backend=tables.backend,
        recompiles=len(items),
        compile_s=cost,
        verdict="recompile",
        run_wall_s=wall,
        share=judge.share(cost, wall),
        **{k: v for k, v in recurrence.items() if k != "before_loop"},  # the text says it
        facets=["compile_time"]
        + (["weak_type"] if weak else [])
        + (["shape_churn"] if facet else [])
        + (["storm"] if storm else []),
        shape_churn=facet,
        storm=storm,
    )
    title = _title(items, where, storm, facet, cost)
    return Finding(
        RULE,
        "low" if len(after) == len(items) else judge.severity(cost, wall),
        title,
        detail,
        _fix(tables, items, facet),
        location,
        cost,
        runs,
        evidence,
        count,
    )


def detect_recompile(tables: RunTables) -> list[Finding]:
    """One card per call site whose graphs compiled again (facets: changes, churn, compile time),
    and a low note per call site whose graphs form a bounded set (buckets)."""
    again = recompiles(tables.families)
    if again.empty and bounded(tables.families).empty:
        return imported_totals(tables) if tables.steps.empty else []
    wall = whole_wall_s(tables)
    by_site: dict[str, list[dict[str, Any]]] = {}
    backend = tables.backend
    for item in _items(tables):
        by_site.setdefault(site_of({**item, "backend": backend}), []).append(item)
    cards = [
        _finding(tables, site, group, wall)
        for site, items in by_site.items()
        for group in _by_cause(items)
    ]
    return cards + bounded_notes(tables, wall, set(by_site))


def _by_cause(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A site's recompiles, those whose arguments changed in their weak type alone apart: that
    cause has its own fix, and it is not the site's shape churn (diffrax's neural ODE example
    recompiled its step for a weakly typed scalar at step 1 and for a longer series at step
    500)."""
    weak = [jax_advice.weak_retrace(i["diffs"]) for i in items]
    rest = [i for i, w in zip(items, weak, strict=True) if not w]
    return [g for g in (rest, [i for i, w in zip(items, weak, strict=True) if w]) if g]
