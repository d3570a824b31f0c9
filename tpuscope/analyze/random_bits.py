"""Random bits made by JAX's default PRNG, threefry, measured: ops whose HLO holds its hashing.
Pure pandas over the run's measured ops (analyze/op_time) and the trace's HLO.

Threefry hashes counters with 32-bit integer rounds on the vector units; XLA fuses the hashing
into the ops that read the bits (a dropout mask into the matmul after it), and makes the bits
again in the backward pass. JAX's `rbg` PRNG makes them with the TPU's own bit generator. On a
v5e, optax's nanolm example (f32, dropout 0.2; docs/tpu.md) ran a 6.62 ms device step, 4.19 ms
with `jax_default_prng_impl="rbg"` and 3.60 ms without dropout; its ops holding threefry took
3.53 ms, their long runs 2.36 ms over their ideal (0.97 of the 2.43 ms rbg saved). Runs under
20 us are bound by their fixed cost (JAX's mnist_vae example: 23 ms an epoch in 1,875 runs
each of a few us, which other bits would not shorten): not counted.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tpuscope.analyze.chips import Chip
from tpuscope.analyze.slow_ops import LONG_OP_S
from tpuscope.analyze.waste import MeasuredWaste, op_keys, trace_stage, waste

RANDOM_BITS = "threefry"  # JAX's default PRNG's op names: threefry2x32, _threefry_split


def random_bits_ops(hlo_ops: pd.DataFrame) -> set[tuple[str, str]]:
    """(module, top-level op) of the ops that make random bits with JAX's threefry PRNG
    (dropout's masks, fused by XLA into the matmuls that read them, and made again in the
    backward pass). Such an op is bound by the hashing's integer work, which bf16 does not
    change: in optax's nanolm example (f32, dropout 0.2) on a v5e, 18 matmuls fused with their
    dropout masks took 190-200 us each where the same matmuls took 27-31 us without dropout,
    and its bf16 twin saved 0.43 ms a step; counting them put the f32 card at 1.64 ms, without
    them 0.40 ms. Such an op's own matmul may still gain from bf16: that part is not known.
    Those among the f32 matmuls and the ops around them are left out of the f32 card; the
    long ones are the random_bits card's (random_bits_waste)."""
    stage = trace_stage(hlo_ops)
    if stage.empty or "op_name" not in stage:
        return set()
    made = stage[stage["op_name"].astype(str).str.contains(RANDOM_BITS, regex=False)]
    top = made["fusion"].fillna(made["name"]) if "fusion" in made else made["name"]
    return set(zip(made["module"], top.astype(str), strict=True))


def random_bits_waste(per: pd.DataFrame, hlo_ops: pd.DataFrame, chip: Chip) -> MeasuredWaste | None:
    """The ops holding threefry's hashing whose runs take LONG_OP_S or more: each one's time
    less its ideal (FLOPs at peak, bytes at HBM speed, a run's times its runs), the most other
    bits could gain: an estimate of what rbg saves (the rest of such a run, its own matmul's
    f32 passes among it, stays). An op without XLA's FLOP count has no ideal: not counted."""
    rng = random_bits_ops(hlo_ops)
    if not rng or per.empty:
        return None
    ops = per[op_keys(per).isin(rng)].copy()
    runs = ops["runs_per_step"].to_numpy(float)
    time = ops["time_s"].to_numpy(float)  # a step's, over its runs
    ideal = runs * np.maximum(  # FLOPs and bytes are one run's
        ops["flops"].fillna(0).to_numpy(float) / chip.peak_flops,
        ops["bytes"].fillna(0).to_numpy(float) / chip.hbm_bandwidth,
    )
    long = (time / np.maximum(runs, 1e-12) >= LONG_OP_S) & ops["flops"].notna().to_numpy()
    ops["lost_s"] = np.where(long, (time - ideal).clip(0), 0)
    ops = ops[ops["lost_s"] > 0]
    return waste("random_bits", ops, {"count": int(len(ops))}) if not ops.empty else None
