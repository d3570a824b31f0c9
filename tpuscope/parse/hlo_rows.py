"""Parsed HLO modules -> rows of the store's `hlo_modules` and `hlo_ops` tables.

Each dot and convolution gets its matmul view: batch, M, N, K "after batching",
i.e. the sizes of each of the `batch` independent matrix products. For a dot, K is
the product of the contracting dims, batch the product of the batch dims, M and N the
remaining lhs and rhs dims. A convolution is the matmul of its im2col form:
M = batch x output spatial positions, K = input features per group x kernel window,
N = output features per group, batch = feature groups. Two spatial dims are not image
dims: XLA's TPU compiler writes a batched dot as a convolution whose batch dims are
spatial dims dilated by their own size (`window={size=16x16 stride=15x15
lhs_dilate=16x16}`: output i meets input i and kernel i only), and a weight's extra dim
(attention heads) as a spatial dim over a one-element input padded to the kernel's size
(output i meets kernel i only). Counting which input and kernel positions each output
position meets tells them apart: the first is a batch dim, the second an output (N) dim.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

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
        or len(match[3]) != len(out.dims)
    ):
        return None
    lhs_l, rhs_l, out_l = match[1], match[2], match[3]
    groups = int(inst.attrs.get("feature_group_count", "1") or 1)
    batch_groups = int(inst.attrs.get("batch_group_count", "1") or 1)
    window = _window(inst.attrs.get("window", ""))
    batch, m, n, k = groups * batch_groups, 1, 1, 1
    for index, label in enumerate(sorted(c for c in lhs_l if c.isdigit())):  # window order
        sizes = (lhs.dims[lhs_l.index(label)], rhs.dims[rhs_l.index(label)])
        outputs = out.dims[out_l.index(label)]
        role = _spatial_role(*sizes, outputs, {key: v[index] for key, v in window.items()})
        batch *= outputs if role == "batch" else 1
        n *= outputs if role == "n" else 1
        m *= outputs if role == "m" else 1
        k *= sizes[1] if role == "m" else 1
    m *= out.dims[out_l.index("b")] if "b" in out_l else 1
    n *= max(rhs.dims[rhs_l.index("o")] // (groups * batch_groups), 1)
    k *= rhs.dims[rhs_l.index("i")]
    return Matmul(batch, m, n, k, lhs.dtype, rhs.dtype, _precision(inst))


def _window(text: str) -> dict[str, list[int]]:
    """`size=16x16 stride=15x15 pad=0_0x15_15 lhs_dilate=16x16` -> {key: one int per spatial
    dim} (a pad's low side only: the high side follows from the output's size)."""
    fields = {}
    for item in text.strip("{}").split():
        key, _, value = item.partition("=")
        fields[key] = [int(v.split("_")[0]) for v in value.split("x") if v.split("_")[0].isdigit()]
    return fields


def _spatial_role(inputs: int, kernel: int, outputs: int, window: dict[str, int]) -> str:
    """'batch', 'n' or 'm' (an image dim: M gets its outputs, K its kernel): which input and
    kernel positions each output position meets through the pads, strides and dilations."""
    if outputs <= 1 or kernel <= 1:
        return "m"
    stride, low = window.get("stride", 1), window.get("pad", 0)
    lhs_dilate, rhs_dilate = window.get("lhs_dilate", 1), window.get("rhs_dilate", 1)
    if outputs * kernel > 1 << 20:
        return "m"
    o, w = np.meshgrid(np.arange(outputs), np.arange(kernel), indexing="ij")
    at = o * stride + w * rhs_dilate - low
    real = (at >= 0) & (at % lhs_dilate == 0) & (at // lhs_dilate < inputs)
    if not (real.sum(axis=1) == 1).all():
        return "m"
    met_kernel = w[real]
    if len(set(met_kernel.tolist())) != outputs:
        return "m"
    met_input = (at[real] // lhs_dilate).tolist()
    if inputs == 1:
        return "n"
    return "batch" if len(set(met_input)) == outputs else "m"


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
        "entry": entry.name if entry is not None else None,
        "root": root.name if root is not None else None,
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
        "layout": ",".join(map(str, inst.shape.layout)) or None,
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
