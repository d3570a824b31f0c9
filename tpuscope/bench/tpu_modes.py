"""TorchTPU (`torch_tpu`, PyTorch's native TPU backend, device "tpu") in each eager mode.

- strict:   `torch.tpu.EagerMode.DEFER_NEVER` (TorchTPU's default): async dispatch, one op at a time.
- debug:    `DEFER_NEVER_AND_LAUNCH_BLOCKING`: like CUDA_LAUNCH_BLOCKING, every op waits.
- fused:    `DEFER_AND_FUSE`: ops are deferred and fused into XLA programs; the step
            ends by materialising what is pending.
- compiled: `torch.compile(step, backend="tpu")`.
The mode is pushed with the `torch.tpu.set_eager_mode(...)` context manager for the
whole process (the worker is a fresh process per mode). Facts used here, from the
torch_tpu 0.2.0 wheel: `torch.tpu.synchronize()` refuses calls from user code on
torch>=2.11, so the wait is `torch.accelerator.synchronize()` (`torch.tpu.is_available()`
refuses the same way: availability is `torch.accelerator.current_accelerator()`);
compile statistics come from `torch.tpu._get_cache_stats()`, read as the collector
reads them (`CacheStats`). Steps need a TPU and were not run on this project's CPU
machines; there the runner refuses with `unavailable_reason()`'s words, which
tests/tpu_real checks against the real package.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from tpuscope.bench import models
from tpuscope.bench.models import Workload
from tpuscope.bench.modes import CompileCount, ModeRunner, Unavailable
from tpuscope.collect.torch_tpu.collector import CacheStats

_EAGER_MODE = {
    "strict": "DEFER_NEVER",
    "debug": "DEFER_NEVER_AND_LAUNCH_BLOCKING",
    "fused": "DEFER_AND_FUSE",
}


class TpuRunner(ModeRunner):
    backend = "torch_tpu"

    def __init__(self, mode: str) -> None:
        self.mode = mode
        reason = unavailable_reason()
        if reason is not None:
            raise Unavailable(reason)
        self._stack = contextlib.ExitStack()
        eager = _EAGER_MODE.get(mode, "DEFER_NEVER")  # compiled: ops outside the graph run strict
        self._stack.enter_context(torch.tpu.set_eager_mode(getattr(torch.tpu.EagerMode, eager)))
        self.mechanism = (
            'torch.compile(step, backend="tpu")'
            if mode == "compiled"
            else f"torch.tpu.set_eager_mode(EagerMode.{eager})"
        )
        self._device = torch.device("tpu")

    def device(self) -> Any:
        return self._device

    def build(self, model: str, size: str, seed: int, steps: int) -> Workload:
        return models.build(model, size, self._device, seed=seed, steps=steps)

    def wrap(self, step: Callable[..., Any]) -> Callable[..., Any]:
        return torch.compile(step, backend="tpu") if self.mode == "compiled" else step

    def finish(self, out: Any) -> None:
        if self.mode == "fused":
            _materialize_pending()
        torch.accelerator.synchronize()

    def compile_count(self) -> CompileCount:
        stats = CacheStats.of(torch.tpu._get_cache_stats())
        times = [ns for ns in stats.entry_ns if ns is not None]
        known = len(times) == len(stats.entry_ns)
        return CompileCount(count=stats.compilations, ns=sum(times) if known else None)

    def device_memory(self) -> tuple[int | None, str | None]:
        try:
            return int(torch.accelerator.max_memory_allocated()), None
        except (RuntimeError, AttributeError) as exc:
            return None, f"torch_tpu: {str(exc).splitlines()[0][:120]}"

    def describe(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "device_kind": torch.tpu.get_device_name()}


def unavailable_reason() -> str | None:
    """Why TorchTPU cannot run the bench in this process, or None when it can.

    torch_tpu is imported by `import torch` wherever it is installed, but it registers the
    "tpu" device only when its PCI scan finds a chip, so the current accelerator says
    whether TorchTPU has a TPU (a GPU host with torch_tpu installed has "cuda" there).
    """
    if not hasattr(torch, "tpu"):
        return "torch_tpu is not loaded (torch.tpu is missing: not installed, or autoload off)"
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is None or accelerator.type != "tpu":
        found = "none" if accelerator is None else accelerator.type
        return (
            "torch_tpu is installed but found no TPU to initialise "
            f"(torch.accelerator.current_accelerator() is {found})"
        )
    return None


def _materialize_pending() -> None:
    """End a DEFER_AND_FUSE step: launch every deferred op, as torch_xla.sync() does for lazy tensors."""
    from torch_tpu._internal.sync import synchronize

    synchronize(wait=True)


def make_runner(mode: str) -> TpuRunner:
    return TpuRunner(mode)
