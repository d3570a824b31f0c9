"""Rule `recompile`'s two verdicts that are not a recompile card.

- A bounded set (analyze/families verdict "bounded"): a family whose graphs, each compiled
  once, stopped growing (buckets) gets a low note naming its sizes; `--fail-on recompile`
  does not fail on it (analyze/gate.py).
- Imported metrics reports without compile rows are judged by their totals: compiles per
  MarkStep, file by file."""

from __future__ import annotations

from typing import Any

from tpuscope.analyze import judge
from tpuscope.analyze.contract import RecompileEvidence
from tpuscope.analyze.families import bounded
from tpuscope.analyze.frames import records
from tpuscope.detect import common, xla_advice
from tpuscope.detect.advice import for_backend
from tpuscope.detect.compile_changes import NO_SHAPES_HINT, site_of, where_text
from tpuscope.detect.shape_churn import churn_facet
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding

RULE = "recompile"
IMPORTED_STORM_PER_STEP = 0.5
IMPORTED_MIN_COMPILES = 5


def _bounded_note(tables: RunTables, site: str, rows: list[dict[str, Any]], wall: float) -> Finding:
    """A low note: a small set of graphs, each compiled once, that stopped growing (buckets)."""
    family = rows[0]["family"]
    members = tables.families[tables.families["family"] == family]
    facet = churn_facet(members)
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
    if facet:
        sizes = ", ".join(map(str, facet.values))
        what = (
            f"dim {facet.dim} of {facet.arg_name} took {len(facet.values)} sizes ({sizes}): buckets"
        )
        title = f"{n} bucket graphs at {where}: {facet.arg_name} dim {facet.dim} in {{{sizes}}}"
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
    fix = (
        (
            "Nothing to change while the set stays this small: each bucket compiles once. Keep the number of "
            "buckets small, or keep them across runs with "
            f"{for_backend(tables.backend, 'persistent_cache')}."
        )
        if facet
        else (
            "Run it again with `tpuscope run --deep` (or TPUSCOPE_HLO_SHAPES=1) to see whether these are buckets "
            "(nothing to change) or a varying dim that a bucketing plan would cut to fewer graphs."
        )
    )
    if facet and facet.dim == 0 and len(facet.values) == 2:
        fix += (
            " If the smaller size is a short last batch, dropping it "
            f"({for_backend(tables.backend, 'drop_last')}) saves its compile."
        )
    evidence = RecompileEvidence(
        verdict="bounded",
        graphs=n,
        graph_hashes=[str(h) for h in members["graph_hash"]],
        location=location,
        backend=tables.backend,
        compile_s=cost,
        recompiles=0,
        run_wall_s=wall,
        share=judge.share(cost, wall),
        facets=["bounded"],
        shape_churn=facet,
        key_order=RecompileEvidence.BOUNDED,
    )
    return Finding(
        RULE,
        _bounded_severity(cost, wall, facet is not None),
        title,
        detail,
        fix,
        location,
        cost,
        runs,
        evidence,
        count,
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
