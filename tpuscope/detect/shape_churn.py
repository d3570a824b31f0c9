"""The shape-churn facet of a recompile: which dim varies, its sizes, a bucketing plan.

Shape churn is a cause of recompiles, not a rule of its own: the compiles of one
graph family (same line, same input ranks and dtypes; analyze/families.py) that
differ only in some dims' sizes. This module reads those dims from the family's
per-graph input shapes and plans the fewest buckets that keep padding waste at or
under MAX_WASTE (padded elements over elements after padding, each observed size
counted once), rounded to multiples of 8 when that still meets the bound. The saving
is the compiles bucketing would avoid, (graphs - buckets) x their mean compile time.
"""

from __future__ import annotations

import pandas as pd

from tpuscope.analyze.contract import ShapeChurnFacet
from tpuscope.analyze.shapes import (
    Bucketing,
    VaryingDim,
    bucket_padding,
    parse_shape,
    suggest_buckets,
    varying_dims,
)
from tpuscope.detect import common
from tpuscope.detect.jax_advice import plain

MAX_WASTE = 0.10
MIN_PLAN_SIZES = 3  # two sizes need no plan: pad to the larger (or drop the short batch)
DATA_DEPENDENT_OPS = (
    "aten::nonzero",
    "aten::masked_select",
    "aten::_unique2",
    "aten::unique_dim",
    "aten::unique_consecutive",
    "aten::nonzero_static",
)


def _linked(dims: list[VaryingDim]) -> list[list[VaryingDim]]:
    """Dims whose sizes move together (the same sequence length in several arguments)."""
    clusters: list[list[VaryingDim]] = []
    for dim in dims:
        for cluster in clusters:
            if cluster[0].values == dim.values:
                cluster.append(dim)
                break
        else:
            clusters.append([dim])
    return sorted(clusters, key=lambda c: (-len(c[0].distinct), c[0].arg, c[0].dim))


def _plan(sizes: list[int]) -> tuple[Bucketing, str]:
    """The bucketing plan and how it was chosen; one bucket (the largest size) when no plan with
    fewer graphs than sizes stays under the bound."""
    plan = suggest_buckets(sizes, MAX_WASTE)
    if len(plan.buckets) < len(sizes):
        return plan, f"fewest buckets with padding waste <= {100 * MAX_WASTE:.0f}%"
    one = Bucketing([sizes[-1]], bucket_padding(sizes, [sizes[-1]]), sizes)
    return (
        one,
        f"no plan with fewer graphs stays under {100 * MAX_WASTE:.0f}% padding waste, so the largest size",
    )


def _shape_lists(family_rows: pd.DataFrame) -> list[list[str]]:
    if "input_shapes" not in family_rows:
        return []
    return [
        list(s)
        for s in family_rows["input_shapes"]
        if s is not None and not isinstance(s, float) and len(s)
    ]


def churn_facet(
    family_rows: pd.DataFrame, arg_names: dict[int, str] | None = None
) -> ShapeChurnFacet | None:
    """The varying dim of one family's compiles and its bucketing plan (None: no dim varies)."""
    lists = _shape_lists(family_rows)
    if len(lists) < 2 or len({len(x) for x in lists}) != 1:
        return None
    dims = varying_dims(lists)
    if not dims:
        return None
    cluster = _linked(dims)[0]
    lead = cluster[0]
    names = arg_names or {}
    facet = ShapeChurnFacet(
        arg=lead.arg,
        arg_name=names.get(lead.arg, f"arg {lead.arg}"),
        dim=lead.dim,
        dtype=lead.dtype,
        values=lead.distinct,
        linked_dims=[[d.arg, d.dim] for d in cluster],
        graphs=len(lists),
        max_waste=MAX_WASTE,
        graph_hashes=[str(h) for h in family_rows["graph_hash"] if isinstance(h, str) and h],
    )
    if len(lead.distinct) >= MIN_PLAN_SIZES:
        plan, how = _plan(lead.distinct)
        mean_compile = float(family_rows["duration_ns"].fillna(0).mean()) / common.NS
        saved = max(len(lists) - len(plan.buckets), 0)
        facet.buckets, facet.plan, facet.padding_waste = (
            plan.buckets,
            plan.describe(),
            round(plan.waste, 4),
        )
        facet.how, facet.saved_compiles, facet.saved_s = how, saved, saved * mean_compile
    return facet


def facet_text(facet: ShapeChurnFacet) -> str:
    """One sentence: the varying dim, its sizes and, with three or more sizes, the plan."""
    sizes = facet.values
    text = (
        f"dim {facet.dim} of {facet.arg_name} ({facet.dtype}) took {len(sizes)} sizes "
        f"({', '.join(map(str, sizes[:8]))}{' ...' if len(sizes) > 8 else ''})"
    )
    if facet.plan is not None and facet.buckets is not None:  # the plan's figures come together
        text += (
            f"; bucketing plan ({facet.how}): pad to {facet.plan}, {len(facet.buckets)} "
            f"graph{'s' * (len(facet.buckets) > 1)} instead of {facet.graphs}, "
            f"{100 * (facet.padding_waste or 0.0):.0f}% padding, saving {facet.saved_compiles} compiles "
            f"({facet.saved_s or 0.0:.2f} s)"
        )
    return text


def data_dependent_ops(fallbacks: pd.DataFrame) -> list[str]:
    """Fallback ops whose output length depends on the data (a varying index length's cause)."""
    return (
        sorted(set(fallbacks["op"].unique()) & set(DATA_DEPENDENT_OPS))
        if not fallbacks.empty
        else []
    )


def grew(families: pd.DataFrame, family: str, facet: ShapeChurnFacet, last: int | None) -> bool:
    """The facet's dim only grew from compile to compile of the family, in the loop (steps up to
    `last`; an evaluation after it at another length is not the loop's): a later phase at a
    longer length, not a short last batch (smaller) nor sizes that come and go."""
    if facet.arg is None or facet.dim is None:
        return False
    arg, dim = facet.arg, facet.dim
    rows = families[families["family"] == family].sort_values("index")
    if last is not None:
        rows = rows[rows["step"] <= last]
    sizes = []
    for shapes in rows["input_shapes"]:
        listed = list(shapes) if shapes is not None and not isinstance(shapes, float) else []
        shape = parse_shape(plain(str(listed[arg]))) if len(listed) > arg else None
        dims = shape.dims if shape else []
        sizes.append(dims[dim] if len(dims) > dim else None)
    pairs = list(zip(sizes, sizes[1:], strict=False))
    known = [(a, b) for a, b in pairs if a is not None and b is not None]
    return (
        bool(pairs)
        and len(known) == len(pairs)
        and all(b >= a for a, b in known)
        and any(b > a for a, b in known)
    )
