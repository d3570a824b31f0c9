"""What every real-torch_tpu test shares (imported, unlike conftest.py): whether a chip is here
and two readers of the wheel's API.

Run with the interpreter of .venv-torch-tpu (scripts/setup_torch_tpu.sh), which has torch
2.13.0 (CPU) and torch_tpu 0.2.0; tests/test_tpu_real.py runs this folder there from the
main suite. On a host without a TPU, `import torch` loads torch_tpu (torch's
device-backend entry point) and registers `torch.tpu`, but its PCI scan finds no chip, so
the "tpu" device is never registered and `_DEVICE_INITIALIZED` stays False. Everything
here is read from the real module; nothing here may start the TPU runtime (a CPU
`backward()` or entering the profiler does: it then waits minutes for a GCE metadata
server), so no test uses autograd. Tests that need a chip skip with that reason.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch_tpu._internal.utils import hardware

from tests.conftest import tpuscope_cmd

CHIP = hardware.get_tpu_device_count() > 0  # torch_tpu's own test for a TPU (a PCI scan)


def quietly(read: Callable[[], Any]) -> Any:
    """Read a TorchTPU API that warns that it is experimental, without the warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read()


def signature(cls: type, name: str) -> str:
    """A pybind property's declared signature, e.g. '(self: PerfStats) -> int'."""
    return (getattr(cls, name).fget.__doc__ or "").strip()


def tpuscope_run(
    store: Path, program: Path, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`tpuscope run --quiet` of a Python program in this venv, its output captured."""
    command = tpuscope_cmd("run", "--store", str(store), "--quiet", sys.executable, str(program))
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
