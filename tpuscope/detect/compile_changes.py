"""What changed in a compile, and where it was: the part of rule `recompile` that the live
alerts (launch/alerts) and the Recompiles page (compile_diffs) share with the card.

A compile is compared with the closest earlier compile of its family only, and says only what
the evidence shows: torch_xla argument by argument when per-graph shapes were recorded, else
the counts of graph inputs and outputs, else the inputs' total size; JAX its own cache-miss
explanation (jax_advice). A call site is the user's line that cut the graph (torch_xla) or the
jitted function (JAX)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpuscope.analyze.families import NEW_EVERY_STEP
from tpuscope.analyze.frames import records
from tpuscope.analyze.shapes import diff_shapes, shape_distance
from tpuscope.detect import common, jax_advice
from tpuscope.detect.tables import RunTables
from tpuscope.detect.xla_advice import SAME_SHAPES

CANDIDATES = 64  # most recent compiles of the family searched for the closest
NO_SHAPES_HINT = (
    "per-graph shapes were not recorded: run `tpuscope run --deep` (or set TPUSCOPE_HLO_SHAPES=1) "
    "for the argument-by-argument diff"
)


def _shapes(row: dict[str, Any], column: str) -> list[str] | None:
    value = row.get(column)
    return None if value is None or (isinstance(value, float) and value != value) else list(value)


def closest(row: dict[str, Any], earlier: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The earlier compile of the same family whose inputs differ least."""
    if not earlier:
        return None
    shapes = _shapes(row, "input_shapes")
    candidates = earlier[-CANDIDATES:]
    if shapes is None:
        return candidates[-1]
    return min(
        reversed(candidates), key=lambda c: shape_distance(_shapes(c, "input_shapes") or [], shapes)
    )


def xla_changes(row: dict[str, Any], before: dict[str, Any] | None) -> list[str]:
    """Argument-by-argument diff of a torch_xla compile against an earlier one of its family."""
    if before is None:
        return []
    old_in, new_in = _shapes(before, "input_shapes"), _shapes(row, "input_shapes")
    if old_in is not None and new_in is not None:
        if changes := diff_shapes(old_in, new_in, prefix="arg"):
            return changes
        old_out, new_out = _shapes(before, "output_shapes"), _shapes(row, "output_shapes")
        if old_out is None or new_out is None:
            return [
                "same input shapes; the output shapes were not recorded, so what changed is not known"
            ]
        return diff_shapes(old_out, new_out, prefix="output") or [SAME_SHAPES]
    if counted := _count_changes(before, row):
        return counted
    gb_old, gb_new = before.get("input_gb"), row.get("input_gb")
    if (
        gb_old is not None
        and gb_new is not None
        and gb_old == gb_old
        and gb_new == gb_new
        and gb_old != gb_new
    ):
        return [
            f"graph input size {gb_old * 1e3:.3f} MB -> {gb_new * 1e3:.3f} MB with the same inputs: "
            f"an input's shape changed ({NO_SHAPES_HINT})"
        ]
    return []


def set_changes(members: pd.DataFrame) -> list[str] | None:
    """What differs between the graphs of one family by their recorded shapes: the first graph's
    that differs from its closest earlier one (xla_changes); None when a graph's input shapes were
    not recorded (the evidence is missing, not the difference)."""
    rows = records(members)
    if any(_shapes(row, "input_shapes") is None for row in rows):
        return None
    for n, row in enumerate(rows[1:], 1):
        if changes := xla_changes(row, closest(row, rows[:n])):
            return changes
    return []


def _count_changes(before: dict[str, Any], row: dict[str, Any]) -> list[str]:
    """'162 -> 180 graph inputs' (and outputs) when the two graphs' counts differ: another
    structure, not the same graph at new sizes (the evidence when shapes were not recorded)."""
    out = []
    for column, noun in (("num_inputs", "graph inputs"), ("num_outputs", "graph outputs")):
        old, new = before.get(column), row.get(column)
        if old is not None and new is not None and old == old and new == new and old != new:
            out.append(f"{int(old)} -> {int(new)} {noun}")
    return out


def compile_diffs(tables: RunTables) -> pd.DataFrame:
    """Every compile of `tables.families` (same order and index), with the position in it of
    its family's closest earlier compile (`predecessor`, None for a family's first) and what
    changed against it (`changes`): the pick and the diff this rule makes for a recompile,
    for every compile, so the Recompiles page shows what the card says."""
    by_family: dict[str, list[dict[str, Any]]] = {}
    last_at: dict[str, dict[str, Any]] = {}  # call site -> its latest compile
    rows: list[dict[str, Any]] = []
    for pos, row in enumerate(records(tables.families)):
        earlier = by_family.setdefault(row["family"], [])
        if row.get("reason") == NEW_EVERY_STEP and site_of(row) in last_at:
            earlier_here = [last_at[site_of(row)]]
        else:
            earlier_here = earlier
        before = closest(row, earlier_here)
        rows.append(
            {"predecessor": before["_pos"] if before else None, "changes": xla_changes(row, before)}
        )
        earlier.append({**row, "_pos": pos})
        last_at[site_of(row)] = {**row, "_pos": pos}
    return pd.DataFrame(rows, columns=["predecessor", "changes"], index=tables.families.index)


def site_of(row: dict[str, Any]) -> str:
    if row.get("backend") == "jax" and row.get("function"):
        return f"jit {row['function']}"
    location = row.get("location")
    return (
        location
        if isinstance(location, str) and location
        else (row.get("cause") or "unknown call site")
    )


def where_text(site: str, location: str | None, function: str | None) -> str:
    """How a card (and a live alert) names a call site: `train.py:44`, `step (train.py:44)`."""
    where = common.file_and_line(location) if location else site
    if function:
        return f"{function} ({where})" if location else function
    return where


def recompile_item(
    row: dict[str, Any], earlier: list[dict[str, Any]], retraces: pd.DataFrame, diff: bool
) -> dict[str, Any]:
    before = closest(row, earlier) if diff else None
    diffs = (
        jax_advice.diffs_of(retraces, int(row["index"]), row.get("function"))
        if row.get("backend") == "jax"
        else []
    )
    changes = jax_advice.changes_of(diffs) if diffs else []
    if not changes and diff:
        changes = xla_changes(row, before)
    return {
        "step": int(row["step"]),
        "index": int(row["index"]),
        "graph_hash": row.get("graph_hash"),
        "cause": row.get("cause") if isinstance(row.get("cause"), str) else None,
        "location": row.get("location") if isinstance(row.get("location"), str) else None,
        "family": row["family"],
        "function": row.get("function"),
        "duration_s": float(row.get("duration_ns") or 0) / common.NS,
        "reason": row.get("reason"),
        "changes": changes,
        "against_graph": before.get("graph_hash") if before else None,
        "diffs": diffs,
    }
