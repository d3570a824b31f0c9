"""Input shapes of compiled graphs, as the pages show them (compiles DataFrame in, rows out).

The parsing and varying-dim logic is tpuscope's own (tpuscope.analyze.shapes), over the
graph families the analysis judged (StoreData.compiles_judged); this module only lays the
values out per step for the charts.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpuscope.analyze.contract import ShapeChurnFacet
from tpuscope.analyze.shapes import parse_shape, varying_dims


def shape_list(value: Any) -> list[str] | None:
    """A compile row's input_shapes as a list, None when not recorded."""
    if value is None or isinstance(value, float | str):
        return None
    return [str(v) for v in value]


def varying_by_step(families: pd.DataFrame) -> pd.DataFrame:
    """Long rows (site, dim, step, value) for every dim whose size varies between the graphs of
    one family (the analysis's `family`, StoreData.compiles_judged), named by its call site."""
    out: list[dict[str, Any]] = []
    if families.empty or "input_shapes" not in families:
        return pd.DataFrame(columns=["site", "dim", "step", "value"])
    known = families[families["input_shapes"].map(lambda s: bool(shape_list(s)))]
    for _, rows in known.groupby("family", sort=False):
        site = (
            rows["location"].dropna().iloc[0]
            if rows["location"].notna().any()
            else "(call site not recorded)"
        )
        lists = [shape_list(s) or [] for s in rows["input_shapes"]]
        steps = rows["step"].to_numpy()
        for dim in varying_dims(lists):
            out.extend(
                {"site": site, "dim": f"arg {dim.arg} dim {dim.dim}", "step": int(s), "value": v}
                for s, v in zip(steps, dim.values, strict=True)
            )
    return pd.DataFrame(out, columns=["site", "dim", "step", "value"])


def finding_values(compiles: pd.DataFrame, facet: ShapeChurnFacet | None) -> pd.DataFrame:
    """(dim, step, value) of a shape_churn finding's dim, read back from the graphs it names."""
    arg, dim = (facet.arg, facet.dim) if facet else (None, None)
    hashes = set(facet.graph_hashes if facet else [])
    if compiles.empty or arg is None or dim is None or not hashes:
        return pd.DataFrame(columns=["dim", "step", "value"])
    rows = []
    named = compiles[compiles["graph_hash"].isin(hashes)]
    for step, shapes in zip(named["step"], named["input_shapes"], strict=True):
        args = shape_list(shapes) or []
        parsed = parse_shape(args[arg]) if arg < len(args) else None
        if parsed is not None and len(parsed.dims) > dim and parsed.dims[dim] is not None:
            rows.append(
                {"dim": f"arg {arg} dim {dim}", "step": int(step), "value": parsed.dims[dim]}
            )
    return pd.DataFrame(rows, columns=["dim", "step", "value"]).sort_values("step")
