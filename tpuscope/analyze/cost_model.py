"""What one XLA op costs on a TPU generation: a physical model, op category by op category.

Every op is priced by the resource that bounds it, with the figures that decide real op
times on a TPU (docs/cost_model.md cites each):
- compute (fusions, convolutions, elementwise): max(FLOPs / peak, bytes / HBM bandwidth)
  with the peaks of ONE TensorCore: on chips with two (v4, v5p, TPU7x) XLA runs an op on
  one core unless it is a "megacore fusion", so per-chip peaks would halve every estimate;
- collectives (all-gather, reduce-scatter, all-reduce, all-to-all, collective-permute and
  XLA's fused forms): ring traffic over ICI, (n-1)/n of the array per link per step, on
  one direction of the ring unless the op's backend_config names a bidirectional strategy;
- host offload (copy-start/copy-done to or from host memory, memory space S(5)): the array
  over the host link (PCIe) at its per-direction bandwidth; the schedule of a module decides
  how much of it a copy-done waits for (analyze.cost_compare);
- dynamic-update-slice: XLA counts the update only (in place); when the update is not
  whole tiles of the buffer's tiled layout it is modelled as a rewrite of the whole buffer
  (read + write), an assumption the v5p profile supports (docs/cost_model.md);
- custom calls: the FLOPs and bytes XLA or the kernel recorded, or, where none were recorded
  (XLA's own `online-softmax` on a v5e), the operand and result bytes over HBM; attention kernels (Pallas
  splash/flash: fwd, dq, dkv) from their q/k/v shapes (dense FLOPs, operands + results),
  as their recorded cost estimates exceed what the chip can do (docs/cost_model.md).
Pure functions; nothing here reads a measured time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpuscope.analyze.attention import KERNEL_NAME

if TYPE_CHECKING:  # the HLO text parser loads on first use: dashboards import no collect module
    from tpuscope.parse.hlo import HloShape, Instruction


@dataclass(frozen=True)
class CostChip:
    """Per-chip figures of one generation (docs/cost_model.md gives the source of each)."""

    key: str
    cores: int  # TensorCores per chip
    peak_flops: float  # bf16 FLOP/s per chip
    hbm: float  # HBM bytes/s per chip
    ici_link: float  # ICI bytes/s per link, one direction
    host_dma: float  # host link (PCIe) bytes/s per direction


CHIPS: dict[str, CostChip] = {
    "v4": CostChip("v4", 2, 275e12, 1200e9, 45e9, 15e9),
    "v5e": CostChip("v5e", 1, 197e12, 819e9, 50e9, 15e9),
    "v5p": CostChip("v5p", 2, 459e12, 2765e9, 100e9, 15e9),
    "v6e": CostChip("v6e", 1, 918e12, 1638e9, 100e9, 32e9),
    "v7": CostChip("v7", 2, 2307e12, 7380e9, 100e9, 32e9),
}


@dataclass(frozen=True)
class Peaks:
    """The per-TensorCore rates ops are priced with, and where they came from."""

    flops: float
    hbm: float
    source: str


def peaks(target: str, xprof_flops: float | None = None, xprof_hbm: float | None = None) -> Peaks:
    """Per-core peaks: xprof's roofline figures when the trace carries them (they are per
    core: 233.4 TFLOP/s on a v5p core, 459 per chip), else the chip's figures / cores."""
    chip = CHIPS[target]
    if xprof_flops and xprof_hbm:
        return Peaks(xprof_flops, xprof_hbm, "xprof roofline peaks of the trace")
    return Peaks(
        chip.peak_flops / chip.cores,
        chip.hbm / chip.cores,
        f"{target} datasheet / {chip.cores} TensorCore(s)",
    )


@dataclass
class OpCost:
    """The estimate of one execution of one op."""

    seconds: float
    bound: str  # compute, HBM, ICI, host DMA, async (hidden), none
    rule: str
    flops: float = 0.0
    bytes: float = 0.0


_COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
_PASS = re.compile(r"(?:^|_)(fwd|dkv|dq|bwd)(?:_|$)")  # the kernel's own pass, first in its name
_PASS_FACTOR = {"fwd": 4, "dq": 6, "dkv": 8, "bwd": 10}
_GROUPS_IOTA = re.compile(r"^\[(\d+),(\d+)\]")
_GROUPS_LIST = re.compile(r"^\{\{([\d,\s]+)\}")
_HOST_SPACE = "S(5)"


def parse(expression: str | None) -> Instruction | None:
    """The HLO instruction of an op's text (trace event names and xprof expressions are HLO)."""
    from tpuscope.parse.hlo import HloParseError, parse_instruction

    if not expression or " = " not in expression:
        return None
    try:
        return parse_instruction(expression)
    except (HloParseError, ValueError, IndexError):
        return None


def _arrays(shape: HloShape | None) -> list[HloShape]:
    if shape is None:
        return []
    return [a for e in shape.elements for a in _arrays(e)] if shape.is_tuple else [shape]


def group_size(groups: str, devices: int) -> int:
    """Participants per replica group: '[4,2]<=[2,4]' -> 2, '{{0,1,2,3}}' -> 4, '{}' -> all devices."""
    iota = _GROUPS_IOTA.search(groups)
    if iota:
        return int(iota[2])
    listed = _GROUPS_LIST.search(groups)
    if listed:
        return len([x for x in listed[1].split(",") if x.strip()])
    return max(devices, 1)


def collective_kind(inst: Instruction, category: str) -> str | None:
    """all-gather / reduce-scatter / ... for collective ops and XLA's fused collectives."""
    op = inst.opcode.removesuffix("-start")
    if op in _COLLECTIVES:
        return op
    calls = inst.attrs.get("calls", "")
    if inst.opcode == "fusion" and (
        "all-reduce-scatter" in calls or "all-reduce-scatter" in category
    ):
        return "reduce-scatter"
    if inst.opcode == "fusion" and inst.name.startswith("async-collective-start"):
        return "all-gather"
    return None


def _collective(inst: Instruction, kind: str, chip: CostChip, devices: int, peak: Peaks) -> OpCost:
    """Ring traffic of one collective: the bytes each chip sends over its ICI links."""
    results, operands = _arrays(inst.shape), [a for s in inst.operand_shapes for a in _arrays(s)]
    if kind == "all-gather" and inst.opcode == "fusion" and len(results) > 1:
        results = results[1:2]  # async-collective-start's tuple: (input, gathered output, flags...)
    out_b = max((a.bytes for a in results), default=0.0)
    in_b = operands[0].bytes if operands else out_b
    groups = inst.attrs.get("replica_groups")
    n = group_size(groups, devices) if groups is not None else _ratio(in_b, out_b, kind, devices)
    volume = {
        "all-gather": out_b,
        "reduce-scatter": in_b,
        "all-reduce": 2 * out_b,
        "all-to-all": in_b,
        "collective-permute": out_b,
    }[kind]
    share = 1.0 if kind == "collective-permute" else (n - 1) / n if n > 1 else 0.0
    links = 2 if "BiDirection" in inst.attrs.get("backend_config", "") else 1
    ici = volume * share / (links * chip.ici_link)
    hbm = (in_b + out_b) / peak.hbm
    return OpCost(
        max(ici, hbm),
        "ICI" if ici >= hbm else "HBM",
        f"{kind} ring over {n} chips, {links} link(s) at {chip.ici_link / 1e9:g} GB/s",
        bytes=volume * share,
    )


def _ratio(in_b: float, out_b: float, kind: str, devices: int) -> int:
    """Group size of a fused collective without replica_groups: how much it gathers or scatters."""
    big, small = (out_b, in_b) if kind == "all-gather" else (in_b, out_b)
    return max(round(big / small), 1) if small > 0 else max(devices, 1)


def is_host_copy(inst: Instruction, expression: str) -> bool:
    """copy-start/copy-done to or from host memory (memory space 5 in TPU layouts)."""
    return inst.opcode in ("copy-start", "copy-done") and _HOST_SPACE in expression


def host_copy_bytes(inst: Instruction) -> float:
    """The array a host copy moves (copy-start's result is (destination, source, context))."""
    return max((a.bytes for a in _arrays(inst.shape)), default=0.0)


def host_direction(expression: str) -> str:
    """'h2d' when the copy's source (operand) is in host memory, else 'd2h'."""
    operand = expression.split("copy-start(", 1)[-1] if "copy-start(" in expression else ""
    return "h2d" if _HOST_SPACE in operand else "d2h"


def tile_aligned(buffer: str, update: HloShape, full: HloShape) -> bool:
    """Whether a dynamic-update-slice writes whole tiles of the buffer's tiled layout
    ('{2,0,1:T(8,128)}': dims 2 and 0 are tiled by 128 and 8); an update narrower than
    a tile along a tiled dim is a strided partial-tile write."""
    match = re.search(r"\{([\d,]+):T\((\d+),(\d+)\)", buffer)
    if not match or len(update.dims) != len(full.dims):
        return True
    minor_to_major = [int(d) for d in match[1].split(",")]
    tiles = {minor_to_major[0]: int(match[3])}
    if len(minor_to_major) > 1:
        tiles[minor_to_major[1]] = int(match[2])
    return all(update.dims[d] % t == 0 or update.dims[d] == full.dims[d] for d, t in tiles.items())


def _dus(inst: Instruction, expression: str, xla_bytes: float, peak: Peaks) -> OpCost:
    full, update = inst.shape, inst.operand_shapes[1] if len(inst.operand_shapes) > 1 else None
    head = expression.split(" dynamic-update-slice(", 1)[0]
    if update is not None and not full.is_tuple and not tile_aligned(head, update, full):
        moved = 2 * full.bytes + update.bytes
        return OpCost(
            moved / peak.hbm,
            "HBM",
            "dynamic-update-slice of partial tiles: whole buffer read and written",
            bytes=moved,
        )
    return OpCost(
        xla_bytes / peak.hbm, "HBM", "dynamic-update-slice in place (XLA's bytes)", bytes=xla_bytes
    )


def attention_flops(inst: Instruction) -> float | None:
    """Dense FLOPs of a fused attention kernel from its q/k shapes: fwd 4*H*S*T*D (QK^T, PV),
    dq 6 (QK^T, dO V^T, dS K), dkv 8 (QK^T, dO V^T, P^T dO, dS^T Q), fused backward 10."""
    name = inst.name.lower()
    if inst.opcode != "custom-call" or not KERNEL_NAME.search(name):
        return None
    floats = [
        s
        for s in inst.operand_shapes
        if s is not None
        and not s.is_tuple
        and len(s.dims) >= 3
        and s.dtype in ("bf16", "f16", "f32", "f8e4m3fn", "f8e5m2")
    ]
    if len(floats) < 2:
        return None
    q, k = floats[0], floats[1]
    heads, seq, dim = math.prod(q.dims[:-2]), q.dims[-2], q.dims[-1]
    found = _PASS.search(name)
    factor = _PASS_FACTOR[found[1]] if found else 4
    return float(factor * heads * seq * k.dims[-2] * dim)


def _compute(flops: float, bytes_: float, peak: Peaks, rule: str) -> OpCost:
    mxu, hbm = flops / peak.flops, bytes_ / peak.hbm
    return OpCost(
        max(mxu, hbm), "compute" if mxu >= hbm and mxu > 0 else "HBM", rule, flops, bytes_
    )


def price(
    expression: str | None,
    category: str,
    flops: float,
    bytes_: float,
    chip: CostChip,
    peak: Peaks,
    devices: int = 1,
) -> OpCost:
    """One execution of one op on `chip` (see the module docstring for the rules)."""
    inst = parse(expression)
    category = str(category or "")
    if inst is None:
        return _compute(flops, bytes_, peak, "roofline of XLA's FLOPs and bytes (no HLO text)")
    if inst.moves_no_data:
        return OpCost(0.0, "none", "moves no data")
    if is_host_copy(inst, expression or ""):
        seconds = host_copy_bytes(inst) / chip.host_dma if inst.opcode == "copy-done" else 0.0
        return OpCost(
            seconds,
            "host DMA",
            f"host offload over PCIe at {chip.host_dma / 1e9:g} GB/s per direction",
            bytes=host_copy_bytes(inst),
        )
    if (
        inst.opcode in ("copy-start", "copy-done")
        or inst.name.startswith("async-collective-done")
        or inst.opcode.endswith("-done")
    ):
        return OpCost(
            0.0, "async (hidden)", "async on-chip copy or collective: hidden behind other ops"
        )
    kind = collective_kind(inst, category)
    if kind is not None:
        return _collective(inst, kind, chip, devices, peak)
    if inst.opcode == "dynamic-update-slice":
        return _dus(inst, expression or "", bytes_, peak)
    dense = attention_flops(inst)
    if dense is not None:
        moved = sum(a.bytes for a in _arrays(inst.shape)) + sum(
            a.bytes for s in inst.operand_shapes for a in _arrays(s)
        )
        return _compute(
            dense,
            moved,
            peak,
            "attention kernel: dense FLOPs and operand/result bytes from its shapes",
        )
    if "megacore" in category:
        both = Peaks(peak.flops * chip.cores, peak.hbm * chip.cores, peak.source)
        return _compute(flops, bytes_, both, "megacore fusion: both TensorCores")
    if inst.opcode == "custom-call" and not (flops or bytes_):
        moved = sum(a.bytes for a in _arrays(inst.shape)) + sum(
            a.bytes for s in inst.operand_shapes for a in _arrays(s)
        )
        return _compute(
            0.0,
            moved,
            peak,
            "custom call with no recorded cost (XLA's TPU online-softmax): operand and result "
            "bytes over HBM",
        )
    rule = (
        "custom call: FLOPs and bytes the kernel recorded"
        if inst.opcode == "custom-call"
        else "roofline of XLA's FLOPs and bytes, one TensorCore"
    )
    return _compute(flops, bytes_, peak, rule)
