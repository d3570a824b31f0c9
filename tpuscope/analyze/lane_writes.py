"""Writes across a TPU's lanes, measured: an in-place update one element wide along the lane axis
of the array it writes. Pure pandas over the trace's HLO (stage `tpu_trace`, with layouts).

A TPU keeps an array in tiles whose minor axis is 128 lanes wide; the layout's first
minor-to-major dim is the one in the lanes. A `dynamic-update-slice` whose update spans one
element of that dim writes one lane of every tile it touches, so it moves whole tiles to change
a sliver of them. A KV cache is the common case: a decoder writes one position of the time
axis each token. On a v5e (docs/tpu.md, gpt_decode.py) XLA put a head_dim 64 cache's time axis
in the lanes, and each write of 64 KB into a bf16[16,16,2048,64] cache took 54 us, 1.2 GB/s;
at head_dim 128 XLA kept head_dim in the lanes, the same write took 2.8 us, and the token
0.42-0.44 ms less, about the writes' 0.43 ms. Why XLA picks a layout is not in the trace (a
cache merged to (batch, time, 1024) still had its time axis in the lanes). The cost is the
writes' measured time less their bytes at the HBM's speed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tpuscope.analyze.chips import Chip
from tpuscope.analyze.shapes import parse_shape

LANES = 128  # the minor edge of a TPU tile (every generation)


def array_dims(shape: object) -> tuple[int, ...]:
    """An array shape's dims ('bf16[16,2048,64]' -> (16, 2048, 64)); () for a tuple or text
    with unknown dims."""
    parsed = parse_shape(str(shape)) if isinstance(shape, str) else None
    if parsed is None or any(d is None for d in parsed.dims):
        return ()
    return tuple(int(d) for d in parsed.dims if d is not None)


def lane_writes(top: pd.DataFrame) -> pd.DataFrame:
    """The dynamic-update-slice instructions of the trace's HLO that write one element along
    their array's lane axis of LANES or more: module, parent (the op the trace times), shape,
    lane (that axis), update (its shape)."""
    if "layout" not in top or top.empty:
        return pd.DataFrame()
    writes = top[(top["opcode"] == "dynamic-update-slice") & top["layout"].notna()]
    if writes.empty:
        return pd.DataFrame()
    matmuls = top[top["opcode"].isin(("dot", "convolution")) & top["fusion"].notna()]
    with_matmul = set(zip(matmuls["module"], matmuls["fusion"], strict=True))
    shapes = dict(zip(zip(top["module"], top["name"], strict=True), top["shape"], strict=True))
    rows = []
    for row in writes.itertuples():
        dims = array_dims(row.shape)
        lane = int(str(row.layout).split(",")[0])
        operands = list(row.operands) if row.operands is not None else []
        update = array_dims(shapes.get((row.module, operands[1]))) if len(operands) > 1 else ()
        parent = row.fusion if isinstance(row.fusion, str) else row.name
        if (row.module, parent) in with_matmul:  # a matmul's fusion: its time is not the write's
            continue
        if len(update) == len(dims) and update[lane] == 1 and dims[lane] >= LANES:
            rows.append(
                {
                    "module": row.module,
                    "parent": parent,
                    "shape": row.shape,
                    "lane": lane,
                    "update": shapes.get((row.module, operands[1])),
                }
            )
    return pd.DataFrame(rows)


def bytes_a_step(ops: pd.DataFrame) -> pd.Series:
    """Each measured op's bytes a step (measured_ops rows): XLA's bytes of one run times its
    runs a step (an op may run several times a step: a scan over layers)."""
    return ops["bytes"].fillna(0) * ops["runs_per_step"]


def lane_write_cost(per: pd.DataFrame, writes: pd.DataFrame, chip: Chip) -> pd.DataFrame:
    """The measured ops (measured_ops rows) that hold those writes, each with its bytes a step
    and lost_s: its time less those
    bytes at the HBM's bandwidth. Costliest first."""
    ops = per.merge(
        writes.drop_duplicates(["module", "parent"]),
        left_on=["hlo_module", "hlo_op"],
        right_on=["module", "parent"],
    )
    if ops.empty:
        return ops
    ops["bytes_a_step"] = bytes_a_step(ops)
    ideal = ops["bytes_a_step"].to_numpy(float) / chip.hbm_bandwidth
    ops["lost_s"] = np.clip(ops["time_s"].to_numpy(float) - ideal, 0, None)
    return ops.sort_values("lost_s", ascending=False)
