"""torch_xla's fixes for recompiles, worded for what changed (a torch_xla run gets these only).

torch_xla names a compile's cause ("user torch_xla.sync", "most likely user code
trying to access tensor value") and the detectors know what changed between two
graphs of one family; the fix follows from both.
"""

from __future__ import annotations

from tpuscope.analyze.contract import ShapeChurnFacet
from tpuscope.detect.common import VALUE_READ_CAUSE

SAME_SHAPES = "same input and output shapes: the graph itself changed"

CACHE_FIX = (
    "Compiles that must stay can be kept across runs with torch_xla's persistent cache: "
    "`torch_xla.runtime.initialize_cache('/path/to/cache', readonly=False)` before the first step."
)
NO_SYNC_FIX = (
    "The loop never calls torch_xla.sync(): its steps end at optimizer steps, and its graphs run "
    "only when a value is read. Nothing materialises the updated parameters, so each read "
    "compiles a new graph holding every step so far (it grows with the loop). Call "
    "torch_xla.sync() (or xm.mark_step()) after optimizer.step(), or wrap the step in "
    "torch_xla.compile(), and read values after it."
)
# The words other rules need, for a torch_xla run (detect/advice.py picks by the run's backend;
# jax_advice.ADVICE holds the same topics in JAX's words).
ADVICE = {
    "host_bound": (
        "Keep the device fed: overlap input with MpDeviceLoader/prefetch, remove .item()/print of "
        "tensors from the step, wrap the step in torch_xla.compile so tracing is cached, and raise "
        "the batch so each step has more device work."
    ),
    "bf16": (
        "Run the model in bf16: `with torch.autocast('xla', dtype=torch.bfloat16):` around the "
        "forward; keep f32 master weights in the optimizer."
    ),
    "attention_kernel": "torch_xla's Pallas flash_attention (torch_xla.experimental.custom_kernel)",
    "same_step_on_hosts": (
        "Make every host run the same step: keep rank-dependent work (logging, `.item()`, checkpoint "
        "writes) out of the traced step or behind `xm.add_step_closure`/every-N-steps on all hosts "
        "alike, and give every host's data the same shapes (pad to a common size), so each host "
        "compiles and runs the same graphs."
    ),
    "persistent_cache": (
        "torch_xla's persistent cache "
        "(`torch_xla.runtime.initialize_cache('/path/to/cache', readonly=False)`)"
    ),
    "drop_last": "DataLoader(drop_last=True)",
}

INSIDE_FIX = (
    "The graph's inputs keep their shapes; a size made inside the step changed (a tensor created on "
    "the device at a size that varies, `torch.randn(n, ..., device=...)`, `torch.arange(n, "
    "device=...)`, or a Python number used in a shape): keep that size fixed, or to a few values "
    "(pad to them and mask)."
)
IMPORTED_FIX = (
    "Run it under `tpuscope run` (or with PT_XLA_DEBUG_LEVEL=1) to see which line compiles "
    "and what changed between graphs; usually a shape that varies per step (pad it to a few "
    "bucket sizes) or a Python number traced as a constant (pass it as a device tensor)."
)


def _shape_change(changes: list[str]) -> bool:
    return any(("->" in c and "[" in c) or "graph input size" in c for c in changes)


def _bucketing(facet: ShapeChurnFacet, data_dependent: list[str]) -> str:
    lead = f"dim {facet.dim} of {facet.arg_name}"
    if data_dependent and facet.dtype in ("s64", "s32"):
        return (
            f"The length of {lead} depends on the data ({', '.join(data_dependent)} ran on the CPU): "
            "replace that op with a static-shape form (see the cpu_fallback finding) instead of "
            "bucketing."
        )
    plan = (
        f"pad {lead} to the buckets {facet.plan} in the data pipeline (a collate_fn that pads each "
        "batch to the next bucket, or pad_to_multiple_of in a tokenizer) and mask the padding"
        if facet.plan is not None
        else f"pad {lead} to one fixed size (the largest, {facet.values[-1]}) and mask the padding"
    )
    last_batch = (
        (
            " If only the last batch of an epoch is smaller, drop it (DataLoader(drop_last=True)) "
            "or pad it to the full batch."
        )
        if facet.dim == 0 and len(facet.values) == 2
        else ""
    )
    return f"Keep the input shapes fixed: {plan}.{last_batch}"


def recompile_fix(
    changes: list[str], causes: list[str], facet: ShapeChurnFacet | None, data_dependent: list[str]
) -> str:
    """The concrete change, from what changed, the churn facet and torch_xla's stated cause."""
    if any(VALUE_READ_CAUSE in c for c in causes):
        return (
            "A value read in the middle of the step (.item(), print(t), bool(t), x[mask]) cuts the "
            "graph there, and the piece before it changed. Move the read after torch_xla.sync() "
            "(or into xm.add_step_closure) and keep data-dependent shapes out of the step."
        )
    if facet:
        return _bucketing(facet, data_dependent)
    if changes and all(c.startswith("output ") for c in changes):
        return INSIDE_FIX
    if _shape_change(changes):
        return (
            "Keep input shapes fixed from step to step: pad the varying dim to a few bucket sizes "
            "or to the maximum, and mask the padding."
        )
    if any("graph inputs" in c or "added" in c or "removed" in c for c in changes):
        return (
            "A different set of tensors enters the graph: create per-step tensors the same way "
            "every step (on the device, same dtype) and avoid Python branches inside the step."
        )
    if SAME_SHAPES in changes:
        return (
            "The graph changed with the same input and output shapes: a Python number that changes "
            "every step (a learning rate, a step counter) is traced as a constant. Pass it as a device "
            "tensor, e.g. torch.tensor(lr, device=device), and update it in place."
        )
    return (
        "What changed between the graphs is not known: per-graph shapes were not recorded. Run it again "
        "with `tpuscope run --deep` (or TPUSCOPE_HLO_SHAPES=1) to see the argument and dim that changed "
        "and the fix for it."
    )
