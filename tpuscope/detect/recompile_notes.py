"""Rule `recompile`'s two verdicts that are not a recompile card.

- A bounded set (analyze/families verdict "bounded"): a family whose graphs, each compiled
  once, stopped growing (buckets) gets a low note naming its sizes; `--fail-on recompile`
  does not fail on it (analyze/gate.py).
- Imported metrics reports without compile rows are judged by their totals: compiles per
  MarkStep, file by file."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpuscope.analyze import judge
from tpuscope.analyze.contract import RecompileEvidence, ShapeChurnFacet
from tpuscope.analyze.families import bounded
from tpuscope.analyze.frames import records
from tpuscope.detect import common, xla_advice
from tpuscope.detect.advice import for_backend
from tpuscope.detect.compile_changes import NO_SHAPES_HINT, set_changes, site_of, where_text
from tpuscope.detect.shape_churn import churn_facet
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding

RULE = "recompile"
IMPORTED_STORM_PER_STEP = 0.5
IMPORTED_MIN_COMPILES = 5


INSIDE = (
    "the same input shapes: the size is set inside the graph, not passed in (a tensor made on the "
    "device at a size that changed, `torch.randn(n, ..., device=...)`, or a Python number in a shape)"
)


def _inside_facet(members: pd.DataFrame) -> ShapeChurnFacet | None:
    """The varying dim of the graphs' outputs when their inputs have the same shapes: a size set
    inside the graph shows only there (the default mode reads both from each graph's HLO)."""
    if "output_shapes" not in members or members["output_shapes"].isna().any():
        return None
    outputs = members.assign(input_shapes=members["output_shapes"])
    names = {i: f"output {i}" for i in range(max(len(s) for s in members["output_shapes"]))}
    return churn_facet(outputs, names)


def _bounded_note(tables: RunTables, site: str, rows: list[dict[str, Any]], wall: float) -> Finding:
    """A low note: a small set of graphs, each compiled once, that stopped growing (buckets).
    What differs between them is said from the shapes recorded, which are each graph's own (its
    inputs and outputs); only when they were not recorded is the user sent to record them."""
    family = rows[0]["family"]
    members = tables.families[tables.families["family"] == family]
    facet = churn_facet(members)
    changes = None if facet else set_changes(members)
    inside = _inside_facet(members) if changes and _outputs_only(changes) else None
    location = next(
        (r["location"] for r in rows if isinstance(r.get("location"), str) and r["location"]), None
    )
    where = where_text(site, location, None)
    cost = sum(float(r.get("duration_ns") or 0) for r in rows) / common.NS
    n = len(members)
    last = int(members["cut"].max())
    quiet = (
        max(common.loop_steps(tables)["step"].max() - last, 0)
        if len(common.loop_steps(tables))
        else 0
    )
    shown = facet or inside
    if shown:
        sizes = ", ".join(map(str, shown.values))
        what = (
            f"dim {shown.dim} of {shown.arg_name} took {len(shown.values)} sizes ({sizes}): buckets"
        )
        what = f"{INSIDE}; {what}" if inside else what
        title = f"{n} bucket graphs at {where}: {shown.arg_name} dim {shown.dim} in {{{sizes}}}"
    elif changes:
        what = f"what differs between them: {'; '.join(changes[:4])}"
        title = f"{n} graphs at {where}, each compiled once (a bounded set; {changes[0]})"
    elif changes is not None:  # recorded, and nothing differs that they show
        what = "what differs between them is not in their recorded input and output shapes"
        title = f"{n} graphs at {where}, each compiled once (a bounded set; same shapes)"
    else:
        what = f"what differs between them is not known ({NO_SHAPES_HINT})"
        title = f"{n} graphs at {where}, each compiled once (a bounded set; shapes unknown)"
    runs, count = Finding.of_steps([int(r["step"]) for r in rows])
    detail = (
        f"{n} graphs of one family at {where}, each compiled once, the last at step {last}, then run "
        f"from the cache for the {quiet} steps after it: a bounded set, not a recompile storm; {what}. "
        f"Cost: one-off, the measured compile time of the {len(rows)} after the first, {cost:.2f} s"
        + (f" ({100 * judge.share(cost, wall):.1f}% of the run's wall time)." if wall else ".")
    )
    fix = _note_fix(facet, inside, changes, tables.backend)
    evidence = RecompileEvidence(
        verdict="bounded",
        graphs=n,
        graph_hashes=[str(h) for h in members["graph_hash"]],
        changes=changes or [],
        location=location,
        backend=tables.backend,
        compile_s=cost,
        recompiles=0,
        run_wall_s=wall,
        share=judge.share(cost, wall),
        facets=["bounded"],
        shape_churn=shown,
        key_order=RecompileEvidence.BOUNDED,
    )
    return Finding(
        RULE,
        _bounded_severity(cost, wall, shown is not None),
        title,
        detail,
        fix,
        location,
        cost,
        runs,
        evidence,
        count,
    )


def _outputs_only(changes: list[str]) -> bool:
    return all(c.startswith("output ") for c in changes)


def _note_fix(
    facet: ShapeChurnFacet | None,
    inside: ShapeChurnFacet | None,
    changes: list[str] | None,
    backend: str,
) -> str:
    """Nothing to change while the set stays small; what to watch, from what differs. `--deep` only
    when the shapes were not recorded: it records them (with them, it would show nothing more)."""
    cache = f"keep them across runs with {for_backend(backend, 'persistent_cache')}."
    if facet:
        fix = (
            "Nothing to change while the set stays this small: each bucket compiles once. Keep the "
            f"number of buckets small, or {cache}"
        )
        if facet.dim == 0 and len(facet.values) == 2:
            fix += (
                " If the smaller size is a short last batch, dropping it "
                f"({for_backend(backend, 'drop_last')}) saves its compile."
            )
        return fix
    if inside or (changes and _outputs_only(changes)):
        return (
            "Nothing to change while the set stays this small: each graph compiles once. Its inputs "
            "keep their shapes, so the size that changed is made inside the step: keep it to a few "
            f"fixed values, or {cache}"
        )
    if changes is not None:
        return (
            "Nothing to change while the set stays this small: each graph compiles once. If it grows, "
            "what changes inside the graph is a constant traced into it (a Python number that changes, "
            "a learning rate, a step counter): pass it as a device tensor, e.g. "
            f"torch.tensor(lr, device=device), and update it in place; or {cache}"
        )
    return (
        "Run it again with `tpuscope run --deep` (or TPUSCOPE_HLO_SHAPES=1) to see whether these are buckets "
        "(nothing to change) or a varying dim that a bucketing plan would cut to fewer graphs."
    )


def _bounded_severity(cost: float, wall: float, buckets: bool) -> str:
    """Buckets (sizes a plan would not cut) are low: nothing to fix. A bounded set whose shapes are
    unknown may be buckets or churn that stopped: by its one-off cost, at most medium."""
    if buckets:
        return "low"
    severity = judge.severity(cost, wall)
    return "medium" if severity == "high" else severity


def imported_totals(tables: RunTables) -> list[Finding]:
    """Compiles per step marker, per imported file (metrics report or pt-xla-profiler note)."""
    metrics = tables.metrics
    compiles = common.per_process(metrics, ["CompileTime"]) or common.per_process(
        metrics, ["UncachedCompile"]
    )
    steps = common.per_process(metrics, ["MarkStep"])
    counted = [
        k
        for k in compiles
        if steps.get(k)
        and compiles[k] >= IMPORTED_MIN_COMPILES
        and compiles[k] / steps[k] >= IMPORTED_STORM_PER_STEP
    ]  # judged file by file
    if not counted:
        return []
    n_compiles = sum(compiles[k] for k in counted)
    n_steps = sum(steps[k] for k in counted)
    seconds = (
        sum(
            v
            for k, v in common.per_process(metrics, ["CompileTime"], "total").items()
            if k in counted
        )
        / common.NS
    )
    title = f"Recompile storm: {int(n_compiles)} compiles in {int(n_steps)} steps"
    detail = (
        f"The imported evidence counts {int(n_compiles)} XLA compiles over {int(n_steps)} step "
        f"markers ({n_compiles / n_steps:.1f} per step): the program keeps compiling new graphs. Cost: "
        f"the CompileTime total it recorded ({seconds:.2f} s; 0 when the source has no accumulator)."
    )
    evidence = RecompileEvidence(
        compiles=int(n_compiles),
        steps=int(n_steps),
        source="imported totals",
        files=sorted({str(k[0]) for k in counted if k}),
        key_order=RecompileEvidence.IMPORTED,
    )
    # no wall time to take a share of: medium, the severity of imported evidence that counts something
    return [
        Finding(RULE, "medium", title, detail, xla_advice.IMPORTED_FIX, None, seconds, [], evidence)
    ]


def bounded_notes(tables: RunTables, wall: float, sites: set[str]) -> list[Finding]:
    """A low note per call site whose graphs form a bounded set, but for `sites` (a site with a
    recompile card: one root cause, one card)."""
    rows = bounded(tables.families)
    by_site: dict[str, list[dict[str, Any]]] = {}
    for row in records(rows):
        site = site_of({**row, "backend": tables.backend})
        if site not in sites:  # a site with a recompile card: one root cause, one card
            by_site.setdefault(site, []).append(row)
    return [_bounded_note(tables, site, site_rows, wall) for site, site_rows in by_site.items()]
