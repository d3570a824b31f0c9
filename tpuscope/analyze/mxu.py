"""TensorCore (MXU) arithmetic: padding waste per TPU generation and a roofline per graph.

A TPU matrix unit is a square systolic array (128x128 on v4, v5e and v5p; 256x256 on
v6e and v7). For a product [M,K] @ [K,N] the [K,N] operand is loaded into the array
in tiles of edge x edge and the M rows stream through it, so K and N are padded up
to multiples of the edge: K=64 uses half of each pass on a 128 array and a quarter
on a 256 array. Rows stream, so M costs no padding, but fewer rows than the array
edge leave the array mostly filling and draining. Peak figures and their sources:
docs/tpu_generations.md. Everything here is pure table -> table.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tpuscope.analyze.chips import DEFAULT_TARGET, GENERATIONS, TARGETS, Chip, _key, chip  # noqa: F401

# torch_xla.backends.set_mat_mul_precision / jax.lax.Precision: f32 matmuls on TPU take
# 1 (default: bf16), 3 (high) or 6 (highest) bf16 passes.
PRECISION_PASSES = {"default": 1, "high": 3, "highest": 6}
_BYTES = {
    "bf16": 2,
    "f16": 2,
    "f32": 4,
    "f64": 8,
    "s8": 1,
    "u8": 1,
    "s32": 4,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
}
STAGE_PREFERENCE = (
    "before_optimizations",
    "tpu_trace",
)  # platform-independent dims and user metadata


def core_rates(target: str | None) -> tuple[float, float]:
    """(FLOP/s, HBM bytes/s) of one TensorCore: XLA runs an op on one core, so on chips with
    two (v4, v5p, TPU7x) the per-chip figures would halve every estimate (docs/cost_model.md)."""
    from tpuscope.analyze.cost_model import peaks

    rates = peaks(_key(target))
    return rates.flops, rates.hbm


def generation_of(device_type: str | None) -> str | None:
    """xprof/PJRT device strings -> generation key: 'TPU v6 Lite' -> 'v6e', 'TPU v5' -> 'v5p'."""
    match = re.search(r"tpu\s*v?(\d)\s*(x|lite|e|p)?", (device_type or "").lower())
    if not match:
        return None
    number, kind = match[1], match[2] or ""
    if number == "7":
        return "v7"
    if number in ("5", "6"):
        return f"v{number}e" if kind in ("lite", "e") else ("v5p" if number == "5" else "v6e")
    return "v4" if number == "4" else None


def padding_waste(
    n: np.ndarray | pd.Series | float, k: np.ndarray | pd.Series | float, edge: int
) -> np.ndarray:
    """Share of each MXU pass spent on padding when K and N are padded to the array edge."""
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    padded = np.ceil(n / edge) * edge * np.ceil(k / edge) * edge
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(padded > 0, 1.0 - n * k / padded, 0.0)


def matmuls(hlo_ops: pd.DataFrame) -> pd.DataFrame:
    """Dots and convolutions with their matmul view, from one HLO stage per module
    (before_optimizations when dumped: its dims and metadata are the user's)."""
    if hlo_ops.empty or "m" not in hlo_ops:
        return pd.DataFrame(columns=["module", "name", "opcode", "batch", "m", "n", "k", "flops"])
    ops = hlo_ops[hlo_ops["m"].notna() & hlo_ops["opcode"].isin(["dot", "convolution"])].copy()
    if ops.empty:
        return ops
    rank = {s: i for i, s in enumerate(STAGE_PREFERENCE)}
    ops["_rank"] = ops["stage"].map(lambda s: rank.get(str(s), len(rank)))
    best = ops.groupby("module")["_rank"].transform("min")
    ops = ops[ops["_rank"] == best].drop(columns="_rank")
    for col in ("batch", "m", "n", "k"):
        ops[col] = ops[col].astype("int64")
    return ops.reset_index(drop=True)


def itemsize(dtype: object) -> int:
    return _BYTES.get(str(dtype), 4)


def mxu_costs(dots: pd.DataFrame, target: str) -> pd.DataFrame:
    """Per matmul on the target chip: padding waste, MXU and HBM time (s), and the time
    padding costs (what the padded MXU work adds beyond max(unpadded work, memory time))."""
    spec = chip(target)
    peak_flops, hbm_bandwidth = core_rates(target)
    out = dots.copy()
    if out.empty:
        return out.assign(waste=[], mxu_s=[], hbm_s=[], time_s=[], padding_s=[], f32_extra_s=[])
    edge = spec.mxu
    n, k = out["n"].to_numpy(float), out["k"].to_numpy(float)
    m, batch = out["m"].to_numpy(float), out["batch"].to_numpy(float)
    out["waste"] = padding_waste(n, k, edge)
    passes = (
        out["precision"].map(lambda p: PRECISION_PASSES.get(str(p), 1)).to_numpy(float)
        if "precision" in out
        else np.ones(len(out))
    )
    f32 = _is_f32(out)
    passes = np.where(f32, passes, 1.0)
    flops = 2.0 * batch * m * n * k
    padded = 2.0 * batch * m * np.ceil(n / edge) * edge * np.ceil(k / edge) * edge
    lhs_b, rhs_b, out_b = (_itemsizes(out, c) for c in ("lhs_dtype", "rhs_dtype", "dtype"))
    traffic = batch * (m * k * lhs_b + k * n * rhs_b + m * n * out_b)
    out["mxu_s"] = padded * passes / peak_flops
    out["hbm_s"] = traffic / hbm_bandwidth
    out["time_s"] = np.maximum(out["mxu_s"], out["hbm_s"])
    useful = flops * passes / peak_flops
    out["padding_s"] = np.maximum(0.0, out["time_s"] - np.maximum(useful, out["hbm_s"]))
    bf16_time = np.maximum(
        padded / peak_flops, batch * (m * k + k * n + m * n) * 2.0 / hbm_bandwidth
    )
    out["f32_extra_s"] = np.where(f32, np.maximum(0.0, out["time_s"] - bf16_time), 0.0)
    return out


def _itemsizes(frame: pd.DataFrame, column: str) -> np.ndarray:
    return (
        frame[column].map(itemsize).to_numpy(float) if column in frame else np.full(len(frame), 4.0)
    )


def _is_f32(dots: pd.DataFrame) -> np.ndarray:
    cols = [c for c in ("lhs_dtype", "rhs_dtype") if c in dots]
    if not cols:
        return (
            (dots["dtype"].astype(str) == "f32").to_numpy()
            if "dtype" in dots
            else np.zeros(len(dots), bool)
        )
    return np.all([dots[c].astype(str).isin(["f32", "f64"]).to_numpy() for c in cols], axis=0)


def roofline(hlo_modules: pd.DataFrame, costs: pd.DataFrame, target: str) -> pd.DataFrame:
    """Per graph on the target chip: MXU time (matmuls, padded, with their precision passes)
    against HBM time (bytes the graph moves), the bound, and padding's share of MXU work.

    Bytes: the top-level instructions of the optimized module (each fusion reads its
    operands and writes its result once) when XLA's optimized HLO was dumped, else the
    graph's parameters and outputs, a lower bound. Vector-unit work is not counted.
    """
    hbm_bandwidth = core_rates(target)[1]
    rows = []
    for module, group in costs.groupby("module") if not costs.empty else []:
        traffic, basis = _module_bytes(hlo_modules, str(module))
        mxu_s = float(group["mxu_s"].sum())
        hbm_s = traffic / hbm_bandwidth
        padding_s = float((group["mxu_s"] * group["waste"]).sum())  # MXU time spent on padding
        rows.append(
            {
                "module": module,
                "matmuls": len(group),
                "flops": float(group["flops"].sum()),
                "bytes": traffic,
                "bytes_basis": basis,
                "mxu_s": mxu_s,
                "hbm_s": hbm_s,
                "time_s": max(mxu_s, hbm_s),
                "bound": "compute (MXU)" if mxu_s >= hbm_s else "memory (HBM)",
                "padding_share": padding_s / mxu_s if mxu_s else 0.0,
            }
        )
    return pd.DataFrame(rows)


def _module_bytes(hlo_modules: pd.DataFrame, module: str) -> tuple[float, str]:
    if hlo_modules.empty:
        return 0.0, "unknown"
    rows = hlo_modules[hlo_modules["module"].astype(str) == module]
    optimized = rows[rows["stage"].astype(str).str.contains("after_optimizations|tpu_trace")]
    if not optimized.empty and float(optimized["top_level_bytes"].max() or 0) > 0:
        return float(optimized["top_level_bytes"].max()), "optimized HLO, fusion by fusion"
    if rows.empty:
        return 0.0, "unknown"
    return float(
        (rows["param_bytes"] + rows["output_bytes"]).max()
    ), "graph inputs + outputs (lower bound)"


def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us" if seconds >= 1e-7 else f"{seconds * 1e9:.0f} ns"
