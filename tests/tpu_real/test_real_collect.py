"""tpuscope's TorchTPU collector on the real torch_tpu package: its step hook, the optimizer
patches, and `tpuscope run` hooking torch_tpu through autostart.

Run with the interpreter of .venv-torch-tpu (scripts/setup_torch_tpu.sh); the folder's
__init__ and real.py say what holds here (no chip: nothing may start the TPU runtime)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch_tpu

import tpuscope
from tests.tpu_real import HAS_CHIP
from tests.tpu_real.real import CHIP, quietly, tpuscope_run
from tpuscope.collect.session import Session
from tpuscope.collect.torch_tpu.collector import TorchTpuApi, TpuCollector
from tpuscope.store import RunStore

# -- the collector ------------------------------------------------------------------------


def _collect(tmp_path: Path, api: TorchTpuApi) -> tuple[Session, TpuCollector]:
    session = Session(RunStore(tmp_path).new_run("tpu_real")).start(install_handlers=False)
    return session, TpuCollector(session, api).install()


@pytest.mark.skipif(CHIP, reason=f"{HAS_CHIP}: the device is initialised and steps are recorded")
def test_nothing_is_recorded_without_a_chip(tmp_path: Path, api: TorchTpuApi, optimizer) -> None:
    session, collector = _collect(tmp_path, api)
    for _ in range(3):
        optimizer.step()
    collector.uninstall()
    session.close()
    meta = session.proc_meta
    assert collector.step == 0 and "backend" not in meta and "eager_mode" not in meta
    assert meta["torch_tpu_version"] == "0.2.0" and meta["torch_tpu_device_initialized"] is False
    assert len(tpuscope.load_run(session.run_dir).steps) == 0


def test_steps_through_the_real_getters_once_the_device_flag_is_up(
    tmp_path: Path, api: TorchTpuApi, optimizer, monkeypatch
) -> None:
    """Only the flag a chip would raise is set: the mode, cache statistics, fallback
    setting and device queries are the real package's (zeros without a chip)."""
    monkeypatch.setattr(torch_tpu._loader, "_DEVICE_INITIALIZED", True)
    session, collector = _collect(tmp_path, api)
    optimizer.step()
    with quietly(lambda: torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_AND_FUSE)):
        optimizer.step()
    collector.uninstall()
    session.close()
    run = tpuscope.load_run(session.run_dir)
    meta = run.meta["processes"][0]
    assert (meta["backend"], meta["eager_mode"], meta["torch_tpu_eager_mode"]) == (
        "torch_tpu",
        "strict",
        "DEFER_NEVER",
    )
    assert meta["torch_tpu_cpu_fallback"] is False
    assert meta["device_count"] == torch.accelerator.device_count()
    assert list(run.steps["boundary"]) == ["optimizer.step"] * 2
    assert list(run.steps["compiles"]) == [0, 0] and list(run.steps["executions"]) == [0, 0]
    assert sorted(run.metrics["name"]) == [
        "torch_tpu.eager_mode/fused",
        "torch_tpu.eager_mode/strict",
    ]


def test_torch_tpu_optimizer_patch_keeps_the_step_hook(optimizer) -> None:
    """torch_tpu rewraps optimizer steps to avoid graph breaks; the global post-hook the
    collector counts steps with must still fire."""
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch_tpu._internal import optim

    calls = []
    handle = register_optimizer_step_post_hook(lambda *args: calls.append(args[0]))
    optim.patch_optimizer_graph_breaks()
    try:
        optimizer.step()
    finally:
        optim.unpatch_optimizer_graph_breaks()
        handle.remove()
    assert calls == [optimizer]


def test_torch_tpu_functional_optimizers_give_no_step_boundary() -> None:
    """torch.tpu.optimizers are not torch.optim optimizers: their step() does not fire
    PyTorch's optimizer hooks, so the collector sees no steps (docs/backends.md)."""
    optimizers = quietly(lambda: torch.tpu.optimizers)
    for name in ("Sgd", "AdamW", "Muon"):
        assert not issubclass(getattr(optimizers, name), torch.optim.Optimizer)


def test_tpuscope_run_hooks_torch_tpu_through_autostart(tmp_path: Path) -> None:
    """The real import path: torch loads torch_tpu, autostart's import hook installs the
    collector, which waits for a device that never comes here."""
    program = tmp_path / "train.py"
    program.write_text(
        "import torch\n"
        "opt = torch.optim.SGD(torch.nn.Linear(4, 2).parameters(), lr=0.1)\n"
        "for _ in range(3):\n"
        "    opt.step()\n"
        "print('has torch.tpu', hasattr(torch, 'tpu'))\n"
    )
    store = tmp_path / "store"
    proc = tpuscope_run(store, program, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "has torch.tpu True" in proc.stdout and "collection disabled" not in proc.stderr
    [run_dir] = store.iterdir()
    [meta] = tpuscope.load_run(run_dir).meta["processes"]
    assert meta["torch_tpu_version"] == "0.2.0" and meta["versions"]["torch"] == torch.__version__
    assert meta["torch_tpu_device_initialized"] is CHIP
    if not CHIP:
        assert "backend" not in meta and len(tpuscope.load_run(run_dir).steps) == 0
