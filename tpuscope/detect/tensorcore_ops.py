"""Rule `tensorcore_underuse`, measured: the TensorCore time a cause wastes, from a TPU trace's op
times (analyze/op_time), at the user's line. On a TPU `tpuscope run` traces a few steps after
the warm-up by default, so this is the rule's verdict there; where it speaks, the estimate from
the HLO (tensorcore.py) stands back: the measurement wins. Costs are the measured time lost per
traced step times the judged steps, with the severity every rule uses (share of the judged
steps' wall time). A cause under MIN_SHARE of the device step is not a finding."""

from __future__ import annotations

import dataclasses

import pandas as pd

from tpuscope.analyze import judge
from tpuscope.analyze.chips import GENERATIONS, Chip
from tpuscope.analyze.contract import TensorCoreEvidence
from tpuscope.analyze.lane_writes import LANES
from tpuscope.analyze.mxu import fmt_time, generation_of
from tpuscope.analyze.op_time import MIN_SHARE, MeasuredWaste, measured_waste
from tpuscope.analyze.tensorcore import is_library_path
from tpuscope.detect.common import file_and_line, judged_severity, judged_wall_s, traced_judged
from tpuscope.detect.compile_kinds import keras_step
from tpuscope.detect.jax_advice import KERAS_BF16_FIX, KERAS_PRECISION
from tpuscope.detect.tables import RunTables
from tpuscope.detect.tensorcore_measured import RULE, graph_site
from tpuscope.detect.tensorcore_why import RANDOM_BITS_FIX, f32_why, head_dim_why, random_bits_why
from tpuscope.schema import Finding

LOST = " lost per step"  # every measured card's title says its figure so (_wording)
COST_LINE = "Cost = that time per step"  # the detail's last sentence (_card)


def chip_of(tables: RunTables) -> Chip | None:
    """The TPU the run's trace was taken on (its device kind), None off a TPU."""
    kinds = [tables.meta.get("device_kind")] + [
        p.get("device_kind") for p in tables.meta.get("processes") or []
    ]
    for kind in kinds:
        gen = generation_of(str(kind or ""))
        if gen:
            return GENERATIONS[gen]
    return None


def op_time_findings(tables: RunTables, backend: str) -> list[Finding] | None:
    """The measured cards; None when the run has no TPU trace with its HLO to measure from."""
    chip = chip_of(tables)
    events = tables.extra.get("trace_events", pd.DataFrame())
    hlo_ops = tables.extra.get("hlo_ops", pd.DataFrame())
    if chip is None or events.empty or hlo_ops.empty:
        return None
    modules = tables.extra.get("hlo_modules", pd.DataFrame())
    wastes, figures = measured_waste(events, hlo_ops, chip, traced_judged(tables), modules)
    if not figures:
        return None
    device_s = figures["device_s_per_step"]
    runs = max(len(tables.judged), 1)
    return [
        _card(w, tables, chip, figures, runs, backend)
        for w in wastes
        if device_s > 0 and w.lost_s / device_s >= MIN_SHARE
    ]


def while_host_bound(card: Finding) -> Finding:
    """A measured card on a step the host bounds (the device-idle card stands, and host and
    device do not take turns in it): the device would finish its part sooner and the step would
    wait on the host as before, so the waste costs no step time until the host keeps up. The
    card stays, as the next fix then, with no cost and saying so (jax-ml/jax's MNIST classifier
    on a v5e: 57.9 us of device work in a 0.6 ms host-bound step, whose f32 card said 2 us
    "lost per step")."""
    title = card.title.replace(LOST, " of device time per step")
    detail = card.detail.rsplit(f" {COST_LINE}", 1)[0]
    return dataclasses.replace(
        card,
        severity="low",
        title=f"{title}: none of the host-bound step's time",
        detail=f"{detail} The step is host-bound (the device-idle card): with this fixed the "
        "device would wait longer for the host, and the step would take as long, so it costs "
        "no step time until the host keeps up; the figure is what the device gains then.",
        cost_s=0.0,
    )


def _where(waste: MeasuredWaste, tables: RunTables) -> tuple[str | None, list[str]]:
    """(the user's line of the ops that lose the most time, the library lines they carry);
    HLO metadata names the innermost frame, which for a library's layer is its own code, so
    without a user line the card stands at the line that cuts the step graph."""
    by_line = waste.ops.dropna(subset=["source"]).groupby("source")["lost_s"].sum()
    lines = list(by_line.sort_values(ascending=False).index.astype(str))
    user = [line for line in lines if not is_library_path(line)]
    library = [line for line in lines if is_library_path(line)]
    return (user[0] if user else graph_site(tables)), library[:4]


def _card(
    waste: MeasuredWaste,
    tables: RunTables,
    chip: Chip,
    figures: dict,
    runs: int,
    backend: str,
) -> Finding:
    device_s, steps = figures["device_s_per_step"], figures["traced_steps"]
    location, library = _where(waste, tables)
    keras = backend == "jax" and keras_step(tables.meta) is not None
    title, fix = _wording(waste, chip, backend, keras)
    share = waste.lost_s / device_s
    detail = (
        f"Measured on the {chip.name} ({traced_text(steps, figures.get('devices', 1))}): these ops took "
        f"{fmt_time(waste.op_time_s)} of each {fmt_time(device_s)} device step, of which "
        f"{fmt_time(waste.lost_s)} ({100 * share:.0f}% of the device step) is {_why(waste, chip)}. "
        + (
            f"Library lines inside the call: {', '.join(map(file_and_line, library))}. "
            if library
            else ""
        )
        + f"{COST_LINE} x {runs} judged step(s)."
    )
    evidence = TensorCoreEvidence(
        basis=f"measured (op times of the TPU trace, peaks of the {chip.name})",
        cost_figure=_COST_FIGURES[waste.kind],
        target=next(k for k, v in GENERATIONS.items() if v is chip),
        kind=waste.kind,
        share_of_step=round(share, 4),
        lost_s_per_step=waste.lost_s,
        op_s_per_step=waste.op_time_s,
        device_s_per_step=device_s,
        traced_steps=steps,
        location=location,
        library_lines=library,
        **{k: v for k, v in waste.info.items() if k in _EVIDENCE_INFO},
    )
    cost = waste.lost_s * runs
    level = (  # an imported trace has no step times: its share of the device step
        judged_severity(cost, tables)
        if judged_wall_s(tables) > 0
        else judge.severity(waste.lost_s, device_s)
    )
    return Finding(RULE, level, title, detail, fix, location, cost, [], evidence)


# what a cause's info carries into the card's evidence
_EVIDENCE_INFO = (
    "head_dim",
    "precision",
    "count",
    "scopes",
    "ops_around",
    "shapes",
    "f32_kernels",
    "f32_kernels_s",
    "random_bits_ops",
    "random_bits_s",
)
_COST_FIGURES = {
    "f32": "measured",
    "head_dim": "estimated (the attention ops' measured time x the narrow head's share)",
    "lane_writes": "measured (the writes' device time less their bytes at HBM speed)",
    "relayouts": "measured (the copies' device time)",
    "off_peak": "measured (the ops' device time less their FLOPs and bytes at the chip's peak: "
    "the most they could gain)",
    "random_bits": "measured (the ops' device time less their FLOPs and bytes at the chip's "
    "peak: the most other bits could gain)",
}


def _why(waste: MeasuredWaste, chip: Chip) -> str:
    if waste.kind == "lane_writes":
        return _lane_why(waste.info, waste.op_time_s, chip)
    if waste.kind == "relayouts":
        return _relayout_why(waste.info, waste.op_time_s, chip)
    if waste.kind == "off_peak":
        return _off_peak_why(waste.info, chip)
    if waste.kind == "random_bits":
        return random_bits_why(chip)
    if waste.kind == "f32":
        return f32_why(waste.info, chip)
    return head_dim_why(waste.info, chip)


def _off_peak_why(info: dict, chip: Chip) -> str:
    return (
        f"their time beyond their ideal at the chip's peak (FLOPs / "
        f"{chip.peak_flops / 1e12:.0f} TFLOP/s, bytes / {chip.hbm_bandwidth / 1e9:.0f} GB/s): "
        f"the costliest, a {info['what']}, took {fmt_time(info['run_s'])} a run against an "
        f"ideal of {fmt_time(info['ideal_run_s'])} ({info['ratio']:.0f}x). What makes XLA's "
        "code for it that slow is not in the trace, and not its FLOPs or its bytes; on a v5e "
        "JAX's differentially_private_sgd example's per-example weight gradient (vmap of grad "
        "over a convolution), computed with an f32 result, ran 3.24 ms a step at 262x its "
        "ideal, and with bf16 operands and result 28 us (docs/tpu.md)"
    )


def _lane_why(info: dict, op_time_s: float, chip: Chip) -> str:
    rate = info["bytes"] / op_time_s / 1e9 if op_time_s > 0 else 0.0
    return (
        f"the writes' time less their bytes at HBM speed: each writes {info['update']} into a "
        f"{info['shape']} array that XLA laid out with its axis {info['lane_dim']} (size "
        f"{info['lane_size']}) in the {LANES} lanes of the TPU's tiles, one element of that "
        f"axis at a time, so every tile it touches takes a one-lane write ({rate:.1f} GB/s, "
        f"against the HBM's {chip.hbm_bandwidth / 1e9:.0f}). Why XLA chose that layout is not "
        "in the trace; on a v5e a KV cache of head_dim 64 had its time axis in the lanes and "
        "one of head_dim 128 its head_dim, whose write took 2.8 us against 54 us (docs/tpu.md)"
    )


def _lane_wording(info: dict, lost: str, backend: str) -> tuple[str, str]:
    paged = (
        "jax.experimental.pallas.ops.tpu.paged_attention"
        if backend == "jax"
        else "torch_xla.experimental.custom_kernel.paged_attention"
    )
    head_dim = (
        f"Where the model allows, use head_dim {LANES} (the same width in half the heads): on a "
        "v5e a KV-cached decoder's token took 1.19-1.22 ms at head_dim 128 against 1.64 ms at "
        "64, XLA keeping head_dim in the lanes and each write whole rows of tiles. "
    )
    if info["last_size"] >= LANES and not info.get("lane_is_last"):  # heads merged: split
        advice = (
            "If this is a KV cache with its heads merged into the last axis (batch, time, heads "
            "x head_dim), keep it in the layout the compiler picks or split its heads: on a v5e "
            "such a cache took 4.07 ms a token passed in its default "
            "layout (XLA copied it to another layout each token), 1.64 ms split as (batch, "
            "time, heads, head_dim), and 1.46 ms kept merged in the layout the compiler picks "
            "(`Format(Layout.AUTO)`, the step compiled ahead of the loop), whose writes still "
            "crossed the lanes (0.33 ms of the token). " + head_dim
        )
    else:
        advice = head_dim + (
            "Merging the heads into the cache's last axis (batch, time, heads x head_dim) made "
            "it worse there (4.07 ms: XLA kept the time axis in the lanes and copied the cache "
            "each token). "
        )
    return (
        f"{info['count']} one-position write(s) across the lanes of a {info['shape']} array "
        f"(dynamic_update_slice, as a KV cache's per-token write): {lost}{LOST} "
        "(measured)",
        advice
        + "Keeping the split caches in the layout the compiler picks across calls (Layout.AUTO) "
        "did not help there (1.68 ms). With a fixed head_dim, a decode-attention kernel that owns the "
        f"cache's layout ({paged}) is the other way; not measured here.",
    )


def _relayout_sides(info: dict, names_shown: int) -> str:
    """'8 argument(s) (caches[0]['k'] ...) copied to another layout on the way in and 8
    result(s) on the way out', each side only where it has copies."""
    names = ", ".join(info["names"][:names_shown])
    more = " ..." if info["arguments"] > min(names_shown, len(info["names"])) else ""
    sides = []
    if info["arguments"]:
        sides.append(f"{info['arguments']} argument(s) ({names}{more}) on the way in")
    if info["results"]:
        sides.append(f"{info['results']} result(s) on the way out")
    return " and ".join(sides)


def _relayout_why(info: dict, op_time_s: float, chip: Chip) -> str:
    rate = info["bytes"] / op_time_s / 1e9 if op_time_s > 0 else 0.0
    return (
        f"copies that only change the layout of the step's arrays ({info['layouts']} for the "
        f"costliest, minor-to-major) at its boundary: {_relayout_sides(info, 4)}, so each "
        f"call moves those whole arrays once more each way ({info['bytes'] / 1e9:.2f} GB a "
        f"step at {rate:.0f} GB/s, against the HBM's {chip.hbm_bandwidth / 1e9:.0f}). Why XLA "
        "wants the other layout inside the step is not in the trace; on a v5e a KV cache "
        "merged as (batch, time, heads x head_dim) was so copied each token and the split "
        "(batch, time, heads, head_dim) one was not (docs/tpu.md)"
    )


def _relayout_wording(info: dict, lost: str, backend: str) -> tuple[str, str]:
    shapes = ", ".join(info["shapes"][:3])
    keep = (
        "Keep these arrays in the layout the step uses between calls: compile the step ahead "
        "of the loop (`jax.jit(step, in_shardings=..., out_shardings=...).lower(...).compile()`) "
        "with `Format(Layout.AUTO)` (jax.experimental.layout) for them, and `jax.device_put` "
        "them once into the compiled step's `input_formats`, so no call converts them: on a "
        "v5e a decoder's KV caches merged as (batch, time, heads x head_dim) so kept took "
        "1.46 ms a token against 4.07 ms (gpt_decode.py --auto-layout, docs/tpu.md). "
        if backend == "jax"
        else ""
    )
    return (
        f"arrays copied to another layout at the step's boundary, "
        f"{_relayout_sides(info, 2)}, each step ({shapes}): {lost}{LOST} (measured)",
        keep
        + ("Or give" if keep else "Give")
        + " the arrays a shape whose default layout is the one the step uses: on a v5e "
        "a KV cache merged as (batch, time, heads x head_dim) took 4.07 ms a token, 2.76 ms "
        "of it in these copies, against 1.64 ms with the heads split, (batch, time, heads, "
        "head_dim), and no copies.",
    )


def _wording(waste: MeasuredWaste, chip: Chip, backend: str, keras: bool) -> tuple[str, str]:
    """Title and fix; `keras`: Keras's `fit` runs the step (f32: its policy, not a Flax dtype)."""
    lost = fmt_time(waste.lost_s)
    if waste.kind == "lane_writes":
        return _lane_wording(waste.info, lost, backend)
    if waste.kind == "relayouts":
        return _relayout_wording(waste.info, lost, backend)
    if waste.kind == "off_peak":
        return (
            f"{waste.info['count']} op(s) far off the chip's peak ({waste.info['ratio']:.0f}x "
            f"the costliest's ideal): up to {lost}{LOST} (measured)",
            "Compute the op at its line in a form XLA's TPU code runs near the chip's peak, and "
            "measure: bf16 operands and result where f32 is not needed (on a v5e the DP-SGD "
            "example's per-example convolution gradient ran 116x faster so: its device step "
            "went from 3.39 to 0.16 ms, the program's step to about 0.9 ms, where its host then "
            "bounded it), a batched matmul (`jnp.einsum`) for a convolution or reduction XLA "
            "computes element by element, or a Pallas kernel. The figure is device time, the "
            "most the step gains (the op at its ideal) while the device bounds the step.",
        )
    if waste.kind == "random_bits":
        return (
            f"{waste.info['count']} op(s) making random bits with JAX's threefry PRNG: about "
            f"{lost}{LOST} (measured)",
            RANDOM_BITS_FIX,
        )
    if waste.kind == "f32" and keras:
        highest = set(waste.info.get("precision") or []) & {"high", "highest"}
        return _f32_title(waste, lost), KERAS_BF16_FIX + (KERAS_PRECISION if highest else "")
    if waste.kind == "f32":
        fix = (
            "Compute in bf16: bf16 params and inputs (or `dtype=jnp.bfloat16` in Flax layers), "
            "and drop `jax_default_matmul_precision='highest'` where f32 accuracy is not needed; "
            "keep f32 master weights in the optimizer."
            if backend == "jax"
            else "Compute in bf16: `with torch.autocast('xla', dtype=torch.bfloat16):` around the "
            "forward, and leave matmul precision at its default; keep f32 master weights."
        )
        return _f32_title(waste, lost), fix
    d = waste.info["head_dim"]
    kernel = (
        "a Pallas attention kernel (jax.experimental.pallas.ops.tpu splash/flash attention)"
        if backend == "jax"
        else "torch_xla's flash_attention"
    )
    title = (
        f"attention head_dim {d} on a {chip.mxu}-wide MXU: about {lost}{LOST} "
        f"(estimated from its ops' measured {fmt_time(waste.op_time_s)})"
    )
    if waste.info.get("kernels"):
        return title, (
            f"Use head_dim {chip.mxu} (keep the model width: width/{chip.mxu} heads, e.g. "
            f"`key_dim={chip.mxu}` in Keras's MultiHeadAttention): the attention kernel pads "
            f"each head of {d} to the MXU's {chip.mxu}."
        )
    return title, (
        f"Use head_dim {chip.mxu} (keep the model width: width/{chip.mxu} heads), or {kernel}, "
        "which packs heads onto the MXU."
    )


def _f32_title(waste: MeasuredWaste, lost: str) -> str:
    prec = "/".join(waste.info.get("precision") or ["default"])
    return f"{waste.info.get('count', 0)} matmul(s) run in f32 (precision {prec}): {lost}{LOST} (measured)"


def traced_text(runs: int, devices: int) -> str:
    """The traced steps as the card says them: `runs` counts each step once on every device
    that ran it (the divisor of a time summed over the devices)."""
    if devices <= 1:
        return f"{runs} traced step(s)"
    return f"{round(runs / devices)} traced step(s) on each of {devices} devices"
