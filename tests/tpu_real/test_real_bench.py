"""`tpuscope bench` on the real torch_tpu package: a clean refusal without a chip, the names it
uses, and (on a chip) training and the bench for real.

Run with the interpreter of .venv-torch-tpu (scripts/setup_torch_tpu.sh); the folder's
__init__ and real.py say what holds here (no chip: nothing may start the TPU runtime)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tpuscope
from tests.tpu_real import HAS_CHIP, NEEDS_CHIP
from tests.tpu_real.real import CHIP, tpuscope_run
from tpuscope.bench import tpu_modes
from tpuscope.bench.modes import Unavailable, precheck
from tpuscope.collect.trace_steps import ENV_TRACE_STEPS

# -- the bench ---------------------------------------------------------------------------------


@pytest.mark.skipif(CHIP, reason=f"{HAS_CHIP}: the bench runs for real")
def test_the_bench_refuses_cleanly_without_a_chip() -> None:
    assert torch.accelerator.current_accelerator() is None
    reason = tpu_modes.unavailable_reason()
    assert reason == (
        "torch_tpu is installed but found no TPU to initialise "
        "(torch.accelerator.current_accelerator() is none)"
    )
    with pytest.raises(Unavailable, match="found no TPU"):
        tpu_modes.make_runner("fused")
    assert precheck("torch_tpu", "strict") == "no TPU on this machine (TorchTPU runs only on a TPU)"


def test_the_bench_uses_names_the_package_has() -> None:
    from torch._dynamo.backends.registry import lookup_backend
    from torch_tpu._internal.sync import synchronize

    assert type(lookup_backend("tpu")).__name__ == "TpuBackend"
    assert "wait: bool" in synchronize.__doc__.splitlines()[0]
    for name in ("synchronize", "max_memory_allocated", "device_count", "current_accelerator"):
        assert callable(getattr(torch.accelerator, name))
    with pytest.raises(RuntimeError, match="Use torch.accelerator.synchronize"):
        torch.tpu.synchronize()  # why the bench waits through torch.accelerator


# -- a chip --------------------------------------------------------------------------------


@pytest.mark.tpu
@pytest.mark.skipif(not CHIP, reason=NEEDS_CHIP)
def test_torch_tpu_training_on_a_chip(tmp_path: Path) -> None:
    program = tmp_path / "train_tpu.py"
    program.write_text(
        "import torch\n"
        "model = torch.nn.Linear(128, 128).to('tpu')\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for i in range(6):\n"
        "    n = 32 if i < 5 else 16\n"
        "    loss = model(torch.ones(n, 128, device='tpu')).pow(2).mean()\n"
        "    loss.backward(); opt.step(); opt.zero_grad()\n"
        "print(float(loss))\n"
    )
    proc = tpuscope_run(
        tmp_path / "store", program, timeout=1200, env={**os.environ, ENV_TRACE_STEPS: "2:4"}
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = list((tmp_path / "store").iterdir())
    run = tpuscope.load_run(run_dir)
    proc_meta = run.meta["processes"][0]
    assert proc_meta["backend"] == "torch_tpu" and proc_meta["eager_mode"] == "strict"
    assert len(run.steps) == 6 and run.steps["compiles"].sum() >= 1
    assert proc_meta["trace_files"] and all(Path(f).is_file() for f in proc_meta["trace_files"])


@pytest.mark.tpu
@pytest.mark.skipif(not CHIP, reason=NEEDS_CHIP)
def test_bench_on_a_chip(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpuscope",
            "bench",
            "--store",
            str(tmp_path),
            "--model",
            "transformer",
            "--modes",
            "strict,fused,debug,compiled",
            "--backends",
            "torch_tpu",
            "--size",
            "tiny",
            "--steps",
            "6",
            "--warmup",
            "2",
            "--repeats",
            "1",
            "--quiet",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["mode"]: r for r in json.loads(proc.stdout) if r["backend"] == "torch_tpu"}
    assert all(r["status"] == "ok" for r in rows.values()), rows
    assert rows["fused"]["step_time_p50_ms"] < rows["strict"]["step_time_p50_ms"]
