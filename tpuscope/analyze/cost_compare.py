"""Estimate against measurement, op by op and module by module, on an imported TPU profile.

The ops come from the trace's device "XLA Ops" lines (each event names its HLO
instruction and carries XLA's FLOPs and bytes) or, for a profile known only through
xprof's tool outputs, from xprof's hlo_stats joined with op_profile's raw counts. Each op
is priced by analyze.cost_model from its HLO text and XLA's counts, never from its time.
Host-offload copies need the module's schedule: a copy-done waits only for what is left
of its DMA when the program reaches it, so each module's ops are replayed in the order
the device ran them (the order, not the times) with the estimated op times, one FIFO DMA
queue per direction of the host link. The figure that says how far to trust the model:
the share of measured time spent in ops whose estimate is within 2x of their measurement.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import numpy as np
import pandas as pd

from tpuscope.analyze import cost_model as cm
from tpuscope.analyze.frames import json_records
from tpuscope.analyze.mxu import generation_of

WITHIN = 2.0
_OP_LINE = "XLA Ops"
_MODULE_LINE = "XLA Modules"
_COLUMNS = [
    "module",
    "op",
    "category",
    "expression",
    "flops",
    "bytes",
    "counts_from",
    "occurrences",
    "measured_us",
    "xprof_bound",
]


def trace_ops(events: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, list[str]], int]:
    """(one row per (module, op) of the TPU planes' XLA Ops lines, each module's op order in its
    first execution, the number of devices)."""
    if events.empty or "hlo_op" not in events:
        return pd.DataFrame(columns=_COLUMNS), {}, 0
    plane = events["plane"].astype(str)
    device = plane.str.startswith(
        "/device:TPU"
    )  # the model is a TPU model: GPU planes are not priced
    ops = events[device & (events["line"].astype(str) == _OP_LINE) & events["hlo_op"].notna()]
    if ops.empty:
        return pd.DataFrame(columns=_COLUMNS), {}, 0
    keys = [ops["hlo_module"].astype(str), ops["hlo_op"].astype(str)]
    grouped = ops.groupby(keys, sort=False)
    frame = pd.DataFrame(
        {
            "expression": grouped["name"].first().astype(str),
            "category": grouped["hlo_category"].first(),
            "flops": grouped["flops"].first().astype(float),
            "bytes": grouped["bytes_accessed"].first().astype(float),
            "occurrences": grouped.size(),
            "measured_us": grouped["dur_ns"].sum() / 1e3,
        }
    )
    frame.index.names = ["module", "op"]
    frame = frame.reset_index().assign(
        counts_from="trace event stats (XLA cost analysis)", xprof_bound=None
    )
    return frame[_COLUMNS], _first_runs(events, ops), int(plane[device].nunique())


def _first_runs(events: pd.DataFrame, ops: pd.DataFrame) -> dict[str, list[str]]:
    """Each module's op names in the order its first execution on the first device ran them."""
    first_plane = sorted(ops["plane"].astype(str).unique())[0]
    mine = ops[ops["plane"].astype(str) == first_plane].sort_values("start_ns")
    runs = events[
        (events["plane"].astype(str) == first_plane) & (events["line"].astype(str) == _MODULE_LINE)
    ]
    order: dict[str, list[str]] = {}
    for module, group in mine.groupby(mine["hlo_module"].astype(str), sort=False):
        spans = runs[runs["hlo_module"].astype(str) == module].sort_values("start_ns")
        if not spans.empty:
            start, end = (
                int(spans["start_ns"].iloc[0]),
                int(spans["start_ns"].iloc[0] + spans["dur_ns"].iloc[0]),
            )
            group = group[(group["start_ns"] >= start) & (group["start_ns"] < end)]
        order[module] = group["hlo_op"].astype(str).tolist()
    return order


def schedule_order(hlo_ops: pd.DataFrame, order: dict[str, list[str]]) -> dict[str, list[str]]:
    """Each module's op order from its scheduled HLO (the trace's HLO protos are scheduled; the
    entry computation is printed last), where the run has it; else the trace's order."""
    if hlo_ops.empty or "stage" not in hlo_ops:
        return order
    scheduled = hlo_ops[hlo_ops["stage"].astype(str).isin(["tpu_trace", "trace"])]
    out = dict(order)
    for module, rows in scheduled.groupby(scheduled["module"].astype(str), sort=False):
        entry = rows[(rows["computation"] == rows["computation"].iloc[-1]) & rows["fusion"].isna()]
        if module in out:
            out[module] = entry["name"].astype(str).tolist()
    return out


def xprof_ops_frame(
    xprof_ops: pd.DataFrame, programs: dict[str, str] | None = None
) -> pd.DataFrame:
    """One row per op of xprof's hlo_stats. XLA's counts come from op_profile; an op that
    op_profile lists only in pieces (megacore fusions) gets them back from hlo_stats' rates,
    FLOP/s x its time, which is exactly the static count xprof divided (docs/cost_model.md)."""
    if xprof_ops.empty:
        return pd.DataFrame(columns=_COLUMNS)
    x = xprof_ops
    runs = x["occurrences"].clip(lower=1).astype(float)
    has = x["xla_flops"].notna() if "xla_flops" in x else pd.Series(False, index=x.index)
    from_rates = x["model_gflops_per_s"].fillna(0) * x["self_time_us"] * 1e3 / runs
    bytes_rates = x["hbm_gibps"].fillna(0) * 2**30 * x["self_time_us"] * 1e-6 / runs
    frame = pd.DataFrame(
        {
            "module": x["program_id"].astype(str).map(lambda p: (programs or {}).get(p, p)),
            "op": x["hlo_op"].astype(str),
            "category": x["category"],
            "expression": x["expression"],
            "flops": np.where(has, x.get("xla_flops", 0.0), from_rates),
            "bytes": np.where(has, x.get("xla_bytes", 0.0), bytes_rates),
            "counts_from": np.where(
                has, "xprof op_profile (XLA cost analysis)", "xprof hlo_stats rate x time"
            ),
            "occurrences": x["occurrences"].astype(int),
            "measured_us": x["self_time_us"].astype(float),
            "xprof_bound": x["bound_by"],
        }
    )
    return frame.fillna({"flops": 0.0, "bytes": 0.0}).reset_index(drop=True)


def meta_value(meta: dict[str, Any], key: str) -> Any:
    """A key of the run's meta or, for imported runs, of the first process (file) that has it."""
    for source in [meta, *(meta.get("processes") or [])]:
        if source.get(key):
            return source[key]
    return None


def with_xprof_bounds(ops: pd.DataFrame, xprof_ops: pd.DataFrame) -> pd.DataFrame:
    """xprof's bound-by per op (by op name and category), next to the trace's ops."""
    if xprof_ops.empty or "bound_by" not in xprof_ops:
        return ops
    bound = xprof_ops.drop_duplicates(["hlo_op", "category"]).set_index(["hlo_op", "category"])[
        "bound_by"
    ]
    keys = pd.MultiIndex.from_arrays([ops["op"].astype(str), ops["category"].astype(str)])
    return ops.assign(xprof_bound=bound.reindex(keys).to_numpy())


def bound_agreement(priced: pd.DataFrame) -> dict[str, int]:
    """Ops priced by the roofline (compute vs HBM) whose bound matches xprof's bound-by, of those
    xprof classifies Compute or HBM and that move HBM bytes."""
    rows = priced[
        priced["xprof_bound"].isin(["Compute", "HBM"])
        & priced["bound"].isin(["compute", "HBM"])
        & (priced["bytes"] > 0)
    ]
    agree = (rows["xprof_bound"].str.lower() == rows["bound"].str.lower()).sum()
    return {"bound_agrees_with_xprof": int(agree), "bound_compared": len(rows)}


def target_of(meta: dict[str, Any], overview: pd.DataFrame) -> str | None:
    """The generation the profile ran on: the trace's device kind ('TPU v6 Lite' -> v6e)."""
    kinds = [meta_value(meta, "device_kind")]
    if not overview.empty:
        kinds += overview.loc[overview["name"] == "device_type", "text"].dropna().tolist()
    for kind in kinds:
        gen = generation_of(str(kind)) if kind else None
        if gen in cm.CHIPS:
            return gen
    return None


def run_peaks(overview: pd.DataFrame, target: str) -> cm.Peaks:
    """xprof's roofline peaks when the profile carries them (GFLOP/s, GiB/s), else the table's;
    from a TPU host's analysis when a log folder mixes TPU and GPU hosts."""
    if not overview.empty and "host" in overview:
        kinds = overview[overview["name"] == "device_type"]
        tpu_hosts = set(kinds.loc[kinds["text"].astype(str).str.contains("TPU"), "host"])
        overview = overview[overview["host"].isin(tpu_hosts)] if tpu_hosts else overview
    values: Any = (
        {} if overview.empty else overview.dropna(subset=["value"]).groupby("name")["value"].first()
    )
    flops, hbm = values.get("peak_flop_rate_gflops"), values.get("peak_hbm_bw_gibps")
    return cm.peaks(target, flops * 1e9 if flops else None, hbm * 2**30 if hbm else None)


def estimate(
    ops: pd.DataFrame,
    target: str,
    peak: cm.Peaks,
    devices: int = 1,
    order: dict[str, list[str]] | None = None,
) -> pd.DataFrame:
    """ops + estimated_us (per op, all occurrences), ratio to measured, bound and rule."""
    chip = cm.CHIPS[target]
    costs = [
        cm.price(
            r.expression, r.category, float(r.flops or 0), float(r.bytes or 0), chip, peak, devices
        )
        for r in cast(Iterable[Any], ops.itertuples())
    ]
    out = ops.assign(
        estimate_s=[c.seconds for c in costs],
        bound=[c.bound for c in costs],
        rule=[c.rule for c in costs],
    )
    for module, sequence in (order or {}).items():
        _replay(out, module, sequence, chip)
    out["estimated_us"] = out["estimate_s"] * 1e6 * out["occurrences"]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["ratio"] = np.where(
            out["measured_us"] > 0, out["estimated_us"] / out["measured_us"], np.nan
        )
    out["within_2x"] = (out["ratio"] >= 1 / WITHIN) & (out["ratio"] <= WITHIN)
    naive = cm.CHIPS[target]
    out["roofline_us"] = (
        np.maximum(out["flops"] / naive.peak_flops, out["bytes"] / naive.hbm)
        * 1e6
        * out["occurrences"]
    )
    return out


def _replay(out: pd.DataFrame, module: str, sequence: list[str], chip: cm.CostChip) -> None:
    """Replay one execution: host copies queue per direction; a copy-done waits for its DMA."""
    rows = out.index[out["module"] == module]
    by_op = {str(out.at[i, "op"]): i for i in rows}
    if not any(str(out.at[i, "bound"]) == "host DMA" for i in rows):
        return
    clock, free = 0.0, {"h2d": 0.0, "d2h": 0.0}
    pending: dict[str, float] = {}
    waits: dict[int, list[float]] = {}
    for name in sequence:
        i = by_op.get(name)
        if i is None:
            continue
        seconds = float(cast(float, out.at[i, "estimate_s"]))
        expression = str(out.at[i, "expression"])
        if out.at[i, "bound"] == "host DMA" and " copy-start(" in expression:
            way = cm.host_direction(expression)
            begin = max(clock, free[way])
            free[way] = pending[name] = begin + _copy_bytes(expression) / chip.host_dma
            seconds = 0.0
        elif out.at[i, "bound"] == "host DMA":
            done = pending.pop(_started_by(expression), None)
            seconds = max(0.0, done - clock) if done is not None else seconds
        waits.setdefault(i, []).append(seconds)
        clock += seconds
    for i, values in waits.items():
        out.at[i, "estimate_s"] = float(np.mean(values))


def _copy_bytes(expression: str) -> float:
    inst = cm.parse(expression)
    return cm.host_copy_bytes(inst) if inst is not None else 0.0


def _started_by(expression: str) -> str:
    """The copy-start a copy-done waits for (its operand)."""
    inst = cm.parse(expression)
    return inst.operands[0] if inst is not None and inst.operands else ""


def summary(priced: pd.DataFrame) -> dict[str, Any]:
    """Share of measured time within 2x, medians, totals; per module the same."""
    if priced.empty:
        return {}
    measured = float(priced["measured_us"].sum())
    ratio = priced["ratio"].replace([np.inf, -np.inf], np.nan)
    weights = priced["measured_us"].to_numpy()
    order = np.argsort(ratio.fillna(0).to_numpy())
    cumulative = np.cumsum(weights[order])
    weighted = float(
        ratio.fillna(0).to_numpy()[order][np.searchsorted(cumulative, cumulative[-1] / 2)]
    )
    naive = priced["roofline_us"] / priced["measured_us"].where(priced["measured_us"] > 0)
    return {
        "ops": len(priced),
        "measured_us": measured,
        "estimated_us": float(priced["estimated_us"].sum()),
        "share_within_2x": float(priced.loc[priced["within_2x"], "measured_us"].sum() / measured)
        if measured
        else 0.0,
        "median_ratio": float(ratio.median()),
        "time_weighted_median_ratio": weighted,
        "roofline_share_within_2x": float(
            priced.loc[(naive >= 0.5) & (naive <= 2), "measured_us"].sum() / measured
        )
        if measured
        else 0.0,
    }


def modules(
    priced: pd.DataFrame, module_runs: dict[str, tuple[int, float]] | None = None
) -> list[dict[str, Any]]:
    """Per module: estimated vs measured op time per execution (measured: its XLA Modules spans)."""
    out = []
    for module, group in priced.groupby("module", sort=False):
        runs, span_us = (module_runs or {}).get(str(module), (0, 0.0))
        executions = runs or max(int(group["occurrences"].min()), 1)
        estimated = float(group["estimated_us"].sum()) / executions
        measured = span_us / runs if runs else float(group["measured_us"].sum()) / executions
        by_bound = group.groupby("bound")["estimated_us"].sum()
        out.append(
            {
                "module": str(module),
                "executions": executions,
                "estimated_us": estimated,
                "measured_us": measured,
                "ratio": estimated / measured if measured else None,
                "bound": str(by_bound.idxmax()) if by_bound.sum() > 0 else None,
                "share_within_2x": summary(group)["share_within_2x"],
            }
        )
    return sorted(out, key=lambda m: -m["measured_us"] * m["executions"])


def module_runs(events: pd.DataFrame) -> dict[str, tuple[int, float]]:
    """Per module, over every device: executions and total time of its XLA Modules events
    (the ops' occurrences are counted over every device too)."""
    if events.empty or "hlo_module" not in events:
        return {}
    lines = events[
        (events["line"].astype(str) == _MODULE_LINE)
        & events["plane"].astype(str).str.startswith("/device:TPU")
    ]
    if lines.empty:
        return {}
    grouped = lines.groupby(lines["hlo_module"].astype(str))["dur_ns"]
    return {
        m: (int(n), float(t) / 1e3)
        for m, n, t in zip(grouped.size().index, grouped.size(), grouped.sum(), strict=True)
    }


def compare(
    meta: dict[str, Any],
    events: pd.DataFrame,
    xprof_ops: pd.DataFrame,
    overview: pd.DataFrame,
    hlo_ops: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(priced ops, the comparison's summary) of a run with device ops, on the chip it ran on;
    empty when the run has no device ops or no known TPU generation."""
    target = target_of(meta, overview)
    ops, order, devices = trace_ops(events)
    order = schedule_order(hlo_ops if hlo_ops is not None else pd.DataFrame(), order)
    ops, source = with_xprof_bounds(ops, xprof_ops), "trace (device XLA Ops lines)"
    if ops.empty:
        ops, order, devices = xprof_ops_frame(xprof_ops, meta_value(meta, "xprof_programs")), {}, 1
        source = "xprof hlo_stats + op_profile"
    if ops.empty or target is None:
        return pd.DataFrame(), {}
    peak = run_peaks(overview, target)
    priced = estimate(ops, target, peak, devices, order)
    view = {
        "target": target,
        "source": source,
        "peaks": {
            "flops_per_s": float(peak.flops),
            "hbm_bytes_per_s": float(peak.hbm),
            "from": peak.source,
        },
        **summary(priced),
        **bound_agreement(priced),
        "modules": modules(priced, module_runs(events)),
    }
    return priced, view


def top(priced: pd.DataFrame, n: int = 10) -> list[dict[str, Any]]:
    """The ops with the most measured time, estimate next to measurement."""
    if priced.empty:
        return []
    cols = [
        "module",
        "op",
        "category",
        "occurrences",
        "measured_us",
        "estimated_us",
        "ratio",
        "within_2x",
        "bound",
        "xprof_bound",
        "rule",
        "counts_from",
    ]
    rows = priced.sort_values("measured_us", ascending=False).head(n)[cols]
    return json_records(rows)
