"""Ops far off the chip's peak: an op whose measured time is many times what its FLOPs at
peak and its bytes at HBM speed need, long enough that its fixed cost per run does not explain
it. Pure pandas over the run's measured ops (analyze/op_time) and the trace's HLO.

Why a rule of its own: no named cause in the HLO (f32 passes, narrow heads, layouts) predicts
such an op's time, and a model that scales its measured time by a cause's share misses it both
ways. On a v5e, JAX's differentially_private_sgd example (per-example gradients by `vmap` of
`grad` over a stax conv net) spent 3.24 ms of its 3.39 ms step in one fusion, a convolution
computing per-example weight gradients with an f32 result (its operands bf16, as XLA converts
f32 operands at default precision), at 262x its ideal; its bf16 twin ran the same convolution
with a bf16 result in 28 us, the step in 0.164 ms (docs/tpu.md). What the op loses is measured
against its ideal: the most it could gain, not what a given fix gains.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tpuscope.analyze.chips import Chip

# the cost table's (docs/tpu.md) ops under ~20 us a run are bound by their fixed costs; those
# of 20 us and more ran within 2.2x their ideal
LONG_OP_S = 20e-6
FAR = 10.0  # measured time over ideal
_NOT_COMPUTE = {  # ops whose time is not their own FLOPs and bytes: control, transfers, kernels
    "while", "conditional", "call", "custom-call", "send", "recv", "send-done", "recv-done",
    "infeed", "outfeed", "all-reduce", "all-gather", "reduce-scatter", "all-to-all",
    "collective-permute",
}  # fmt: skip


def slow_ops(per: pd.DataFrame, top: pd.DataFrame, chip: Chip) -> pd.DataFrame:
    """The measured ops (analyze/op_time.measured_ops rows) that run FAR or more times their
    ideal and LONG_OP_S or longer a run, with `ideal_s` (per step), `lost_s` (their time less
    it), `ratio`, and `what` (the opcodes inside, the result's shape); `top` is the trace's
    top-level HLO ops and their fused instructions."""
    if per.empty or top.empty:
        return per.iloc[0:0]
    runs = per["runs_per_step"].to_numpy(float)
    counted = per["flops"].notna().to_numpy()  # an op without XLA's FLOPs has no ideal here
    ideal = np.maximum(
        per["flops"].fillna(0).to_numpy(float) / chip.peak_flops,
        per["bytes"].fillna(0).to_numpy(float) / chip.hbm_bandwidth,
    )
    time = per["time_s"].to_numpy(float) / np.maximum(runs, 1e-12)
    outer = top[top["fusion"].isna()]
    opcode = dict(
        zip(zip(outer["module"], outer["name"], strict=True), outer["opcode"], strict=True)
    )
    keys = list(zip(per["hlo_module"], per["hlo_op"], strict=True))
    computes = np.array([k in opcode and _computes(str(opcode[k])) for k in keys], dtype=bool)
    far = computes & counted & (ideal > 0) & (time >= LONG_OP_S) & (time >= FAR * ideal)
    found = per[far].copy()
    found["ideal_s"] = ideal[far] * runs[far]
    found["lost_s"] = found["time_s"] - found["ideal_s"]
    found["ratio"] = time[far] / ideal[far]
    found["what"] = [
        _what(top, module, op)
        for module, op in zip(found["hlo_module"], found["hlo_op"], strict=True)
    ]
    return found.sort_values("lost_s", ascending=False)


def _computes(opcode: str) -> bool:
    """Whether an op's time is its own work: not control, a transfer, a kernel, or the start
    or wait of an asynchronous op (`slice-done` waits for a copy that ran beside others)."""
    return opcode not in _NOT_COMPUTE and not opcode.endswith(("-start", "-done"))


def _what(top: pd.DataFrame, module: str, op: str) -> str:
    """'convolution f32[256,4,4,16,32] (operands bf16) in a fusion with multiply, reduce': the
    op's costliest kind of instruction, its result and operand types, what is fused with it."""
    mine = top[(top["module"] == module) & ((top["name"] == op) | (top["fusion"] == op))]
    if mine.empty:
        return "op"
    inner = mine[mine["fusion"] == op] if (mine["fusion"] == op).any() else mine
    codes = [str(c) for c in inner["opcode"] if str(c) not in ("parameter", "constant", "tuple")]
    main = next((c for c in ("convolution", "dot", "reduce-window", "scatter", "gather", "sort")
                 if c in codes), codes[0] if codes else "op")  # fmt: skip
    row = inner[inner["opcode"].astype(str) == main].iloc[0] if main in codes else mine.iloc[0]
    dtypes = (row.get("lhs_dtype"), row.get("rhs_dtype"))
    operands = sorted({str(t) for t in dtypes if t is not None and not pd.isna(t)})
    others = sorted(set(codes) - {main, "bitcast", "copy", "convert", "get-tuple-element"})
    return (
        f"{main} {row['shape']}"
        + (f" (operands {'/'.join(operands)})" if operands else "")
        + (f" in a fusion with {', '.join(others[:4])}" if others else "")
    )
