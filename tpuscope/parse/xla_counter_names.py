"""Which torch_xla counters count ops run on the CPU: one rule for the live collector and for
the metrics reports and PT_XLA_DEBUG logs a user imports (no runtime, no pandas)."""

from __future__ import annotations

OWN_NAMESPACES = (
    "xla",
)  # torch_xla's counters of its own (lowered) kernels: `xla::add`, `xla::_to_cpu`


def is_fallback_counter(name: str) -> bool:
    """A counter of an op torch_xla ran on the CPU. Its fallback kernel (aten_cpu_fallback.cpp,
    `xla_fallback`) counts every op under the operator's own name, `<namespace>::<op>[.overload]`
    (`aten::nonzero`, `torchvision::nms`, `mylib::op` of a `torch.library` op with a CPU kernel
    only), the names `executed_fallback_ops()` lists; torch_xla's lowered kernels count under
    `xla::` and its other counters have no namespace. Value reads (`aten::_local_scalar_dense`)
    are counted here too: the analysis tells them apart (analyze/judge.is_value_read)."""
    namespace, sep, op = name.partition("::")
    return bool(sep and namespace and op) and namespace not in OWN_NAMESPACES
