"""tpuscope's TorchTPU adapter against the real torch_tpu package (no chip needed).

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

import datetime
import json
import os
import subprocess
import sys
import warnings
from importlib import metadata
from pathlib import Path

import pytest
import torch
import torch_tpu
import torch_tpu._internal.execution_mode as execution_mode
from torch_tpu._internal.execution_mode import execution_mode_impl
from torch_tpu._internal.utils import hardware

import tpuscope
from tests.conftest import ROOT
from tests.tpu_real import HAS_CHIP, NEEDS_CHIP
from tpuscope.bench import tpu_modes
from tpuscope.bench.modes import Unavailable, precheck
from tpuscope.collect.session import Session
from tpuscope.collect.torch_tpu.collector import (
    EAGER_MODES,
    ENV_VARS,
    CacheStats,
    TorchTpuApi,
    TpuCollector,
    duration_ns,
    mode_label,
)
from tpuscope.collect.trace_steps import ENV_TRACE_STEPS
from tpuscope.store import RunStore

CHIP = hardware.get_tpu_device_count() > 0  # torch_tpu's own test for a TPU (a PCI scan)


@pytest.fixture(scope="module")
def api() -> TorchTpuApi:
    return TorchTpuApi.from_package()


@pytest.fixture
def optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD(torch.nn.Linear(4, 2).parameters(), lr=0.1)


def _quietly(read):
    """Read a TorchTPU API that warns that it is experimental, without the warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read()


def _signature(cls: type, name: str) -> str:
    """A pybind property's declared signature, e.g. '(self: PerfStats) -> int'."""
    return (getattr(cls, name).fget.__doc__ or "").strip()


# -- the names the adapter reads ---------------------------------------------------------


def test_from_package_resolves_the_live_modules(api: TorchTpuApi) -> None:
    assert api.version == metadata.version("torch_tpu") == "0.2.0"
    # Without libtpu `import torch` dies here (a fatal check: TPU_LIBRARY_PATH is not set).
    assert "libtpu>=0.0.50" in metadata.requires("torch_tpu") and metadata.version("libtpu")
    assert api.tpu is sys.modules["torch.tpu"] is torch.tpu
    assert api.loader is sys.modules["torch_tpu._loader"] and api.torch is torch
    assert api.execution_mode is execution_mode
    assert api.device_initialized() is CHIP  # torch_tpu initialises the device only with a chip
    assert torch_tpu._loader._DEVICE_INITIALIZED is CHIP


def test_cache_stats_are_the_fields_the_wheel_declares(api: TorchTpuApi) -> None:
    """The pybind signatures say what a chip would fill in: counts as int, durations as
    timedelta, peak host bytes as `int | None`."""
    perf = torch.tpu._get_cache_stats()
    declared = {
        name: _signature(type(perf), name)
        for name in (
            "num_cache_reqs",
            "num_cache_hits",
            "num_compilations",
            "peak_compilation_host_memory_bytes",
            "per_entry_stats",
        )
    }
    assert all(doc.endswith("-> int") for name, doc in declared.items() if name.startswith("num_"))
    assert declared["peak_compilation_host_memory_bytes"].endswith("-> int | None")
    assert declared["per_entry_stats"].endswith("EntryStats]")
    entry = sys.modules[type(perf).__module__].EntryStats
    assert _signature(entry, "compilation_duration").endswith("-> datetime.timedelta")
    assert duration_ns(datetime.timedelta(seconds=1.5)) == 1_500_000_000
    stats = api.cache_stats()
    expected = (perf.num_cache_reqs, perf.num_cache_hits, perf.num_compilations)
    assert (
        isinstance(stats, CacheStats)
        and (stats.requests, stats.hits, stats.compilations) == expected
    )
    assert len(stats.entry_ns) == len(perf.per_entry_stats)


def test_every_recorded_environment_variable_is_one_torch_tpu_reads() -> None:
    """Searched in the package's Python and in the glue library built for this torch."""
    package = Path(torch_tpu.__file__).parent
    glue = f"_{torch.__version__.split('+')[0].replace('.', '_')}"
    files = [*package.rglob("*.py"), *(p for p in package.rglob("*.so") if glue in p.name)]
    text = b"".join(path.read_bytes() for path in files)
    assert [name for name in ENV_VARS if name.encode() not in text] == []


# -- eager modes ---------------------------------------------------------------------------


def test_the_mode_table_is_the_cpp_enum() -> None:
    assert set(EAGER_MODES) == set(execution_mode_impl._EagerMode.__members__)
    public = _quietly(lambda: torch.tpu.EagerMode)
    assert {"DEFER_NEVER", "DEFER_AND_FUSE", "DEFER_NEVER_AND_LAUNCH_BLOCKING"} <= set(
        public.__members__
    )
    assert all(hasattr(public, name) for name in tpu_modes._EAGER_MODE.values())


def test_eager_mode_reads_each_mode_set_by_the_program(api: TorchTpuApi) -> None:
    public = _quietly(lambda: torch.tpu.EagerMode)
    seen = {}
    for member in [*public, *execution_mode_impl._EagerMode.__members__.values()]:
        with _quietly(lambda member=member: torch.tpu.set_eager_mode(member)):
            seen[str(member)] = mode_label(api.eager_mode())
    assert api.eager_mode() == "DEFER_NEVER"  # the default, back after the context
    assert seen["EagerMode.DEFER_NEVER"] == seen["_EagerMode.DEFER_NEVER"] == "strict"
    assert seen["EagerMode.DEFER_AND_FUSE"] == "fused"
    assert seen["EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING"] == "debug"
    assert seen["EagerMode._INTERNAL_COMPILE_FX_GRAPH"] == "compile_fx_graph"
    assert seen["_EagerMode.INTERNAL_DEFER_ALL"] == "defer_all"


MODE_ENVS = {
    "fused": {"TORCH_TPU_DEFER_AND_FUSE": "1"},
    "debug": {"TORCH_TPU_LAUNCH_BLOCKING": "1"},
    "both": {"TORCH_TPU_DEFER_AND_FUSE": "1", "TORCH_TPU_LAUNCH_BLOCKING": "1"},
}


def test_environment_variables_set_the_first_mode() -> None:
    """TorchTPU reads them once, at import: one fresh process each, started together."""
    code = (
        "from tpuscope.collect.torch_tpu.collector import TorchTpuApi, mode_label\n"
        "print('MODE', mode_label(TorchTpuApi.from_package().eager_mode()), flush=True)\n"
        "import os; os._exit(0)\n"
    )  # skips torch_tpu's slow interpreter shutdown
    procs = {
        case: subprocess.Popen(
            [sys.executable, "-c", code],
            env={**os.environ, **env},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case, env in MODE_ENVS.items()
    }
    modes = {}
    for case, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        modes[case] = next(
            (line[5:] for line in out.splitlines() if line.startswith("MODE ")), err[-2000:]
        )
    assert modes == {"fused": "fused", "debug": "debug", "both": "debug"}  # launch-blocking wins


def test_cpu_fallback_setting_follows_the_program(api: TorchTpuApi) -> None:
    assert api.cpu_fallback_enabled() is False  # TorchTPU's default
    execution_mode.enable_cpu_fallback = True
    try:
        assert api.cpu_fallback_enabled() is True
    finally:
        execution_mode.enable_cpu_fallback = False


# -- profiler --------------------------------------------------------------------------------


def test_profile_is_a_torch_profiler_with_the_tpu_config(api: TorchTpuApi, tmp_path: Path) -> None:
    """Built, not entered: entering starts the TPU runtime."""
    profile = _quietly(lambda: api.profile(str(tmp_path), rank=3))
    assert isinstance(profile, torch.profiler.profile)
    config = profile.experimental_config
    assert isinstance(config, _quietly(lambda: torch.tpu.profiler.TpuProfilerConfig))
    assert f"run_dir:{tmp_path}" in config.custom_profiler_config
    assert 'worker_rank:"3"' in config.custom_profiler_config
    assert torch.profiler.ProfilerActivity.PrivateUse1 in profile.activities


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
    with _quietly(lambda: torch.tpu.set_eager_mode(torch.tpu.EagerMode.DEFER_AND_FUSE)):
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
    optimizers = _quietly(lambda: torch.tpu.optimizers)
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
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpuscope",
            "run",
            "--store",
            str(store),
            "--quiet",
            sys.executable,
            str(program),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "has torch.tpu True" in proc.stdout and "collection disabled" not in proc.stderr
    [run_dir] = store.iterdir()
    [meta] = tpuscope.load_run(run_dir).meta["processes"]
    assert meta["torch_tpu_version"] == "0.2.0" and meta["versions"]["torch"] == torch.__version__
    assert meta["torch_tpu_device_initialized"] is CHIP
    if not CHIP:
        assert "backend" not in meta and len(tpuscope.load_run(run_dir).steps) == 0


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
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tpuscope",
            "run",
            "--store",
            str(tmp_path / "store"),
            "--quiet",
            sys.executable,
            str(program),
        ],
        env={**os.environ, ENV_TRACE_STEPS: "2:4"},
        capture_output=True,
        text=True,
        timeout=1200,
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
