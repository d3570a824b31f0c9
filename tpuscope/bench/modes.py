"""How each backend makes each eager mode: the common interface and the registry.

A ModeRunner sets a backend into one mode for the whole process (the worker makes
a fresh process per mode, so nothing leaks between modes), then runs steps of a
Workload in that mode and reports the backend's own compile counters. The
backend adapters live in xla_modes, tpu_modes and jax_modes and are imported only
inside the worker process that needs them.
"""

from __future__ import annotations

import importlib
import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tpuscope.bench.models import Workload
from tpuscope.bench.spec import BACKENDS, MODES

# backend -> mode -> None (supported) or the reason it does not exist there.
SUPPORT: dict[str, dict[str, str | None]] = {
    "torch_xla": {m: None for m in MODES},
    "torch_tpu": {
        "strict": None,
        "fused": None,
        "debug": None,
        "compiled": None,
        "dynamo": "on TorchTPU torch.compile is the compiled mode",
    },
    "jax": {
        "strict": None,
        "fused": None,
        "debug": None,
        "compiled": "on JAX jax.jit is the fused mode; there is no separate whole-step compile",
        "dynamo": "TorchDynamo is PyTorch only",
    },
}

# Bundled models each backend has; torch backends share tpuscope.bench.models.
BACKEND_MODELS: dict[str, tuple[str, ...]] = {"jax": ("mlp",)}

_ADAPTERS = {
    "torch_xla": "tpuscope.bench.xla_modes",
    "torch_tpu": "tpuscope.bench.tpu_modes",
    "jax": "tpuscope.bench.jax_modes",
}
_PACKAGES = {"torch_xla": "torch_xla", "torch_tpu": "torch_tpu", "jax": "jax"}


class Unavailable(Exception):
    """This (backend, mode) cannot run here; the message says why, for the report."""


@dataclass
class CompileCount:
    """Cumulative compiles so far in this process; ns is None when the backend keeps no time."""

    count: int
    ns: int | None


class ModeRunner(ABC):
    """One backend put into one mode for the life of the process."""

    backend: str = ""
    mode: str = ""
    mechanism: str = ""  # how the mode is made, one line, stored in the run's meta

    @abstractmethod
    def device(self) -> Any: ...

    @abstractmethod
    def build(self, model: str, size: str, seed: int, steps: int) -> Workload:
        """A bundled workload for this backend (Unavailable if it has no such model)."""

    def wrap(self, step: Callable[..., Any]) -> Callable[..., Any]:
        """The step as this mode runs it (compiled modes compile it here)."""
        return step

    def run_step(self, fn: Callable[..., Any], workload: Workload, args: tuple[Any, ...]) -> Any:
        return fn(*args)

    @abstractmethod
    def finish(self, out: Any) -> None:
        """Return only when everything the step launched has finished on the device."""

    @abstractmethod
    def compile_count(self) -> CompileCount: ...

    def device_memory(self) -> tuple[int | None, str | None]:
        """(peak device bytes, None) or (None, why the backend cannot tell)."""
        return None, f"{self.backend} reports no device memory here"

    def describe(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism}


def precheck(
    backend: str, mode: str, model: str | None = None, script: str | None = None
) -> str | None:
    """Why (backend, mode, model) cannot run, found without importing the framework; None if it may."""
    if backend not in BACKENDS:
        return f"unknown backend {backend!r}"
    if mode not in MODES:
        return f"unknown mode {mode!r}"
    reason = SUPPORT[backend][mode]
    if reason:
        return reason
    models = BACKEND_MODELS.get(backend)
    if models is not None and model is not None and not script and model not in models:
        return f"no {backend} version of model {model!r} (it has: {', '.join(models)})"
    if importlib.util.find_spec(_PACKAGES[backend]) is None:
        return f"{_PACKAGES[backend]} is not installed" + (
            " (TorchTPU needs torch>=2.11 and a TPU VM)" if backend == "torch_tpu" else ""
        )
    if backend == "torch_tpu":
        from tpuscope.launch.env import tpu_present

        if not tpu_present():
            return "no TPU on this machine (TorchTPU runs only on a TPU)"
    return None


def runner_for(backend: str, mode: str) -> ModeRunner:
    """Import the backend and put it into `mode`; raises Unavailable with the reason."""
    reason = precheck(backend, mode)
    if reason:
        raise Unavailable(reason)
    module = importlib.import_module(_ADAPTERS[backend])
    return module.make_runner(mode)
