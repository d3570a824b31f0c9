"""Group a graph's matmuls into TensorCore problems, each with its estimated cost on a target chip.

Problems (a matmul can have several):
- head_dim: a batched matmul (attention: batch = batch x heads) whose K or N is
  narrower than the MXU, i.e. head_dim < 128 (v5e) / 256 (v6e): q @ k^T contracts over
  head_dim (K) and weights @ v produces head_dim columns (N).
- unaligned: an unbatched matmul whose K or N is not a multiple of the MXU edge
  (hidden sizes, vocabularies): the last tile of every pass is partly padding.
- f32: both operands f32. On TPU an f32 matmul is 1, 3 or 6 bf16 passes (precision
  default/high/highest) and moves twice the bytes of bf16.
- short: fewer rows (M) than the MXU edge: each weight tile loaded into the array is
  used for fewer rows than it takes to load (modelled as edge rows of time), so the
  array mostly fills and drains.
Costs come from analyze.mxu.mxu_costs (padding_s, f32_extra_s) or the fill model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tpuscope.analyze.attention import attention_mask, head_dims
from tpuscope.analyze.mxu import chip, matmuls, mxu_costs, roofline
from tpuscope.user_files import is_user_file


@dataclass
class MatmulProblem:
    kind: str
    ops: pd.DataFrame  # the matmul rows (with their costs)
    cost_s: float  # per execution of the graph, on the target
    info: dict[str, Any] = field(default_factory=dict)


def step_module(dots: pd.DataFrame, trace_modules: dict[str, int] | None = None) -> str | None:
    """The graph that stands for a step: the one the trace ran most (events per module),
    else the largest by matmul FLOPs (the training step, not the optimizer's init), the
    latest on ties."""
    if dots.empty:
        return None
    names = list(dict.fromkeys(dots["module"].astype(str)))
    seen = [n for n in names if (trace_modules or {}).get(n)]
    if seen:
        return max(seen, key=lambda n: (trace_modules or {})[n])
    flops = dots.groupby(dots["module"].astype(str), sort=False)["flops"].sum()
    best = flops.max()
    return [n for n in names if flops.get(n, 0) >= best * 0.999][-1]


def tensorcore_problems(
    hlo_ops: pd.DataFrame,
    hlo_modules: pd.DataFrame,
    target: str,
    trace_modules: dict[str, int] | None = None,
) -> tuple[list[MatmulProblem], dict[str, Any]]:
    """(problems of the step graph, its roofline summary) on the target chip."""
    dots = matmuls(hlo_ops)
    module = step_module(dots, trace_modules)
    if module is None:
        return [], {}
    edge = chip(target).mxu
    costs = mxu_costs(dots[dots["module"].astype(str) == module], target)
    line = roofline(hlo_modules, costs, target)
    summary: dict[str, Any] = line.iloc[0].to_dict() if not line.empty else {}  # type: ignore[assignment]  # string column names
    summary.update(module=module, target=target, modules=int(dots["module"].nunique()))
    n, k, m = (costs[c].to_numpy() for c in ("n", "k", "m"))
    narrow = (n % edge != 0) | (k % edge != 0)
    heads = attention_mask(costs, edge)
    problems = [
        _problem("head_dim", costs[heads], "padding_s"),
        _problem("unaligned", costs[narrow & ~heads], "padding_s"),
        _problem("f32", costs[costs["f32_extra_s"] > 0], "f32_extra_s"),
    ]
    short = costs[m < edge]
    problems.append(
        MatmulProblem("short", short, float((short["mxu_s"] * edge / (short["m"] + edge)).sum()))
    )
    for problem in problems:
        problem.info = _describe(problem, edge)
    return [p for p in problems if not p.ops.empty], summary


def _problem(kind: str, ops: pd.DataFrame, cost_col: str) -> MatmulProblem:
    return MatmulProblem(kind, ops, float(ops[cost_col].sum()) if not ops.empty else 0.0)


def is_library_path(location: str) -> bool:
    """A stored 'file:line' (or file) that is not the user's code (user_files.is_user_file:
    an installed package wherever it is installed, the standard library, tpuscope)."""
    file, _, line = location.rpartition(":")
    return not is_user_file(file if file and line.isdigit() else location)


def ops_location(ops: pd.DataFrame) -> tuple[str | None, list[str]]:
    """(the most common source line in the user's code, every distinct source line),
    falling back to library lines (torch's linear.py) when no user line is known."""
    if "source_file" not in ops or ops.empty:
        return None, []
    known = ops[ops["source_file"].notna()]
    where = (
        known["source_file"].astype(str) + ":" + known["source_line"].astype("Int64").astype(str)
    )
    files = known["source_file"].astype(str)
    users = {f: is_user_file(f) for f in files.unique()}
    user = where[files.map(users).astype(bool)]
    pool = user if not user.empty else where
    if pool.empty:
        return None, []
    return str(pool.value_counts().index[0]), list(dict.fromkeys(pool.tolist()))


def module_paths(ops: pd.DataFrame) -> list[str]:
    """JAX-style op_name scopes ('jit(step)/jit(main)/attn/dot_general' -> 'attn')."""
    if "op_name" not in ops:
        return []
    paths = []
    for name in ops["op_name"].dropna().astype(str):
        parts = [
            p for p in name.split("/") if p and not p.startswith(("jit(", "pjit(", "transpose("))
        ]
        if len(parts) > 1:
            paths.append("/".join(parts[:-1]))
    return list(dict.fromkeys(paths))


def _describe(problem: MatmulProblem, edge: int) -> dict[str, Any]:
    ops = problem.ops
    if ops.empty:
        return {}
    location, lines = ops_location(ops)
    info: dict[str, Any] = {
        "count": len(ops),
        "location": location,
        "lines": lines[:8],
        "module_paths": module_paths(ops)[:8],
        "flops": float(ops["flops"].sum()),
        "shapes": sorted({_shape(r) for r in ops.itertuples()})[:8],
    }
    if problem.kind == "head_dim":
        info["head_dim"] = min(head_dims(ops, edge) or {int(min(ops["k"].min(), ops["n"].min()))})
    if problem.kind == "unaligned":
        dims = sorted({int(d) for d in np.concatenate([ops["n"], ops["k"]]) if d % edge})
        info["dims"] = dims[:8]
        info["padded"] = [int(np.ceil(d / edge) * edge) for d in dims[:8]]
    if problem.kind == "f32":
        info["precision"] = (
            sorted(set(ops["precision"].astype(str))) if "precision" in ops else ["default"]
        )
    if problem.kind == "short":
        info["rows"] = sorted({int(m) for m in ops["m"]})[:8]
    return info


def _shape(row: Any) -> str:
    batch = f"{int(row.batch)}x" if int(row.batch) > 1 else ""
    return f"{batch}[{int(row.m)},{int(row.k)}]@[{int(row.k)},{int(row.n)}] {row.lhs_dtype}"


def waste_by_generation(ops: pd.DataFrame) -> dict[str, float]:
    """FLOP-weighted padding share of these matmuls on every generation."""
    from tpuscope.analyze.mxu import GENERATIONS, padding_waste

    flops = ops["flops"].to_numpy(float)
    total = flops.sum()
    return {
        gen: round(float((flops * padding_waste(ops["n"], ops["k"], spec.mxu)).sum() / total), 3)
        if total
        else 0.0
        for gen, spec in GENERATIONS.items()
    }
