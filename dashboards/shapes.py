"""Input shapes of compiled graphs, as the pages show them (compiles DataFrame in, rows out).

The parsing, diffing and varying-dim logic is tpuscope's own (tpuscope.analyze.shapes,
the graph families of tpuscope.analyze.families and the recompile rule's
`xla_changes`), so the Recompiles page says exactly what the recompile finding says;
this module only applies it to every compile of a run with a bounded look-back, and
lays values out per step for the charts.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pandas as pd

from tpuscope.analyze.shapes import parse_shape, shape_distance, varying_dims
from tpuscope.detect.recompile import xla_changes

LOOKBACK = 64  # earlier graphs of one family considered as the predecessor


def shape_list(value: Any) -> list[str] | None:
    """A compile row's input_shapes as a list, None when not recorded."""
    if value is None or isinstance(value, float | str):
        return None
    return [str(v) for v in value]


def _closest(candidates: list[dict[str, Any]], shapes: list[str] | None) -> dict[str, Any] | None:
    """The earlier graph whose inputs differ least (the most recent on ties), as the rule picks it."""
    if not candidates:
        return None
    if shapes is None:
        return candidates[-1]
    return min(reversed(candidates), key=lambda c: shape_distance(shape_list(c.get("input_shapes")) or [], shapes))


def shape_diffs(compiles: pd.DataFrame) -> pd.DataFrame:
    """Per compile (index of `compiles`): the predecessor's position, the changes, and a one-line diff.

    Candidates are the latest graph of each distinct input-shape list in the graph family
    (the `family` column of analyze.families; the call site when it is absent)
    (the last LOOKBACK of them): a recompile storm over a few sizes compares against a
    handful of graphs, not every earlier one.
    """
    rows: list[dict[str, Any]] = []
    seen: dict[Any, OrderedDict[Any, dict[str, Any]]] = {}
    order = compiles.sort_values(["time_ns", "index"]).index if "time_ns" in compiles else compiles.index
    for idx, row in zip(order, compiles.loc[order].to_dict("records"), strict=True):
        earlier = seen.setdefault(row.get("family") or row.get("location") or row.get("cause") or "?",
                                  OrderedDict())
        shapes = shape_list(row.get("input_shapes"))
        key = tuple(shapes) if shapes is not None else ("#", idx)
        before = earlier.get(key) if shapes is not None else None
        if before is None:
            before = _closest(list(earlier.values())[-LOOKBACK:], shapes)
        changes = xla_changes(row, before) if before is not None else []
        if before is None:
            diff = "first compile of this graph"
        elif not changes:
            diff = "not recorded (no input shapes)"
        else:
            diff = "; ".join(changes[:4]) + (f"; ... ({len(changes)} changes)" if len(changes) > 4 else "")
        rows.append({"row": idx, "predecessor": before["_pos"] if before else None, "changes": changes,
                     "diff": diff})
        earlier[key] = {**row, "_pos": idx}
        earlier.move_to_end(key)
    return pd.DataFrame(rows, columns=["row", "predecessor", "changes", "diff"]).set_index("row")


def _signature(shapes: list[str]) -> tuple[Any, ...]:
    """Argument count, dtype and rank per argument: graphs that differ only in sizes share it."""
    parsed = [parse_shape(s) for s in shapes]
    return tuple((p.dtype, len(p.dims)) if p is not None else s for p, s in zip(parsed, shapes, strict=True))


def varying_by_step(compiles: pd.DataFrame) -> pd.DataFrame:
    """Long rows (site, dim, step, value) for every dim whose size varies between graphs of a site."""
    out: list[dict[str, Any]] = []
    if compiles.empty or "input_shapes" not in compiles:
        return pd.DataFrame(columns=["site", "dim", "step", "value"])
    known = compiles[compiles["input_shapes"].map(lambda s: bool(shape_list(s)))]
    for site, rows in known.groupby(known["location"].fillna("(unknown site)"), sort=False):
        rows = rows.sort_values(["time_ns", "index"])
        lists = [shape_list(s) or [] for s in rows["input_shapes"]]
        groups: dict[tuple[Any, ...], list[int]] = {}
        for i, shapes in enumerate(lists):
            groups.setdefault(_signature(shapes), []).append(i)
        for members in groups.values():
            steps = rows["step"].to_numpy()[members]
            for dim in varying_dims([lists[i] for i in members]):
                out.extend({"site": site, "dim": f"arg {dim.arg} dim {dim.dim}", "step": int(s), "value": v}
                           for s, v in zip(steps, dim.values, strict=True))
    return pd.DataFrame(out, columns=["site", "dim", "step", "value"])


def finding_values(compiles: pd.DataFrame, evidence: dict[str, Any]) -> pd.DataFrame:
    """(dim, step, value) of a shape_churn finding's dim, read back from the graphs it names."""
    arg, dim = evidence.get("arg"), evidence.get("dim")
    hashes = set(evidence.get("graph_hashes") or [])
    if compiles.empty or arg is None or dim is None or not hashes:
        return pd.DataFrame(columns=["dim", "step", "value"])
    rows = []
    named = compiles[compiles["graph_hash"].isin(hashes)]
    for step, shapes in zip(named["step"], named["input_shapes"], strict=True):
        args = shape_list(shapes) or []
        parsed = parse_shape(args[arg]) if arg < len(args) else None
        if parsed is not None and len(parsed.dims) > dim and parsed.dims[dim] is not None:
            rows.append({"dim": f"arg {arg} dim {dim}", "step": int(step), "value": parsed.dims[dim]})
    return pd.DataFrame(rows, columns=["dim", "step", "value"]).sort_values("step")
