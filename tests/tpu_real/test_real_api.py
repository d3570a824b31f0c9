"""The names tpuscope's TorchTPU adapter reads, against the real torch_tpu package: its
API, cache stats, environment variables, eager modes and profiler config.

Run with the interpreter of .venv-torch-tpu (scripts/setup_torch_tpu.sh); the folder's
__init__ and real.py say what holds here (no chip: nothing may start the TPU runtime)."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import torch
import torch_tpu
import torch_tpu._internal.execution_mode as execution_mode
from torch_tpu._internal.execution_mode import execution_mode_impl

from tests.conftest import ROOT
from tests.tpu_real.real import CHIP, quietly, signature
from tpuscope.bench import tpu_modes
from tpuscope.collect.torch_tpu.collector import (
    EAGER_MODES,
    ENV_VARS,
    CacheStats,
    TorchTpuApi,
    duration_ns,
    mode_label,
)

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
        name: signature(type(perf), name)
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
    assert signature(entry, "compilation_duration").endswith("-> datetime.timedelta")
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
    public = quietly(lambda: torch.tpu.EagerMode)
    assert {"DEFER_NEVER", "DEFER_AND_FUSE", "DEFER_NEVER_AND_LAUNCH_BLOCKING"} <= set(
        public.__members__
    )
    assert all(hasattr(public, name) for name in tpu_modes._EAGER_MODE.values())


def test_eager_mode_reads_each_mode_set_by_the_program(api: TorchTpuApi) -> None:
    public = quietly(lambda: torch.tpu.EagerMode)
    seen = {}
    for member in [*public, *execution_mode_impl._EagerMode.__members__.values()]:
        with quietly(lambda member=member: torch.tpu.set_eager_mode(member)):
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
    profile = quietly(lambda: api.profile(str(tmp_path), rank=3))
    assert isinstance(profile, torch.profiler.profile)
    config = profile.experimental_config
    assert isinstance(config, quietly(lambda: torch.tpu.profiler.TpuProfilerConfig))
    assert f"run_dir:{tmp_path}" in config.custom_profiler_config
    assert 'worker_rank:"3"' in config.custom_profiler_config
    assert torch.profiler.ProfilerActivity.PrivateUse1 in profile.activities
