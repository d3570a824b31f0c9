"""Rule `shape_churn`: input shapes that vary between graphs of one call site, with a bucketing plan.

Per call site, the compiled graphs with the same signature (argument count, dtype
and rank per argument) are compared dim by dim. A dim that took at least
MIN_SIZES sizes, or two sizes with a compile after warm-up, is churning. The plan
is the fewest buckets that keep padding waste at or under MAX_WASTE (padded
elements over elements after padding, each observed size counted once), rounded
to multiples of 8 when that still meets the bound. Cost: the compiles bucketing
would have saved, (graphs - buckets) x their mean compile time. Needs per-graph
input shapes (on by default for torch_xla, always for JAX).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tpuscope.analyze.shapes import (
    Bucketing,
    VaryingDim,
    padding_waste,
    parse_shape,
    suggest_buckets,
    varying_dims,
)
from tpuscope.detect import common
from tpuscope.detect.registry import RunTables
from tpuscope.schema import Finding

RULE = "shape_churn"
MIN_SIZES = 3
MAX_WASTE = 0.10
DATA_DEPENDENT_OPS = ("aten::nonzero", "aten::masked_select", "aten::_unique2", "aten::unique_dim",
                      "aten::unique_consecutive", "aten::nonzero_static")


def _signature(shapes: list[str]) -> tuple[Any, ...]:
    parsed = [parse_shape(s) for s in shapes]
    return tuple((p.dtype, len(p.dims)) if p is not None else s for p, s in zip(parsed, shapes, strict=True))


def _groups(rows: pd.DataFrame) -> list[pd.DataFrame]:
    """Compiles of one call site split by signature, largest first."""
    keyed = rows.assign(_sig=[_signature(list(s)) for s in rows["input_shapes"]])
    groups = [g.drop(columns="_sig") for _, g in keyed.groupby("_sig", sort=False)]
    return sorted(groups, key=len, reverse=True)


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


def _is_churn(dim: VaryingDim, group: pd.DataFrame, judged_steps: set[tuple[Any, ...]]) -> bool:
    if len(dim.distinct) >= MIN_SIZES:
        return True
    return any((r.get("host"), r.get("pid"), r["step"]) in judged_steps for r in group.to_dict("records"))


def _fix(cluster: list[VaryingDim], plan_text: str, data_dependent: list[str]) -> str:
    lead = cluster[0]
    if data_dependent and lead.dtype in ("s64", "s32"):
        return (f"This index tensor's length depends on the data ({', '.join(data_dependent)} ran on the "
                "CPU): remove that op with a static-shape form (see the cpu_fallback finding) instead of "
                f"bucketing; if the length must vary, pad it to {plan_text}.")
    last_batch = (" If this is the batch dim and only the last batch of an epoch is smaller, drop it "
                  "(DataLoader(drop_last=True)) or pad it to the full batch.") if lead.dim == 0 else ""
    return (f"Pad dim {lead.dim} of arg {lead.arg} to the buckets {plan_text} in the data pipeline (e.g. a "
            "collate_fn that pads each batch to the next bucket, or pad_to_multiple_of in a tokenizer), and "
            f"mask the padding in the loss.{last_batch}")


def _plan(sizes: list[int]) -> tuple[Bucketing, str]:
    """The bucketing plan and how it was chosen; one bucket (the largest size) when no plan with
    fewer graphs than sizes stays under the bound."""
    plan = suggest_buckets(sizes, MAX_WASTE)
    if len(plan.buckets) < len(sizes):
        return plan, f"fewest buckets with padding waste <= {100 * MAX_WASTE:.0f}%"
    one = Bucketing([sizes[-1]], padding_waste(sizes, [sizes[-1]]), sizes)
    return one, f"no plan with fewer graphs stays under {100 * MAX_WASTE:.0f}% padding waste, so the largest size"


def _site_finding(location: str | None, group: pd.DataFrame, cluster: list[VaryingDim], wall: float,
                  data_dependent: list[str]) -> Finding:
    lead = cluster[0]
    plan, how = _plan(lead.distinct)
    graphs = len(group)
    mean_compile = float(group["duration_ns"].fillna(0).mean()) / common.NS
    saved = max(graphs - len(plan.buckets), 0)
    cost = saved * mean_compile
    where = common.short_path(location)
    args = ", ".join(f"arg {d.arg} dim {d.dim}" for d in cluster)
    plan_text = (f"pad to {plan.describe()}: {len(plan.buckets)} graph{'s' * (len(plan.buckets) > 1)} "
                 f"instead of {graphs}, {100 * plan.waste:.0f}% padding")
    title = f"Shape churn at {where}: dim {lead.dim} of arg {lead.arg} took {len(lead.distinct)} sizes"
    detail = (f"{graphs} graphs compiled at {where} differ only in size: {args} "
              f"({lead.dtype}) took the sizes {lead.distinct}. Bucketing plan ({how}): {plan_text}. "
              f"Cost: the {saved} compile{'s' * (saved != 1)} bucketing would save x {mean_compile:.2f} s "
              "mean compile time.")
    evidence = {
        "location": location, "arg": lead.arg, "dim": lead.dim, "dtype": lead.dtype,
        "values": lead.distinct, "linked_dims": [[d.arg, d.dim] for d in cluster],
        "graphs": graphs, "buckets": plan.buckets, "padding_waste": round(plan.waste, 4),
        "max_waste": MAX_WASTE, "graph_hashes": [h for h in group["graph_hash"] if h],
        "data_dependent_ops": data_dependent,
    }
    steps = common.steps_list(group["step"])
    severity = common.severity_for(cost, wall, floor="medium" if len(lead.distinct) >= MIN_SIZES else "low")
    return Finding(RULE, severity, title, detail, _fix(cluster, plan.describe(), data_dependent),
                   location, cost, steps, evidence)


def _size_only(compiles: pd.DataFrame, judged_keys: set[tuple[Any, ...]], wall: float) -> list[Finding]:
    """Without per-graph shapes: graphs of one call site with the same inputs but other total sizes."""
    findings = []
    usable = compiles.dropna(subset=["location", "num_inputs", "input_gb"])
    for (location, n_inputs), group in usable.groupby(["location", "num_inputs"], sort=False):
        sizes = sorted(set(group["input_gb"]))
        late = any((r.get("host"), r.get("pid"), r["step"]) in judged_keys for r in group.to_dict("records"))
        if len(sizes) < 2 or (len(sizes) < MIN_SIZES and not late):
            continue
        mean_compile = float(group["duration_ns"].fillna(0).mean()) / common.NS
        cost = (len(group) - 1) * mean_compile
        where = common.short_path(location)
        title = f"Shape churn at {where}: {len(group)} graphs differ only in input size"
        detail = (f"{len(group)} graphs compiled at {where} take the same {int(n_inputs)} inputs but "
                  f"{len(sizes)} different total input sizes ({sizes[0] * 1e3:.3f} to {sizes[-1] * 1e3:.3f} "
                  "MB): some input's shape varies. Per-graph input shapes were not recorded; run "
                  "`tpuscope run --deep` for the dim, its sizes and a bucketing plan. Cost (upper bound): "
                  f"the {len(group) - 1} extra compiles x {mean_compile:.2f} s mean compile time.")
        fix = ("Pad the varying input to a few fixed sizes (buckets) in the data pipeline, e.g. a "
               "collate_fn that pads each batch to the next bucket, and mask the padding.")
        evidence = {"location": location, "num_inputs": int(n_inputs), "input_gb": sizes,
                    "graphs": len(group), "graph_hashes": [h for h in group["graph_hash"] if h]}
        findings.append(Finding(RULE, common.severity_for(cost, wall, floor="medium"), title, detail, fix,
                                location, cost, common.steps_list(group["step"]), evidence))
    return findings


def detect_shape_churn(tables: RunTables) -> list[Finding]:
    """One finding per call site whose graphs differ only in the sizes of some dims."""
    compiles = tables.compiles
    if compiles.empty:
        return []
    has_shapes = compiles["input_shapes"].map(lambda s: s is not None and len(s) > 0) \
        if "input_shapes" in compiles else pd.Series(False, index=compiles.index)
    known = compiles[has_shapes]
    judged = common.judged_steps(tables)
    if known.empty:
        judged_keys = {(r.get("host"), r.get("pid"), r["step"]) for r in judged.to_dict("records")}
        return _size_only(compiles[compiles["step"] >= 0], judged_keys, common.wall_s(judged))
    judged_keys = {(r.get("host"), r.get("pid"), r["step"]) for r in judged.to_dict("records")}
    wall = common.wall_s(judged)
    fallbacks = tables.fallbacks
    data_dependent = sorted(set(fallbacks["op"]) & set(DATA_DEPENDENT_OPS)) if not fallbacks.empty else []
    findings = []
    for location, rows in known.groupby(known["location"].fillna(""), sort=False):
        for group in _groups(rows):
            lists = [list(s) for s in group["input_shapes"]]
            churning = [d for d in varying_dims(lists) if _is_churn(d, group, judged_keys)]
            if churning:
                cluster = _linked(churning)[0]
                findings.append(_site_finding(location or None, group, cluster, wall, data_dependent))
    return findings
