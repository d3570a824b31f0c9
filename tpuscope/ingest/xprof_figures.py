"""xprof's figures as a run keeps them: only those that were measured and hold for the device
that was traced (issue 29: a GPU trace showed "MXU utilization 0%", "device duty cycle nan%",
ops "?-bound" and "Unknown-bound").

xprof writes NaN (text "-nan") for a figure it could not compute, "?" or "Unknown" for an op
whose bound it could not tell, 0 for a peak it does not know, and its TPU figures (MXU
utilization, HBM utilization) as 0 on a GPU, which has no MXU. A figure nobody measured is left
out rather than stored as a number; an unknown bound is stored as null.
"""

from __future__ import annotations

import math
from typing import Any

UNKNOWN_BOUND = {"", "?", "unknown", "none", "n/a"}
TPU_ONLY = {
    "mxu_utilization_percent",
    "hbm_utilization_percent",
    "flop_rate_utilization_relative_to_roofline",
}
ZERO_IS_UNKNOWN = {"peak_flop_rate_gflops", "peak_hbm_bw_gibps", "hbm_ridge_point_flops_per_byte"}


def device_kind(overview: list[dict[str, Any]], devices: list[str] | None = None) -> str | None:
    """The kind of device traced: xprof's device_type ("TPU v6 Lite", "GPU", "AMD GPU - gfx942"),
    else the planes' names (/device:GPU:0 -> "GPU")."""
    kinds = [
        str(r.get("text")) for r in overview if r.get("name") == "device_type" and r.get("text")
    ]
    if kinds:
        return kinds[0]
    for kind in ("TPU", "GPU"):
        if any(f"/device:{kind}:" in str(d) for d in devices or []):
            return kind
    return None


def is_tpu(kind: str | None) -> bool:
    return kind is not None and "TPU" in kind.upper()


def _unknown(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def overview_rows(rows: list[dict[str, Any]], kind: str | None) -> list[dict[str, Any]]:
    """The overview's figures that were measured, for this kind of device."""
    keep = []
    for row in rows:
        name, value, text = row.get("name"), row.get("value"), str(row.get("text") or "")
        if text.strip().lower().lstrip("-+") == "nan" or (_unknown(value) and not text):
            continue
        if isinstance(value, float) and math.isnan(value):
            continue
        if name in ZERO_IS_UNKNOWN and value == 0:
            continue
        if name in TPU_ONLY and not is_tpu(kind):
            continue
        keep.append(row)
    return keep


def op_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ops with an unknown bound stored as null (never "?" or "Unknown")."""
    return [
        {**r, "bound_by": None}
        if str(r.get("bound_by") or "").strip().lower() in UNKNOWN_BOUND
        else r
        for r in rows
    ]
