"""The f32 cause, measured: matmuls with f32 operands and the ops that move their f32
activations, each op's measured time less its ideal in bf16, bounded by what its ideal loses
(bounded_saving; analyze/op_time
names the cause's place among the others; analyze/f32_traffic finds the activations)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from tpuscope.analyze.chips import Chip
from tpuscope.analyze.f32_traffic import f32_activation_shares
from tpuscope.analyze.random_bits import random_bits_ops
from tpuscope.analyze.waste import MeasuredWaste, op_keys, trace_stage, waste

NEAR_ROOFLINE = 2.5  # an op saves at most this x what its ideal loses (bounded_saving)
SHORTEST_OP_S = 1e-6  # a run shorter than this is its fixed cost
RIDGE_P = 6  # FLOPs and bytes combined as a 6-norm (bounded_saving)


def f32_waste(
    per: pd.DataFrame, dots: pd.DataFrame, hlo_ops: pd.DataFrame, chip: Chip
) -> MeasuredWaste | None:
    """Matmul ops with f32 operands, and the ops around them that move their f32 activations
    (half those bytes in bf16): each op's saving by bounded_saving."""
    f32 = dots[(dots["lhs_dtype"] == "f32") | (dots["rhs_dtype"] == "f32")]
    if f32.empty:
        return None
    real = f32.groupby(["module", "parent"])["flops"].sum()
    mxu = _mxu_ops(dots)
    rng = random_bits_ops(hlo_ops)  # left out, and said so on the card
    f32 = f32[~op_keys(f32, "module", "parent").isin(rng)]
    passes = f32.groupby(["module", "parent"])["precision"].agg(lambda p: sorted(set(map(str, p))))
    ops = per.merge(
        real.rename("real_flops").reset_index(),
        left_on=["hlo_module", "hlo_op"],
        right_on=["module", "parent"],
    )
    shares = f32_activation_shares(
        trace_stage(hlo_ops), set(zip(ops["hlo_module"], ops["hlo_op"], strict=True))
    )
    made = op_keys(ops).isin(rng)
    bits, ops = ops[made], ops[~made]
    if ops.empty:
        return None
    keys = op_keys(ops)
    # of its bytes, halved in bf16: its f32 activations' share (all, where no dataflow is known)
    halved = keys.map(shares).fillna(0.0 if shares else 1.0).to_numpy(float) / 2
    flops = np.maximum(ops["flops"].fillna(0).to_numpy(float), ops["real_flops"].to_numpy(float))
    bytes_ = ops["bytes"].fillna(0).to_numpy(float) / chip.hbm_bandwidth
    real = ops["real_flops"].to_numpy(float) / chip.peak_flops
    kept = ~keys.isin(mxu).to_numpy(bool)  # a depthwise convolution: no MXU work
    ops["lost_s"] = bounded_saving(
        ops, (flops / chip.peak_flops, real), (bytes_, bytes_ * (1 - halved)), kept
    )
    around = _around(per, shares, set(keys) | set(op_keys(bits)), chip, mxu)
    made = op_keys(around).isin(rng)
    bits, around = pd.concat([bits, around[made]], ignore_index=True), around[~made]
    precisions = sorted({p for values in passes for p in values})
    info = {"precision": precisions, "count": int(len(f32)), "ops_around": len(around)}
    if not around.empty:
        info["around_lost_s"] = float(around["lost_s"].sum())
    if not bits.empty:
        info.update(random_bits_ops=len(bits), random_bits_s=float(bits["time_s"].sum()))
    kernels_s, kernels = f32_kernels(per, hlo_ops)
    if kernels:
        info.update(f32_kernels_s=kernels_s, f32_kernels=kernels)
    return waste("f32", pd.concat([ops, around], ignore_index=True), info)


def f32_kernels(per: pd.DataFrame, hlo_ops: pd.DataFrame) -> tuple[float, list[str]]:
    """The Pallas kernels (custom calls JAX names `pallas_call`) whose floating-point inputs
    are all f32: their measured time a step and their names. Their matmuls run inside the
    kernel, where neither the HLO nor the trace counts FLOPs, so what bf16 would save there is
    not known: Keras's float32 transformer on a v5e spent 13 ms of its 40 ms step in splash
    attention kernels in f32, about 7 ms more than its mixed_bfloat16 twin did in the same
    kernels (docs/tpu.md). By their inputs, not their results: a bf16 splash kernel returns
    f32 softmax statistics too."""
    stage = trace_stage(hlo_ops)
    if stage.empty or not {"op_name", "operands", "dtype"} <= set(stage.columns):
        return 0.0, []
    kernels = stage[
        (stage["opcode"] == "custom-call")
        & stage["op_name"].astype(str).str.contains("pallas_call", regex=False)
    ]
    dtypes = stage.set_index(["module", "name"])["dtype"].astype(str)
    dtypes = dtypes[~dtypes.index.duplicated()]
    chosen = [
        (module, name)
        for module, name, operands in zip(
            kernels["module"], kernels["name"], kernels["operands"], strict=True
        )
        if _all_f32(module, operands, dtypes)
    ]
    hit = per[
        pd.Series(list(zip(per["hlo_module"], per["hlo_op"], strict=True)))
        .isin(set(chosen))
        .to_numpy()
    ]
    return float(hit["time_s"].sum()), sorted(set(hit["hlo_op"].astype(str)))


def _all_f32(module: str, operands: Iterable[str] | None, dtypes: pd.Series) -> bool:
    """Whether a kernel's floating-point operands (found in its module) are f32, and it has any."""
    floats = [
        dtypes.get((module, name))
        for name in (operands if operands is not None else [])
        if dtypes.get((module, name)) in _FLOATS
    ]
    return bool(floats) and all(d == "f32" for d in floats)


_FLOATS = {"f32", "bf16", "f16", "f64", "f8e4m3fn", "f8e5m2"}


def _mxu_ops(dots: pd.DataFrame) -> set[tuple[str, str]]:
    """(module, top-level op) of the ops with MXU work: a matmul with a matrix on both sides,
    more than one row and one column a group. A matrix-vector product has none (a depthwise
    convolution: one output feature a group, n = 1): the VPU and HBM bound it as they bound
    an elementwise op."""
    matrix = dots[(dots["n"].fillna(2) > 1) & (dots["m"].fillna(2) > 1)]
    return set(zip(matrix["module"], matrix["parent"], strict=True))


def _around(
    per: pd.DataFrame,
    shares: dict[tuple[str, str], float],
    matmuls: set[tuple[str, str]],
    chip: Chip,
    mxu: set[tuple[str, str]],
) -> pd.DataFrame:
    """The ops that move the f32 matmuls' f32 activations (analyze/f32_traffic): in bf16 they
    would move half those bytes."""
    keys = pd.Series(list(zip(per["hlo_module"], per["hlo_op"], strict=True)), index=per.index)
    ops = per[keys.isin(set(shares) - matmuls)].copy()
    halved = keys[ops.index].map(shares).astype(float).to_numpy() / 2
    flops = ops["flops"].fillna(0).to_numpy(float) / chip.peak_flops
    bytes_ = ops["bytes"].fillna(0).to_numpy(float) / chip.hbm_bandwidth
    kept = ~keys[ops.index].isin(mxu).to_numpy(bool)
    ops["lost_s"] = bounded_saving(ops, (flops, flops), (bytes_, bytes_ * (1 - halved)), kept)
    return ops


def bounded_saving(
    ops: pd.DataFrame,
    flops: tuple[np.ndarray, np.ndarray],
    bytes_: tuple[np.ndarray, np.ndarray],
    kept: np.ndarray | bool = False,
) -> np.ndarray:
    """Per step, what each op saves when its FLOPs at peak and its bytes at HBM speed, per run
    in seconds, go from their first to their second value: its measured time less its ideal
    then, at most NEAR_ROOFLINE x what its ideal loses, and nothing for a run shorter than
    SHORTEST_OP_S (its fixed cost). An ideal is the smooth maximum of the two times (_ideal).

    Why its time less the new ideal, not its time x the share its ideal loses: on a v5e the
    bf16 twins' ops ran at their ideal where the f32 ones did not. A ViT's f32 softmax over
    f32[64,12,197,197] scores took 513 us for a 340 us byte ideal, its bf16 twin 197 us for
    194 us: the proportional share said 220 us saved, the twin saved 316. Why the bound: an
    op far off its ideal is bound by something the dtype does not change (JAX's mnist_vae
    example, a fori_loop of 0.1-4 us ops, ran 44.53 ms an epoch in f32 and in bf16); it caps
    an op whose bytes halve from 1.75x its f32 ideal on. An op faster than its f32 ideal (XLA's
    byte count over what it moves) saves less than its share would say, nothing at or under
    its bf16 ideal: in Gemma's step such ops hold 36 of 103 ms. Against the bare twins of six
    committed f32 programs (two MLPs, a ResNet-18, flax's ResNet-50, a ViT, Gemma; tests/tpu/)
    the cards were 0.92-1.06 of what bf16 saved, the small MLP's 70 us against 50 (1.4x); with
    the proportional share they were 0.66-1.01 (that MLP 1.1x).

    `kept`: ops with no MXU work (elementwise, reductions, pooling, copies, a depthwise
    convolution's matrix-vector products) keep their pace in bf16, their time over their ideal
    (at least 1, so one at or under its bf16 ideal still saves nothing): only the matmuls' f32
    passes are overhead that bf16 removes. In Keras's Xception (keras-io's image classifier from
    scratch, 7 December) batch norm, pooling and the depthwise convolutions ran 1.1-1.45x their
    ideal in f32 and in its mixed_bfloat16 twin alike: taking the twin at their ideal put the
    card at 44.35 ms where the twin saved 37.47 ms of device time (1.18), keeping their pace at
    37.07 (0.99). The ViT's f32 softmax above is the case this gets wrong (1.51x its ideal in
    f32, 1.02x in bf16: it takes the proportional share there). With it the other programs'
    cards are 0.91-0.99 of their bare twins' saving (flax's ResNet-50 40.06 of 43.76 ms, Gemma
    42.12 of 46.53, the ViT 6.95 of 7.57, the ResNet-18 9.45 of 9.56, the MLP at precision
    highest 7.94 of 8.10), the small MLP's 70 us still 1.4x."""
    runs = ops["runs_per_step"].to_numpy(float) if "runs_per_step" in ops else 1.0
    time = ops["time_s"].to_numpy(float) / runs
    now, then = _ideal(flops[0], bytes_[0]), _ideal(flops[1], bytes_[1])
    with np.errstate(divide="ignore", invalid="ignore"):
        pace = np.where(now > 0, np.maximum(time / now, 1.0), 1.0)  # never under its ideal
    twin = np.where(kept, then * pace, then)  # `kept`: an op without MXU work keeps its pace
    saved = np.minimum(time - twin, NEAR_ROOFLINE * np.clip(now - then, 0, None))
    return np.where(time >= SHORTEST_OP_S, np.clip(saved, 0, None), 0.0) * runs


def _ideal(flops_s: np.ndarray, bytes_s: np.ndarray) -> np.ndarray:
    """An op's ideal time from its FLOPs' and its bytes' times: their smooth maximum (RIDGE_P),
    at the ridge (the two equal) 12% over either, as an op that both nearly bound takes longer
    than either alone (a ViT's MLP matmuls, 304 us of FLOPs and 248 us of f32 bytes, took 526
    us in f32 and 350 us in bf16). Computed in float64 (float32 loses times under 1e-6 s)."""
    flops_s, bytes_s = np.asarray(flops_s, np.float64), np.asarray(bytes_s, np.float64)
    return (flops_s**RIDGE_P + bytes_s**RIDGE_P) ** (1 / RIDGE_P)
