"""The f32 cause, measured: matmuls with f32 operands and the ops that move their f32
activations, each op's measured time against what bf16 would save of its ideal (analyze/op_time
names the cause's place among the others; analyze/f32_traffic finds the activations)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tpuscope.analyze.chips import Chip
from tpuscope.analyze.f32_traffic import f32_activation_shares
from tpuscope.analyze.waste import MeasuredWaste, trace_stage, waste

NEAR_ROOFLINE = 2.5  # an op slower than this x its ideal is bound by something else
SHORTEST_OP_S = 1e-6  # a run shorter than this is its fixed cost


def f32_waste(
    per: pd.DataFrame, dots: pd.DataFrame, hlo_ops: pd.DataFrame, chip: Chip
) -> MeasuredWaste | None:
    """Matmul ops with f32 operands: measured time x (1 - their bf16 time / their time now);
    the ops around them that move their f32 activations: time x the bytes bf16 would save."""
    f32 = dots[(dots["lhs_dtype"] == "f32") | (dots["rhs_dtype"] == "f32")]
    if f32.empty:
        return None
    real = f32.groupby(["module", "parent"])["flops"].sum()
    passes = f32.groupby(["module", "parent"])["precision"].agg(lambda p: sorted(set(map(str, p))))
    ops = per.merge(
        real.rename("real_flops").reset_index(),
        left_on=["hlo_module", "hlo_op"],
        right_on=["module", "parent"],
    )
    if ops.empty:
        return None
    shares = f32_activation_shares(
        trace_stage(hlo_ops), set(zip(ops["hlo_module"], ops["hlo_op"], strict=True))
    )
    keys = pd.Series(list(zip(ops["hlo_module"], ops["hlo_op"], strict=True)), index=ops.index)
    # of its bytes, halved in bf16: its f32 activations' share (all, where no dataflow is known)
    halved = keys.map(shares).fillna(0.0 if shares else 1.0).to_numpy(float) / 2
    flops = np.maximum(ops["flops"].fillna(0).to_numpy(float), ops["real_flops"].to_numpy(float))
    bytes_ = ops["bytes"].fillna(0).to_numpy(float) / chip.hbm_bandwidth
    real = ops["real_flops"].to_numpy(float) / chip.peak_flops
    ops["lost_s"] = bounded_saving(
        ops, (flops / chip.peak_flops, real), (bytes_, bytes_ * (1 - halved))
    )
    around = _around(per, shares, set(keys), chip)
    precisions = sorted({p for values in passes for p in values})
    info = {"precision": precisions, "count": int(len(f32)), "ops_around": len(around)}
    if not around.empty:
        info["around_lost_s"] = float(around["lost_s"].sum())
    return waste("f32", pd.concat([ops, around], ignore_index=True), info)


def _around(
    per: pd.DataFrame,
    shares: dict[tuple[str, str], float],
    matmuls: set[tuple[str, str]],
    chip: Chip,
) -> pd.DataFrame:
    """The ops that move the f32 matmuls' f32 activations (analyze/f32_traffic): in bf16 they
    would move half those bytes."""
    keys = pd.Series(list(zip(per["hlo_module"], per["hlo_op"], strict=True)), index=per.index)
    ops = per[keys.isin(set(shares) - matmuls)].copy()
    halved = keys[ops.index].map(shares).astype(float).to_numpy() / 2
    flops = ops["flops"].fillna(0).to_numpy(float) / chip.peak_flops
    bytes_ = ops["bytes"].fillna(0).to_numpy(float) / chip.hbm_bandwidth
    ops["lost_s"] = bounded_saving(ops, (flops, flops), (bytes_, bytes_ * (1 - halved)))
    return ops


def bounded_saving(
    ops: pd.DataFrame,
    flops: tuple[np.ndarray, np.ndarray],
    bytes_: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """Per step, what each op saves when its FLOPs at peak and its bytes at HBM speed, per run
    in seconds, go from their first to their second value: its measured time x the share its
    ideal (the larger of the two) loses. Two kinds of op show by their time that their ideal
    is not what bounds them: one slower than NEAR_ROOFLINE x its ideal saves no more than that
    x what its ideal loses, and one shorter than SHORTEST_OP_S a run (its fixed cost) saves
    nothing. Why: JAX's mnist_vae example, whose epoch is a fori_loop of 23.7 us iterations of
    ops of 0.1-4 us, ran 44.53 ms an epoch on a v5e in f32 and 44.53 ms in bf16, where the
    measured time x the share of halved bytes had said 9.25 ms; the committed f32 programs
    whose ops are long (two MLPs, a ResNet, a ViT, Gemma) keep their figures within 1.2%."""
    runs = ops["runs_per_step"].to_numpy(float) if "runs_per_step" in ops else 1.0
    time = ops["time_s"].to_numpy(float) / runs
    now, fixed = np.maximum(flops[0], bytes_[0]), np.maximum(flops[1], bytes_[1])
    slower = np.where(now > 0, np.minimum(time / np.where(now > 0, now, 1), NEAR_ROOFLINE), 0.0)
    slower = np.where(time >= SHORTEST_OP_S, slower, 0.0)
    return np.clip(now - fixed, 0, None) * runs * slower
