"""Rule `cpu_fallback`: ops torch_xla ran on the host, in every namespace.

One finding per op torch_xla's fallback counted (parse/xla_counter_names.is_fallback_counter:
`aten::nonzero`, `torchvision::nms`, a `torch.library` custom op with a CPU kernel only, as
`executed_fallback_ops()` names them), counted in every
step (setup, warm-up and the after-the-loop phase included: a fallback costs the same
wherever it runs), with its count per step of the loop, the user's call sites (traced
briefly after the op first appears) and, where a well-known one exists, a lowered
alternative. Severity: the cost's share of the wall time (analyze/judge).
`aten::_local_scalar_dense` is a value read (`.item()`), reported by `host_sync`; the
device-to-host reads a fallback makes (its inputs, copied to the host) are this card's,
never `host_sync`'s (it subtracts them, and their call sites, from the reads it counts).
Where the same op falls back at several lines, the card is at the line with the most calls
(the first called on a tie) and lists the others.
Cost (a lower bound): the device-to-host wait (TransferFromDeviceTime, which
includes finishing the graph cut at the op) of the steps where the op ran, shared
among the host round-trips of each step; the CPU work, the upload back and the lost
fusion come on top. Imported totals use the same share of the whole-run wait.
"""

from __future__ import annotations

from typing import Any, cast

import pandas as pd

from tpuscope.analyze import judge
from tpuscope.analyze.contract import FallbackEvidence
from tpuscope.analyze.judge import VALUE_READ_OPS
from tpuscope.detect import common
from tpuscope.detect.tables import RunTables
from tpuscope.schema import Finding
from tpuscope.step_runs import runs_text

RULE = "cpu_fallback"
HOST_SYNC_OPS = VALUE_READ_OPS
TRANSFER_METRICS = ("TransferFromDeviceTime", "TransferFromServerTime")
_STATIC_MASK = (
    "replace `x[mask]` by a static-shape form: `torch.where(mask, x, 0)` with a masked "
    "reduction (`torch.where(mask, loss, 0).sum() / mask.sum()`); for indices, `torch.topk` or "
    "`sort` over the mask gives a fixed number of them"
)
ALTERNATIVES: dict[str, str] = {
    "aten::nonzero": _STATIC_MASK,
    "aten::masked_select": _STATIC_MASK,
    "aten::nonzero_static": _STATIC_MASK + " (nonzero_static itself falls back in this torch_xla)",
    "aten::_unique2": "mark the values present in a fixed-size vector: `F.one_hot(x, n).amax(0)` (lowered)",
    "aten::unique_dim": "mark the values present in a fixed-size vector: `F.one_hot(x, n).amax(0)` (lowered)",
    "aten::unique_consecutive": "compare neighbours instead: `x[1:] != x[:-1]` as a mask (lowered)",
    "aten::bincount": "`F.one_hot(x, n).sum(0)` or `torch.zeros(n).scatter_add_(0, x, ones)` (lowered)",
    "aten::histc": "count with comparisons: `((x[:, None] >= lo) & (x[:, None] < hi)).sum(0)` (lowered)",
    "aten::bucketize.Tensor": "`(x[..., None] > boundaries).sum(-1)` (lowered; same as right=False)",
    "aten::searchsorted.Tensor": "`(values[..., None] > sorted_seq).sum(-1)` (lowered; side='left')",
    "aten::median": "`torch.kthvalue(x, (x.numel() + 1) // 2)` gives the same lower median (lowered)",
    "aten::mode": "for small integer ranges, `F.one_hot(x, n).sum(0).argmax()` (lowered)",
    "aten::grid_sampler_2d": (
        "run the warp in the input pipeline on the host, before `.to(device)`, or "
        "write the bilinear sampling with `torch.gather` (lowered)"
    ),
    "aten::grid_sampler_2d_backward": (
        "run the warp in the input pipeline on the host, before "
        "`.to(device)`, so no gradient flows through grid_sample"
    ),
    "aten::affine_grid_generator": (
        "build the grid with a matmul: `base_grid @ theta.transpose(1, 2)` (lowered)"
    ),
    "aten::_ctc_loss": "compute CTC outside the compiled step, or use a fixed-length formulation",
    "aten::_ctc_loss_backward": "compute CTC outside the compiled step, or use a fixed-length formulation",
    # measured on torch_xla 2.9: with XLA_EXPERIMENTAL=nms, executed_fallback_ops() stays empty
    "torchvision::nms": (
        "torch_xla has an experimental lowering of `torchvision::nms`: set the environment "
        "variable `XLA_EXPERIMENTAL=nms` (its output has a data-dependent size, an experimental "
        "feature); or run the post-processing on the host after torch_xla.sync()"
    ),
}
# an op of a namespace of its own: a `torch.library` custom op registered for the CPU only (measured on
# torch_xla 2.9: with a kernel registered for "xla", executed_fallback_ops() stays empty)
CUSTOM_OP = (
    "give the op a kernel for the XLA device written in torch ops that torch_xla lowers: "
    '`@{name}.register_kernel("xla")` on the custom op (torch.library.register_kernel({op!r}, "xla", fn)); '
    "its CPU kernel stays for CPU tensors"
)
LIBRARY_NAMESPACES = ("aten", "prim", "torchvision", "torchaudio", "quantized")
GENERIC = (
    "no well-known lowered alternative: move it out of the step (into the input pipeline, or after "
    "torch_xla.sync()), or check whether a newer torch_xla lowers it"
)


def alternative_for(op: str) -> tuple[str, bool]:
    """(the fix, whether it is specific to the op): a known alternative, the custom-op fix for an op
    of a namespace of the user's own, else the generic advice."""
    if op in ALTERNATIVES:
        return ALTERNATIVES[op], True
    namespace, _, name = op.partition("::")
    if name and namespace not in LIBRARY_NAMESPACES:
        return CUSTOM_OP.format(name=name.split(".")[0], op=op), True
    return GENERIC, False


def why(op: str) -> str:
    """Why torch_xla ran it on the CPU, in the op's own terms."""
    namespace, _, name = op.partition("::")
    if not name or namespace in ("aten", "prim"):
        return f"{op} has no XLA lowering in this torch_xla"
    if namespace in LIBRARY_NAMESPACES:
        return f"{op} (a {namespace} op) is not lowered by this torch_xla by default"
    return (
        f"{op} is a custom op (namespace `{namespace}`, registered with torch.library) with no kernel "
        "for the XLA device"
    )


def transfer_share_ns(fallbacks: pd.DataFrame, metrics: pd.DataFrame) -> dict[str, float]:
    """Per op: its share of the device-to-host wait in the (process, step)s where it ran.

    Each fallback reads its inputs back from the device once, so an op's share of a
    step's wait is its count over the step's host reads (or over all fallbacks, if
    more). `fallbacks` must hold every op of those steps, value reads included.
    """
    if fallbacks.empty or metrics.empty:
        return {}
    wait = common.metric_per_step(metrics, TRANSFER_METRICS)
    reads = common.metric_per_step(metrics, TRANSFER_METRICS, "count").rename(
        columns={"count": "reads"}
    )
    keys = [k for k in ("host", "pid", "step") if k in fallbacks.columns and k in wait.columns]
    per_step = fallbacks.groupby([*keys, "op"], dropna=False)["count"].sum().reset_index()
    totals = per_step.groupby(keys, dropna=False)["count"].sum().rename("all_ops").reset_index()
    merged = (
        per_step.merge(totals, on=keys)
        .merge(wait, on=keys, how="left")
        .merge(reads, on=keys, how="left")
    )
    denominator = merged[["all_ops", "reads"]].max(axis=1).clip(lower=1)
    merged["share"] = merged["total"].fillna(0) * merged["count"] / denominator
    return cast(dict[str, float], merged.groupby("op")["share"].sum().to_dict())


def _sites(rows: pd.DataFrame) -> tuple[list[dict[str, Any]], tuple[list[list[int]], int]]:
    """Call sites with their calls per traced step, and the traced steps as (runs, count)
    (any step: sites are code)."""
    located = rows[rows["location"].notna()]
    traced = Finding.of_steps(located["step"])
    # rows keep the tracer's call order: on a tie, the first line called comes first
    counts = (
        located.groupby("location", sort=False)["count"]
        .sum()
        .sort_values(ascending=False, kind="stable")
    )
    per = max(traced[1], 1)
    inside = _inside(located)
    return [
        {
            "location": loc,
            "count": int(n),
            "per_traced_step": n / per,
            "inside": inside.get(loc, []),
        }
        for loc, n in counts.items()
    ], traced


def _inside(located: pd.DataFrame) -> dict[Any, list[dict[str, Any]]]:
    """Per user's line, the library lines inside that call that called the op (a model's
    forward), most calls first; none where the user's line called the op itself."""
    if "library_frame" not in located:
        return {}
    framed = located[located["library_frame"].notna() & (located["library_frame"] != "")]
    counts = framed.groupby(["location", "library_frame"], sort=False)["count"].sum()
    out: dict[Any, list[dict[str, Any]]] = {}
    for (loc, frame), n in counts.sort_values(ascending=False, kind="stable").items():
        out.setdefault(loc, []).append({"frame": str(frame), "count": int(n)})
    return out


def _at(site: dict[str, Any]) -> str:
    inside = site.get("inside") or []
    return common.line_inside(site["location"], inside[0]["frame"] if inside else None)


def _per_step_text(per_step: float | None) -> str:
    return f"{per_step:.1f} per step" if per_step is not None else "count per step unknown"


def _finding(
    op: str,
    rows: pd.DataFrame,
    all_rows: pd.DataFrame,
    n_steps: int | None,
    wait_ns: float,
    wall: float,
    count: int,
    untraced_site: str | None = None,
) -> Finding:
    per_step = count / n_steps if n_steps and count else None
    sites, traced = _sites(all_rows)
    location = sites[0]["location"] if sites else untraced_site
    runs, n_runs = Finding.of_steps(rows["step"])
    cost = wait_ns / common.NS
    alternative, specific = alternative_for(op)
    where = ", ".join(f"{_at(s)} ({s['per_traced_step']:g} per step)" for s in sites[:3])
    where = (
        f"{where} (traced in steps {runs_text(*traced, limit=5)})"
        if sites
        else f"{common.file_and_line(untraced_site)} (torch_xla's compile analyses; call sites not traced)"
        if untraced_site
        else "not traced"
    )
    counted = (
        f"{count} times"
        if count
        else "an unknown number of times (the source names it without a count)"
    )
    title = f"{op} runs on the CPU ({_per_step_text(per_step)})" + (
        f" at {_at(sites[0])}"
        if sites
        else f" at {common.file_and_line(location)}"
        if location
        else ""
    )
    detail = (
        f"{why(op)}: torch_xla cut the graph, copied its inputs to the host (a device-to-host read "
        f"each time, counted here, not as a host sync), ran it on the CPU and sent the result back, {counted} {'in the run' if wall else 'in the imported totals'} "
        f"({_per_step_text(per_step)}). "
        f"Called from: {where}. Cost (lower bound): {cost:.3f} s of device-to-host wait "
        "(TransferFromDeviceTime, shared among the host round-trips of those steps); the CPU work, the "
        "upload and the lost fusion come on top."
    )
    severity = judge.severity(cost, wall)
    evidence = FallbackEvidence(
        op=op,
        count=count,
        per_step=per_step,
        sites=sites,
        traced_step_runs=traced[0],
        alternative=alternative if specific else None,
    )
    return Finding(
        RULE,
        severity,
        title,
        detail,
        f"At {common.file_and_line(location) if location else 'the call site'}: {alternative}.",
        location,
        cost,
        runs,
        evidence,
        n_runs,
    )


def detect_cpu_fallback(tables: RunTables) -> list[Finding]:
    """One finding per op (any namespace) that fell back to the CPU in any step (or in imported totals)."""
    fallbacks = tables.fallbacks
    if fallbacks.empty:
        return []
    judged = tables.steps  # a fallback is a fallback wherever it runs: every step is judged
    every_op = common.judged_rows(fallbacks, judged)
    rows = every_op[~every_op["op"].isin(HOST_SYNC_OPS)]
    if rows.empty:
        return []
    wall = judge.wall_s(judged)
    waits = transfer_share_ns(
        every_op, common.judged_rows(tables.metric_rows(TRANSFER_METRICS), judged)
    )
    findings = []
    for op, group in rows.groupby("op", sort=False):
        if not judged.empty:
            n_steps: int | None = len(common.loop_steps(tables)) or len(judged)
            count = int(group["count"].sum())
        else:  # imported totals: count over the step markers of the files that counted theirs
            marks = (
                common.per_process(tables.metrics, ["MarkStep"]) if not tables.metrics.empty else {}
            )
            counts = common.per_process(group, [str(op)], name_column="op")
            rate = common.rate_per_step(counts, marks)
            count = int(group["count"].sum())
            n_steps = int(round(count / rate)) if rate else None
        site = common.value_read_site(tables, group["step"]) if not judged.empty else None
        findings.append(
            _finding(
                str(op),
                group,
                fallbacks[fallbacks["op"] == op],
                n_steps,
                waits.get(str(op), 0.0),
                wall,
                count,
                site,
            )
        )
    return findings
