"""TensorCore waste measured on the chip: each XLA op's device time from a TPU trace, the part of
it a named cause wastes, at the op's line. Pure pandas over the run's tables.

A TPU trace's "XLA Ops" line times every op the device ran; the HLO the trace carries (stage
`tpu_trace`) says what each op is. Where the HLO shows a cause, the cost is the op's measured
time times the share of it the cause takes on the chip (the model apportions, the measurement
sets the size):
- f32: a matmul with f32 operands runs 1, 3 or 6 bf16 passes (precision default/high/highest:
  XLA's FLOP count of the op says how many) and moves twice the bytes; in bf16 the op would take
  its ideal, max(real FLOPs / peak, bytes / 2 / HBM bandwidth): it saves its measured time less
  that, no more than 2.5x what its ideal loses (analyze/f32_waste). At default precision that
  is one pass: little waste when FLOPs alone bound it.
- head_dim: attention (analyze/attention: a pair of batched matmuls, scores and values, known
  by their shapes whatever wrote them) whose head dim is narrower than the MXU edge (head_dim 64
  on a 128-wide MXU). With head_dim at the edge and as many fewer heads (the same model width)
  the score tensors shrink by head_dim/edge and the matmuls' padded passes go: the attention's
  ops (its batched matmuls and every op that makes or reads a score tensor: softmax, masks,
  dropout, XLA's online-softmax custom call) are taken to keep head_dim/edge of their time. Its
  projections do not change. An estimate: what the attention keeps at head_dim 128 is not in a
  trace at 64. On a v5e (docs/tpu.md) four training programs' attention kept 0.34-0.42 (the
  card 76-89% of the truth: XLA kept the halved scores in on-chip memory, the trace's memory
  space S(1), where the head_dim 64 ones sat in HBM), and attention timed alone
  (benchmarks/tpu_attention_kept.py) kept 0.2-0.8 in training across shapes and
  implementations, more than 1 in jax.nn.dot_product_attention's forward at seq 511 and below.
  The attention's ops are its card's alone when it computes in bf16: f32 matmuls among them
  (`jax.nn.dot_product_attention` takes its scores' gradient in f32) are not counted again as
  f32 waste, and the fix that removes the narrow head's cost (a Pallas attention kernel)
  removes theirs. An attention computed in f32 (most of its matmul FLOPs on f32 operands: the
  model's dtype) loses to both: its ops' f32 share is the f32 card's, and the narrow head
  keeps its share of what is left (a ViT in f32 on a v5e: docs/tpu.md).
- lane_writes: in-place writes one element wide along their array's lane axis (a KV cache
  written a position a token where XLA put its time axis in the lanes: analyze/lane_writes).
- relayouts: the step's arguments copied to another layout on their way in and its results
  on their way out (analyze/relayouts): the copies' whole measured time.
- random_bits: ops holding threefry's hashing (analyze/random_bits): their time less their
  ideal, the most other bits could gain.
- off_peak: ops that run many times their ideal for no cause the HLO names (analyze/slow_ops):
  their time less their ideal, the most they could gain.
An op's time is its own: a loop's event less the body's ops nested in it (analyze/nested_ops).
Dims that are not multiples of the edge are not a measured cost: the MXU pads them as padding
by hand would (a 1000/3000 MLP ran faster than its 1024/3072 twin on the v5e).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tpuscope.analyze.attention import computed_in_f32, narrow_attention, narrow_kernels
from tpuscope.analyze.chips import Chip
from tpuscope.analyze.f32_waste import f32_waste
from tpuscope.analyze.lane_writes import array_dims, bytes_a_step, lane_write_cost, lane_writes
from tpuscope.analyze.nested_ops import self_times
from tpuscope.analyze.random_bits import random_bits_waste
from tpuscope.analyze.relayouts import boundary_relayouts
from tpuscope.analyze.slow_ops import slow_ops
from tpuscope.analyze.step_graph import step_graph_devices, step_graph_runs
from tpuscope.analyze.waste import MeasuredWaste, trace_stage, waste
from tpuscope.parse.xplane_meta import MODULE_LINE

OP_LINE = "XLA Ops"
MIN_SHARE = 0.01  # of the measured device time per step: a cause under it is no card
SLOW_MIN_SHARE = 0.05  # ops far off the peak whose cause the HLO does not name
_MATMUL = ("dot", "convolution")
_SCOPE_SKIP = ("jit(", "pjit(", "transpose(", "jvp(", "vmap(", "remat(", "checkpoint(")


def measured_ops(events: pd.DataFrame, steps: list[int] | None = None) -> tuple[pd.DataFrame, int]:
    """(per (module, op): device time per step, XLA's FLOPs and bytes, its source line; the
    number of steps that is). `steps`: the traced steps judged (None: the whole trace). The
    count is the steps times the devices that ran them, counted by the step's own graph
    (analyze/step_graph.py): divided by it, a time summed over the devices is one device's.
    The frame's `attrs["devices"]` says how many devices that is."""
    if events.empty or "line" not in events:
        return pd.DataFrame(), 0
    lines = events["line"].astype(str)
    chosen = events["step"].isin(steps) if steps is not None and "step" in events else True
    modules = events[(lines == MODULE_LINE) & chosen]
    ops = events[lines == OP_LINE]
    if not modules.empty:  # the ops inside those module runs, wherever the windows put them
        ops = ops[_inside(ops, modules)]
    elif steps is not None and "step" in ops:
        ops = ops[ops["step"].isin(steps)]
    if ops.empty:
        return pd.DataFrame(), 0
    count = step_graph_runs(modules) if not modules.empty else len(steps or [1])
    ops = ops.assign(self_ns=self_times(ops))
    grouped = ops.groupby(["hlo_module", "hlo_op"], sort=False, dropna=False)
    per = grouped.agg(
        time_ns=("self_ns", "sum"),
        flops=("flops", "max"),
        bytes=("bytes_accessed", "max"),
        runs=("dur_ns", "size"),
    ).reset_index()
    per["source"] = grouped["source"].agg(_mode).to_numpy()
    per["time_s"] = per["time_ns"] / 1e9 / max(count, 1)
    per["runs_per_step"] = per["runs"] / max(count, 1)
    per.attrs["devices"] = step_graph_devices(modules) if not modules.empty else 1
    return per, max(count, 1)


def _inside(ops: pd.DataFrame, modules: pd.DataFrame) -> np.ndarray:
    """Which ops start inside one of the module runs of their own device (plane): on one
    TensorCore runs do not overlap; several devices' do."""
    keep = np.zeros(len(ops), bool)
    planes = ops["plane"].astype(str).to_numpy() if "plane" in ops else np.zeros(len(ops), str)
    module_planes = (
        modules["plane"].astype(str).to_numpy()
        if "plane" in modules
        else np.zeros(len(modules), str)
    )
    starts = ops["start_ns"].to_numpy()
    for plane in np.unique(module_planes):
        runs = modules[module_planes == plane]
        order = np.argsort(runs["start_ns"].to_numpy())
        begin = runs["start_ns"].to_numpy()[order]
        end = begin + runs["dur_ns"].to_numpy()[order]
        mine = planes == plane
        at = np.searchsorted(begin, starts[mine], side="right") - 1
        keep[mine] = (at >= 0) & (starts[mine] <= end[np.clip(at, 0, None)])
    return keep


def _mode(values: pd.Series) -> str | None:
    known = values.dropna()
    return str(known.mode().iloc[0]) if not known.empty else None


def _path(op_name: object) -> str:
    """An op's name path without JAX's transforms ('jit(f)/transpose(jvp(M))/Block_0/x/exp'
    -> 'Block_0/x/exp')."""
    return "/".join(p for p in str(op_name).split("/") if p and not p.startswith(_SCOPE_SKIP))


def _scope(op_name: object) -> str:
    """The name scope of a matmul ('.../Block_0/Attn_0/...qhd,...khd->...hqk/dot_general' ->
    'Block_0/Attn_0'): its path without its einsum and primitive."""
    parts = _path(op_name).split("/")
    return "/".join(parts[:-2]) if len(parts) > 2 else ""


def _matmuls(hlo_ops: pd.DataFrame) -> pd.DataFrame:
    """The matmuls of the trace's HLO with their parent op (the fusion the trace times)."""
    if hlo_ops.empty:
        return hlo_ops
    ops = trace_stage(hlo_ops)
    dots = ops[ops["opcode"].isin(_MATMUL)].copy()
    dots["parent"] = dots["fusion"].where(dots["fusion"].notna(), dots["name"])
    return dots


def head_dim_waste(
    per: pd.DataFrame, dots: pd.DataFrame, hlo_ops: pd.DataFrame, chip: Chip
) -> MeasuredWaste | None:
    """Attention whose head_dim is narrower than the MXU: see the module doc. Ops are known by
    (module, op): two modules' ops of one name are not one op."""
    if hlo_ops.empty:
        return None
    top = trace_stage(hlo_ops)
    heads = narrow_kernels(top[top["fusion"].isna()], chip.mxu)  # {op: its head_dim}
    kernels = set(heads)
    found = narrow_attention(dots, chip.mxu) if not dots.empty else None
    if found is not None:
        ops = set(zip(found.matmuls["module"], found.matmuls["parent"], strict=True))
        ops |= _holding(top, found.score_elements, found.score_dims)
        heads.update(dict.fromkeys(ops, found.head_dim))
    keys = pd.Series(list(zip(per["hlo_module"], per["hlo_op"], strict=True)), index=per.index)
    ops = per[keys.isin(set(heads))].copy()
    if ops.empty:
        return None
    d = keys[ops.index].map(heads)
    ops["lost_s"] = ops["time_s"] * (1 - d / chip.mxu)
    names = found.matmuls["op_name"].map(_scope) if found is not None else pd.Series(dtype=str)
    return waste(
        "head_dim",
        ops,
        {
            "head_dim": int(d.min()),
            "count": int(len(found.matmuls)) if found is not None else 0,
            "kernels": int(keys[ops.index].isin(kernels).sum()),
            "scopes": sorted({s for s in names if s})[:4],
            "score_elements": found.score_elements if found is not None else 0,
            "f32": found is not None and computed_in_f32(found.matmuls),
        },
    )


def slow_waste(
    per: pd.DataFrame, hlo_ops: pd.DataFrame, chip: Chip, device_s: float
) -> MeasuredWaste | None:
    """Ops far off the chip's peak (analyze/slow_ops): their time less their ideal, where it
    is SLOW_MIN_SHARE of the device step or more (a cause the HLO does not name must be large
    to be a card)."""
    ops = slow_ops(per, trace_stage(hlo_ops), chip) if not hlo_ops.empty else pd.DataFrame()
    if ops.empty or ops["lost_s"].sum() < SLOW_MIN_SHARE * device_s:
        return None
    first = ops.iloc[0]
    return waste(
        "off_peak",
        ops,
        {
            "count": int(len(ops)),
            "what": str(first["what"]),
            "ratio": float(first["ratio"]),
            "run_s": float(first["time_s"] / first["runs_per_step"]),
            "ideal_run_s": float(first["ideal_s"] / first["runs_per_step"]),
        },
    )


def lane_write_waste(per: pd.DataFrame, hlo_ops: pd.DataFrame, chip: Chip) -> MeasuredWaste | None:
    """In-place writes across the lanes: their measured time less their bytes at HBM speed."""
    writes = lane_writes(trace_stage(hlo_ops)) if not hlo_ops.empty else pd.DataFrame()
    if writes.empty:
        return None
    ops = lane_write_cost(per, writes, chip)
    if ops.empty:
        return None
    first = ops.iloc[0]  # the costliest write names the card
    dims = array_dims(first["shape"])
    return waste(
        "lane_writes",
        ops,
        {
            "count": int(len(ops)),
            "shape": str(first["shape"]),
            "shapes": sorted(set(map(str, ops["shape"]))),
            "update": str(first["update"]),
            "lane_dim": int(first["lane"]),
            "lane_size": dims[int(first["lane"])],
            "last_size": dims[-1],
            "lane_is_last": int(first["lane"]) == len(dims) - 1,
            "bytes": float(ops["bytes_a_step"].sum()),
        },
    )


def relayout_waste(
    per: pd.DataFrame, hlo_ops: pd.DataFrame, hlo_modules: pd.DataFrame
) -> MeasuredWaste | None:
    """The step's arrays copied between layouts at its boundary: the copies' measured time."""
    copies = (
        boundary_relayouts(trace_stage(hlo_ops), trace_stage(hlo_modules))
        if not hlo_ops.empty
        else pd.DataFrame()
    )
    if copies.empty:
        return None
    ops = per.merge(copies, left_on=["hlo_module", "hlo_op"], right_on=["module", "parent"])
    if ops.empty:
        return None
    ops["lost_s"] = ops["time_s"]
    ops = ops.sort_values("lost_s", ascending=False)
    arguments = ops[ops["side"] == "argument"]
    return waste(
        "relayouts",
        ops,
        {
            "count": int(len(ops)),
            "arguments": int(len(arguments)),
            "results": int((ops["side"] == "result").sum()),
            "names": list(arguments["array"])[:4],
            "shape": str(ops["shape"].iloc[0]),
            "shapes": sorted(set(map(str, ops["shape"]))),
            "layouts": str(ops["layouts"].iloc[0]),
            "bytes": float(bytes_a_step(ops).sum()),
        },
    )


def _holding(top: pd.DataFrame, elements: int, dims: tuple[int, int]) -> set[tuple[str, str]]:
    """(module, top-level op) of every op that makes or reads a score tensor (softmax, masks,
    dropout over them), its fused instructions included: an array of the scores' element count
    whose dims hold their two lengths."""
    shapes = top["shape"].fillna("").astype(str)
    hits = {shape: _is_scores(str(shape), elements, dims) for shape in shapes.unique()}
    holds = top[shapes.map(hits).astype(bool)]
    parents = holds["fusion"].where(holds["fusion"].notna(), holds["name"])
    return set(zip(holds["module"], parents, strict=True)) | _reading(top, holds)


def _reading(top: pd.DataFrame, holds: pd.DataFrame) -> set[tuple[str, str]]:
    """(module, op) of the top-level ops that read a top-level score tensor without making one:
    a custom call has no fused parameters to show its operands' shapes (XLA's `online-softmax`
    on a TPU reads the scores and writes the attention's output)."""
    unfused = holds[holds["fusion"].isna()]
    made = set(zip(unfused["module"], unfused["name"], strict=True))
    if not made or "operands" not in top:
        return set()
    outer = top[top["fusion"].isna()]
    return {
        (module, name)
        for module, name, operands in zip(
            outer["module"], outer["name"], outer["operands"], strict=True
        )
        if operands is not None and any((module, o) in made for o in operands)
    }


def _is_scores(shape: str, elements: int, dims: tuple[int, int]) -> bool:
    """Whether one array of `shape` (a tuple's too) has `elements` elements and both `dims`."""
    for text in re.findall(r"\[([\d,]*)\]", shape):
        sizes = [int(d) for d in text.split(",") if d]
        rest = list(sizes)
        if int(np.prod(sizes or [1])) != elements:
            continue
        for d in dims:
            if d not in rest:
                break
            rest.remove(d)
        else:
            return True
    return False


def measured_waste(
    events: pd.DataFrame,
    hlo_ops: pd.DataFrame,
    chip: Chip,
    steps: list[int] | None = None,
    hlo_modules: pd.DataFrame | None = None,
) -> tuple[list[MeasuredWaste], dict]:
    """(each cause's measured waste per traced step, what was measured: device time per step,
    steps, ops); empty without device ops or without the trace's HLO. An op's time is one
    cause's, claimed in this order: the attention's ops (their f32 matmuls too), the
    boundary's copies, the writes across the lanes and the random bits (each where it is a
    card), the ops far off the peak; f32 takes what is left (an attention computed in f32 shares its ops)."""
    per, count = measured_ops(events, steps)
    if per.empty:
        return [], {}
    figures = {
        "device_s_per_step": float(per["time_s"].sum()),
        "traced_steps": count,  # steps x devices: the divisor of a time summed over devices
        "devices": per.attrs.get("devices", 1),
        "ops": len(per),
    }
    dots = _matmuls(hlo_ops)
    heads = head_dim_waste(per, dots, hlo_ops, chip)
    shared = heads is not None and heads.info.get("f32")  # an f32 attention: both causes
    outside = _unclaimed(per, heads, "hlo_module", "hlo_op")  # ops not the attention's
    device_s = figures["device_s_per_step"]
    modules = pd.DataFrame() if hlo_modules is None else hlo_modules
    relayouts = _shown(relayout_waste(outside, hlo_ops, modules), device_s)
    outside = _unclaimed(outside, relayouts, "hlo_module", "hlo_op")
    lanes = _shown(lane_write_waste(outside, hlo_ops, chip), device_s)
    outside = _unclaimed(outside, lanes, "hlo_module", "hlo_op")
    bits = _shown(random_bits_waste(outside, hlo_ops, chip), device_s)
    outside = _unclaimed(outside, bits, "hlo_module", "hlo_op")
    slow = slow_waste(outside, hlo_ops, chip, device_s)
    outside = _unclaimed(outside, slow, "hlo_module", "hlo_op")
    free = outside
    if shared:  # the attention's ops are the f32 card's too
        free = per
        for other in (relayouts, lanes, bits, slow):
            free = _unclaimed(free, other, "hlo_module", "hlo_op")
    dots = dots if shared else _unclaimed(dots, heads, "module", "parent")
    f32 = f32_waste(free, dots, hlo_ops, chip) if not dots.empty else None
    if shared and heads is not None and f32 is not None and f32.lost_s >= MIN_SHARE * device_s:
        heads = _after_f32(heads, f32)  # an f32 share too small to be a card stays the attention's
    found = [f32, heads, lanes, relayouts, bits, slow]
    return [w for w in found if w is not None], figures


def _after_f32(heads: MeasuredWaste, f32: MeasuredWaste) -> MeasuredWaste | None:
    """An attention computed in f32 loses to both causes: its ops' f32 share is the f32 card's
    (what bf16 saves), and the narrow head keeps its share of what is left (what head_dim 128
    saves after that), so the two cards add up to no more than the ops' time. On a v5e a ViT
    computed in f32 lost 4.96 ms a step in its attention's ops to f32 (8.43 against 3.47 ms in
    its bf16 twin, docs/tpu.md); with the attention's ops the head_dim card's alone, the f32
    card had said 1.66 ms of the 7.57 ms that bf16 saved."""
    ops = heads.ops.copy()
    taken = f32.ops.groupby(["hlo_module", "hlo_op"])["lost_s"].sum()
    keys = pd.MultiIndex.from_frame(ops[["hlo_module", "hlo_op"]])
    before = taken.reindex(keys).fillna(0.0).to_numpy(float)
    kept = (ops["lost_s"] / ops["time_s"].where(ops["time_s"] > 0)).fillna(0.0)
    ops["lost_s"] = (ops["time_s"] - before).clip(lower=0) * kept
    return waste(heads.kind, ops, {**heads.info, "after_f32_s": float(before.sum())})


def _shown(waste: MeasuredWaste | None, device_s: float) -> MeasuredWaste | None:
    """The waste where it is a card (MIN_SHARE of the device step): only a card claims ops."""
    return waste if waste is not None and waste.lost_s >= MIN_SHARE * device_s else None


def _unclaimed(
    frame: pd.DataFrame, waste: MeasuredWaste | None, module: str, op: str
) -> pd.DataFrame:
    """The rows of `frame` whose (module, op) is not one of the waste's ops."""
    if waste is None or frame.empty:
        return frame
    claimed = set(zip(waste.ops["hlo_module"], waste.ops["hlo_op"], strict=True))
    return frame[[key not in claimed for key in zip(frame[module], frame[op], strict=True)]]
