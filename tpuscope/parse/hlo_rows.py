"""Parsed HLO modules -> rows of the store's `hlo_modules` and `hlo_ops` tables.

Each dot and convolution gets its matmul view: batch, M, N, K "after batching",
i.e. the sizes of each of the `batch` independent matrix products. For a dot, K is
the product of the contracting dims, batch the product of the batch dims, M and N the
remaining lhs and rhs dims. A convolution is the matmul of its im2col form:
M = batch x output spatial positions, K = input features per group x kernel window,
N = output features per group, batch = feature groups.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpuscope.parse.hlo import HloModule, HloParseError, HloShape, Instruction, read_dump
from tpuscope.parse.hlo_frames import dump_user_lines

MATMUL_OPCODES = ("dot", "convolution")


@dataclass
class Matmul:
    batch: int
    m: int
    n: int
    k: int
    lhs_dtype: str
    rhs_dtype: str
    precision: str  # default / high / highest (the highest operand precision)

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


def _dims(text: str | None) -> list[int]:
    return [int(d) for d in (text or "").strip("{}").split(",") if d.strip().isdigit()]


def _product(values: Iterable[int]) -> int:
    return math.prod(values) if values else 1


def _precision(inst: Instruction) -> str:
    found = [
        p.strip().lower()
        for p in inst.attrs.get("operand_precision", "").strip("{}").split(",")
        if p.strip()
    ]
    order = ["default", "high", "highest"]
    found = [p for p in found if p in order]
    return max(found, key=order.index) if found else "default"


def matmul(inst: Instruction) -> Matmul | None:
    """The matmul view of a dot or convolution whose operand shapes are known."""
    if inst.opcode not in MATMUL_OPCODES or len(inst.operand_shapes) < 2:
        return None
    lhs, rhs = inst.operand_shapes[0], inst.operand_shapes[1]
    if lhs is None or rhs is None or lhs.is_tuple or rhs.is_tuple:
        return None
    if inst.opcode == "dot":
        return _dot(inst, lhs, rhs)
    return _convolution(inst, lhs, rhs)


def _dot(inst: Instruction, lhs: HloShape, rhs: HloShape) -> Matmul:
    lb, lc = _dims(inst.attrs.get("lhs_batch_dims")), _dims(inst.attrs.get("lhs_contracting_dims"))
    rb, rc = _dims(inst.attrs.get("rhs_batch_dims")), _dims(inst.attrs.get("rhs_contracting_dims"))
    m = _product(d for i, d in enumerate(lhs.dims) if i not in lb and i not in lc)
    n = _product(d for i, d in enumerate(rhs.dims) if i not in rb and i not in rc)
    k = _product(lhs.dims[i] for i in lc if i < len(lhs.dims))
    batch = _product(lhs.dims[i] for i in lb if i < len(lhs.dims))
    return Matmul(batch, m, n, k, lhs.dtype, rhs.dtype, _precision(inst))


def _convolution(inst: Instruction, lhs: HloShape, rhs: HloShape) -> Matmul | None:
    labels = inst.attrs.get("dim_labels", "")
    match = re.match(r"^(\w+)_(\w+)->(\w+)$", labels)
    out = inst.shape
    if (
        not match
        or out.is_tuple
        or len(match[1]) != len(lhs.dims)
        or len(match[2]) != len(rhs.dims)
    ):
        return None
    rhs_l, out_l = match[2], match[3]
    groups = int(inst.attrs.get("feature_group_count", "1") or 1)
    batch_groups = int(inst.attrs.get("batch_group_count", "1") or 1)
    window = _product(d for label, d in zip(rhs_l, rhs.dims, strict=True) if label.isdigit())
    in_per_group = rhs.dims[rhs_l.index("i")]
    out_features = rhs.dims[rhs_l.index("o")]
    spatial_out = _product(d for label, d in zip(out_l, out.dims, strict=False) if label.isdigit())
    m = out.dims[out_l.index("b")] * spatial_out if "b" in out_l else spatial_out
    group_count = groups * batch_groups
    return Matmul(
        group_count,
        m,
        max(out_features // group_count, 1),
        in_per_group * window,
        lhs.dtype,
        rhs.dtype,
        _precision(inst),
    )


def _traffic(inst: Instruction) -> float:
    """Bytes a top-level instruction reads and writes (operands + result), 0 for free ones."""
    if inst.moves_no_data:
        return 0.0
    return inst.shape.bytes + sum(s.bytes for s in inst.operand_shapes if s is not None)


def module_rows(module: HloModule) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the hlo_modules row, the hlo_ops rows) of one module."""
    ops, flops, top_bytes, counts = [], 0.0, 0.0, {"dot": 0, "convolution": 0}
    entry = module.entry
    for inst in module.instructions():
        row = _op_row(module, inst)
        ops.append(row)
        if row["flops"]:
            flops += row["flops"]
        if inst.opcode in counts:
            counts[inst.opcode] += 1
        if inst.fusion is None and entry is not None and inst.computation == entry.name:
            top_bytes += _traffic(inst)
    params = [i for i in (entry.instructions if entry else []) if i.opcode == "parameter"]
    root = next((i for i in (entry.instructions if entry else []) if i.is_root), None)
    module_row = {
        "module": module.name,
        "stage": module.stage,
        "source": module.source,
        "instructions": len(ops),
        "computations": len(module.computations),
        "dots": counts["dot"],
        "convolutions": counts["convolution"],
        "matmul_flops": flops,
        "param_bytes": float(sum(p.shape.bytes for p in params)),
        "output_bytes": float(root.shape.bytes) if root is not None else 0.0,
        "top_level_bytes": top_bytes,
    }
    return module_row, ops


def _op_row(module: HloModule, inst: Instruction) -> dict[str, Any]:
    mm = matmul(inst)
    meta = inst.metadata
    return {
        "module": module.name,
        "stage": module.stage,
        "computation": inst.computation,
        "name": inst.name,
        "opcode": inst.opcode,
        "shape": str(inst.shape),
        "dtype": inst.shape.dtype,
        "operands": inst.operands,
        "fusion": inst.fusion,
        "op_type": meta.get("op_type"),
        "op_name": meta.get("op_name"),
        "source_file": meta.get("source_file"),
        "source_line": inst.source_line,
        "batch": mm.batch if mm else None,
        "m": mm.m if mm else None,
        "n": mm.n if mm else None,
        "k": mm.k if mm else None,
        "lhs_dtype": mm.lhs_dtype if mm else None,
        "rhs_dtype": mm.rhs_dtype if mm else None,
        "precision": mm.precision if mm else None,
        "flops": mm.flops if mm else None,
    }


def rows(modules: Iterable[HloModule], **fields: Any) -> dict[str, list[dict[str, Any]]]:
    """hlo_modules and hlo_ops rows of many modules, with extra fields (host, ...) on each row."""
    out: dict[str, list[dict[str, Any]]] = {"hlo_modules": [], "hlo_ops": []}
    for module in modules:
        module_row, op_rows = module_rows(module)
        out["hlo_modules"].append({**fields, **module_row})
        out["hlo_ops"].extend({**fields, **r} for r in op_rows)
    return out


def load_dumps(
    paths: Iterable[str | Path], **fields: Any
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, str]]]:
    """Rows of every readable HLO text file; unreadable ones are returned as refusals naming them."""
    out: dict[str, list[dict[str, Any]]] = {"hlo_modules": [], "hlo_ops": []}
    refused = []
    for path in paths:
        try:
            module = read_dump(path)
        except (OSError, UnicodeDecodeError, HloParseError) as exc:
            refused.append({"path": str(path), "reason": str(exc)})
            continue
        found = rows([module], **fields)
        _user_lines(found["hlo_ops"], dump_user_lines(path))
        for name in out:
            out[name].extend(found[name])
    return out, refused


def _user_lines(ops: list[dict[str, Any]], lines: dict[str, tuple[str, int]]) -> None:
    """source_file/line become the user's frame where the module's stack index knows it
    (collect/hlo_frames); elsewhere they stay the innermost frame the text metadata names."""
    for row in ops:
        if row["name"] in lines:
            row["source_file"], row["source_line"] = lines[row["name"]]
