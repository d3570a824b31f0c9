"""The TorchTPU adapter (tpuscope.collect.torch_tpu.collector).

torch_tpu needs torch>=2.11 and, for anything but its settings, a TPU. Here the
collector runs with real torch (optimizer hooks, warnings), a real Session and real
Parquet, against a stand-in for the parts of torch_tpu that only a chip makes move
(cache statistics, the device flag, the profiler's output), shaped like torch_tpu
0.2.0's objects. The same adapter against the real package (no chip) and on a chip:
tests/tpu_real/, run in .venv-torch-tpu by tests/test_tpu_real.py.
"""

from __future__ import annotations

import enum
import socket
import time
import warnings
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

import tpuscope
from tpuscope.collect.session import Session
from tpuscope.collect.torch_tpu.collector import (
    CacheStats,
    TorchTpuApi,
    TpuCollector,
    duration_ns,
    mode_label,
)
from tpuscope.collect.trace_steps import ENV_TRACE_STEPS
from tpuscope.detect.run_analysis import analyze
from tpuscope.store import RunStore

torch = pytest.importorskip("torch")


# -- a stand-in for the chip-side of torch_tpu 0.2.0 ----------------------------------------


class EagerMode(enum.Enum):  # torch.tpu.EagerMode: members as in torch_tpu 0.2.0
    DEFER_AND_FUSE = 0
    DEFER_NEVER = 1
    DEFER_NEVER_AND_LAUNCH_BLOCKING = 2


class Chip:
    """The TPU's compilation cache: what torch.tpu._get_cache_stats() reports."""

    def __init__(self) -> None:
        self.requests = self.hits = 0
        self.entries: list[SimpleNamespace] = []

    def compile(self, seconds: float) -> None:
        self.requests += 1
        self.entries.append(
            SimpleNamespace(
                compilation_duration=timedelta(seconds=seconds), last_read=None, read_count=1
            )
        )

    def hit(self, n: int = 1) -> None:
        self.requests += n
        self.hits += n

    def perf_stats(self) -> SimpleNamespace:  # a fresh PerfStats each call, like the pybind getter
        return SimpleNamespace(
            num_cache_hits=self.hits,
            num_cache_reqs=self.requests,
            num_compilations=len(self.entries),
            peak_compilation_host_memory_bytes=1 << 20,
            per_entry_stats=list(self.entries),
        )


class FakeProfile:
    """torch.profiler.profile with a TpuProfilerConfig: writes the xplane where TorchTPU does."""

    def __init__(self, activities: list, experimental_config: SimpleNamespace) -> None:
        self.config = experimental_config

    def __enter__(self) -> FakeProfile:
        return self

    def __exit__(self, *exc: object) -> None:
        folder = (
            Path(self.config.run_dir) / "plugins" / "profile" / time.strftime("%Y_%m_%d_%H_%M_%S")
        )
        folder.mkdir(parents=True)
        (folder / f"{socket.gethostname()}_{self.config.worker_rank}.xplane.pb").write_bytes(
            b"\x0a\x00"
        )


def make_api(chip: Chip, initialized: bool = True) -> TorchTpuApi:
    execution_mode = SimpleNamespace(eager_mode=EagerMode.DEFER_NEVER, enable_cpu_fallback=False)
    tpu = SimpleNamespace(
        _get_cache_stats=chip.perf_stats,
        get_device_name=lambda: "TPU v5e",
        profiler=SimpleNamespace(
            TpuProfilerConfig=lambda run_dir, worker_rank: SimpleNamespace(
                run_dir=run_dir, worker_rank=worker_rank
            )
        ),
    )
    fake_torch = SimpleNamespace(
        accelerator=SimpleNamespace(device_count=lambda: 4),
        profiler=SimpleNamespace(
            profile=FakeProfile,
            ProfilerActivity=SimpleNamespace(CPU="CPU", PrivateUse1="PrivateUse1"),
        ),
    )
    return TorchTpuApi(
        tpu=tpu,
        execution_mode=execution_mode,
        loader=SimpleNamespace(_DEVICE_INITIALIZED=initialized),
        torch=fake_torch,
        version="0.2.0",
    )


@pytest.fixture
def optimizer():
    return torch.optim.SGD(torch.nn.Linear(4, 2).parameters(), lr=0.1)


def collect(store: Path, api: TorchTpuApi) -> tuple[Session, TpuCollector]:
    session = Session(RunStore(store).new_run("tpu", warmup=2)).start(install_handlers=False)
    return session, TpuCollector(session, api).install()


def finish(session: Session, collector: TpuCollector) -> tpuscope.store.Run:
    collector.uninstall()
    session.close()
    return tpuscope.load_run(session.run_dir)


# -- pure pieces -----------------------------------------------------------------------------


def test_mode_names_and_duration_units() -> None:
    assert [
        mode_label(m) for m in ("DEFER_NEVER", "DEFER_AND_FUSE", "DEFER_NEVER_AND_LAUNCH_BLOCKING")
    ] == ["strict", "fused", "debug"]
    assert mode_label(None) is None and mode_label("SOMETHING_NEW") == "something_new"
    assert duration_ns(timedelta(milliseconds=1500)) == 1_500_000_000
    assert duration_ns(0.25) == 250_000_000 and duration_ns(7) is None and duration_ns(None) is None
    chip = Chip()
    chip.compile(2.0)
    chip.hit(3)
    stats = CacheStats.of(chip.perf_stats())
    assert (stats.requests, stats.hits, stats.compilations, stats.entry_ns) == (
        4,
        3,
        1,
        [2_000_000_000],
    )


# -- the collector -------------------------------------------------------------------------


def test_steps_compiles_and_eager_modes_per_optimizer_step(tmp_path: Path, optimizer) -> None:
    chip = Chip()
    api = make_api(chip)
    session, collector = collect(tmp_path, api)
    chip.compile(1.5), chip.compile(0.5), optimizer.step()  # step 0: warm-up compiles
    chip.hit(2), optimizer.step()  # steps 1, 2: cache hits
    chip.hit(2), optimizer.step()
    api.execution_mode.eager_mode = EagerMode.DEFER_AND_FUSE  # the program switches to Fused
    chip.compile(0.75), chip.hit(), optimizer.step()  # step 3: a recompile
    chip.hit(2), optimizer.step()
    run = finish(session, collector)

    proc = run.meta["processes"][0]
    assert (proc["backend"], proc["eager_mode"], proc["torch_tpu_eager_mode"]) == (
        "torch_tpu",
        "strict",
        "DEFER_NEVER",
    )
    assert (proc["device_kind"], proc["device_count"], proc["torch_tpu_cpu_fallback"]) == (
        "TPU v5e",
        4,
        False,
    )
    steps = run.steps
    assert list(steps["boundary"]) == ["optimizer.step"] * 5
    assert list(steps["compiles"]) == [2, 0, 0, 1, 0]
    assert list(steps["executions"]) == [2, 2, 2, 2, 2]
    assert list(steps["compile_ns"].fillna(0)) == [2_000_000_000, 0, 0, 750_000_000, 0]
    compiles = run.compiles
    assert list(compiles["step"]) == [0, 0, 3] and list(compiles["duration_ns"]) == [
        1_500_000_000,
        500_000_000,
        750_000_000,
    ]
    assert compiles["cause"].iloc[2] == "TorchTPU compilation cache miss (fused eager mode)"
    modes = run.metrics[run.metrics["name"].str.startswith("torch_tpu.eager_mode/")]
    assert (
        list(modes["name"])
        == ["torch_tpu.eager_mode/strict"] * 3 + ["torch_tpu.eager_mode/fused"] * 2
    )


def test_detectors_run_on_torch_tpu_rows(tmp_path: Path, optimizer) -> None:
    chip = Chip()
    session, collector = collect(tmp_path, make_api(chip))
    for step in range(6):
        chip.compile(0.5) if step in (0, 4) else chip.hit()
        optimizer.step()
    run = finish(session, collector)
    assert "recompile" in {f.rule for f in analyze(run).findings}


def test_cpu_fallback_messages_become_fallback_rows(tmp_path: Path, optimizer) -> None:
    session, collector = collect(tmp_path, make_api(Chip()))
    original = collector._showwarning
    # the program's display of warnings: not this test's subject
    collector._showwarning = lambda *args: None
    message = "'aten::nonzero' is not implemented for TPU. Falling back to CPU"
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = collector._on_warning  # catch_warnings saved and will restore it
        warnings.warn(message, stacklevel=1)  # fallback line
        warnings.warn("unrelated", stacklevel=1)
    optimizer.step()
    run = finish(session, collector)
    line = next(
        i + 1
        for i, text in enumerate(Path(__file__).read_text().splitlines())
        if text.endswith("# fallback line")
    )
    rows = run.fallbacks
    assert list(rows["op"]) == ["aten::nonzero"] and list(rows["count"]) == [1]
    assert list(rows["location"]) == [f"{Path(__file__).resolve()}:{line}"]
    assert run.steps["fallback_ops"].tolist() == [1]
    assert warnings.showwarning is original or warnings.showwarning != collector._on_warning


def test_uninstall_restores_warnings_and_removes_the_step_hook(tmp_path: Path, optimizer) -> None:
    before = warnings.showwarning
    session, collector = collect(tmp_path, make_api(Chip()))
    assert warnings.showwarning == collector._on_warning
    collector.uninstall()
    assert warnings.showwarning is before
    optimizer.step()
    assert collector.step == 0
    session.close()


def test_nothing_is_recorded_until_torch_tpu_has_a_tpu(tmp_path: Path, optimizer) -> None:
    chip = Chip()
    api = make_api(chip, initialized=False)
    session, collector = collect(tmp_path, api)
    chip.compile(1.0), optimizer.step()
    assert collector.step == 0 and "backend" not in session.proc_meta
    api.loader._DEVICE_INITIALIZED = True  # torch_tpu._loader.load() ran later in the program
    chip.compile(1.0), optimizer.step()
    run = finish(session, collector)
    assert len(run.steps) == 1 and run.meta["processes"][0]["backend"] == "torch_tpu"


def test_trace_steps_write_xplane_files_into_the_run(
    tmp_path: Path, optimizer, monkeypatch
) -> None:
    monkeypatch.setenv(ENV_TRACE_STEPS, "1:3")
    session, collector = collect(tmp_path, make_api(Chip()))
    for _ in range(4):
        optimizer.step()
    run = finish(session, collector)
    proc = run.meta["processes"][0]
    assert proc["trace_steps"] == [1, 3]
    [xplane] = proc["trace_files"]
    assert xplane.startswith(str(run.path / "trace" / "torch_tpu-")) and xplane.endswith(
        "_0.xplane.pb"
    )
    assert Path(xplane).is_file()
