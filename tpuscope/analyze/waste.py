"""What the measured TensorCore rules share: one cause's waste in the traced steps, and the HLO
that the TPU trace carries. Pure pandas; analyze/op_time decides which ops are whose."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class MeasuredWaste:
    """One cause's measured cost in the traced steps: `lost_s` per step, over `op_time_s` of
    the ops it touches per step."""

    kind: str
    lost_s: float
    op_time_s: float
    ops: pd.DataFrame  # the ops: module, hlo_op, time_s (per step), lost_s (per step), source
    info: dict = field(default_factory=dict)


def trace_stage(hlo_ops: pd.DataFrame) -> pd.DataFrame:
    """The HLO the TPU trace carries (stage tpu_trace), when the run has it."""
    if "stage" in hlo_ops and (hlo_ops["stage"] == "tpu_trace").any():
        return hlo_ops[hlo_ops["stage"] == "tpu_trace"]
    return hlo_ops


def waste(kind: str, ops: pd.DataFrame, info: dict) -> MeasuredWaste | None:
    lost = float(ops["lost_s"].sum())
    if lost <= 0:
        return None
    columns = ["hlo_module", "hlo_op", "time_s", "lost_s", "source"]
    return MeasuredWaste(kind, lost, float(ops["time_s"].sum()), ops[columns], info)


def op_keys(frame: pd.DataFrame, module: str = "hlo_module", op: str = "hlo_op") -> pd.Series:
    """(module, top-level op) of each row, as the causes' sets of ops hold them."""
    return pd.Series(list(zip(frame[module], frame[op], strict=True)), index=frame.index)
