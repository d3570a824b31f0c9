"""PyTorch/XLA (torch_xla 2.x) in each eager mode.

- strict:   `torch_xla.experimental.eager_mode(True)`: every ATen op is compiled
            (once per op and shape) and launched as soon as Python reaches it.
- debug:    strict plus a wait for the device after every ATen op. torch_xla has no
            launch-blocking switch for eager ops (`XLA_SYNC_WAIT` only makes the
            step marker wait), so a TorchDispatchMode calls
            `torch_xla._XLAC._xla_wait_device_ops` after each op. A dispatch mode
            sees every op the autograd engine runs too, backward included, which is
            the same coverage as TorchTPU's DEFER_NEVER_AND_LAUNCH_BLOCKING.
- fused:    lazy tensors (the default): the step is traced and cut into one graph
            by one `torch_xla.sync()` per step.
- compiled: `torch_xla.compile(step)`.
- dynamo:   `torch.compile(step, backend="openxla")`.
Each step ends with one `torch_xla.sync()` (the step boundary tpuscope's collector
records; `torch_xla.compile` makes its own) and a wait for the device, so the
timer stops when the work is done.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch_xla
import torch_xla.debug.metrics as met
from torch.utils._python_dispatch import TorchDispatchMode

from tpuscope.bench import models
from tpuscope.bench.models import Workload
from tpuscope.bench.modes import CompileCount, ModeRunner

_MECHANISM = {
    "strict": "torch_xla.experimental.eager_mode(True)",
    "debug": "eager_mode(True) + TorchDispatchMode calling _xla_wait_device_ops after every ATen op",
    "fused": "lazy tensors, one torch_xla.sync() per step",
    "compiled": "torch_xla.compile(step)",
    "dynamo": 'torch.compile(step, backend="openxla")',
}
# Lazy graphs compile into CompileTime; eager mode compiles each op into EagerOpCompileTime.
_COMPILE_METRICS = ("CompileTime", "EagerOpCompileTime")


class BlockAfterEachOp(TorchDispatchMode):
    """Launch-blocking for torch_xla: wait for the device after every ATen op."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: Any = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        torch_xla._XLAC._xla_wait_device_ops([])
        return out


class XlaRunner(ModeRunner):
    backend = "torch_xla"

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.mechanism = _MECHANISM[mode]
        if mode in ("strict", "debug"):
            torch_xla.experimental.eager_mode(True)
        self._device = torch_xla.device()
        self._blocker = BlockAfterEachOp() if mode == "debug" else None
        self._steps = 0

    def device(self) -> Any:
        return self._device

    def build(self, model: str, size: str, seed: int, steps: int) -> Workload:
        return models.build(model, size, self._device, seed=seed, steps=steps)

    def wrap(self, step: Callable[..., Any]) -> Callable[..., Any]:
        if self.mode == "compiled":
            return torch_xla.compile(step)
        if self.mode == "dynamo":
            return torch.compile(step, backend="openxla")
        return step

    def run_step(self, fn: Callable[..., Any], workload: Workload, args: tuple[Any, ...]) -> Any:
        self._steps += 1
        if self._blocker is None:
            return fn(*args)
        with self._blocker:
            return fn(*args)

    def finish(self, out: Any) -> None:
        if (
            self.mode != "compiled"
        ):  # torch_xla.compile ends with its own sync: one boundary per step
            torch_xla.sync()
        torch_xla._XLAC._xla_wait_device_ops([])

    def compile_count(self) -> CompileCount:
        count = met.counter_value("UncachedCompile") or 0
        total = 0.0
        for name in _COMPILE_METRICS:
            data = met.metric_data(name)
            total += data[1] if data else 0.0
        return CompileCount(count=int(count), ns=int(total))

    def device_memory(self) -> tuple[int | None, str | None]:
        import torch_xla.core.xla_model as xm

        try:
            return int(xm.get_memory_info(self._device)["peak_bytes_used"]), None
        except (RuntimeError, KeyError) as exc:
            return None, f"torch_xla: {str(exc).splitlines()[0][:120]}"

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"mechanism": self.mechanism}
        if self._blocker is not None and self._steps:
            info["blocking_waits_per_step"] = round(self._blocker.ops / self._steps, 1)
        return info


def make_runner(mode: str) -> XlaRunner:
    return XlaRunner(mode)
