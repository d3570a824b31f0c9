"""TorchTPU collector (PyPI `torch_tpu`, module `torch.tpu`; written against torch_tpu 0.2.0).

What TorchTPU exposes and this collector reads (docs/backends.md says what was
verified without a chip; tests/tpu_real checks it against the real wheel in CI):
- the eager mode in force: DEFER_NEVER (Strict), DEFER_AND_FUSE (Fused),
  DEFER_NEVER_AND_LAUNCH_BLOCKING (Debug), read from
  `torch_tpu._internal.execution_mode.eager_mode` (the public `torch.tpu.eager_mode`
  warns on every first use), and the CPU-fallback switch `enable_cpu_fallback`;
- compilation-cache statistics, `torch.tpu._get_cache_stats()`: requests, hits,
  compilations and one entry (with its compile duration) per cached executable.
  The cache serves eager ops and DEFER_AND_FUSE groups (and, unverified without a
  chip, torch.compile's graphs), so a new compilation after warm-up is a recompile;
- CPU fallbacks: TorchTPU has no counter; its message "'<op>' is not implemented
  for TPU. Falling back to CPU" is caught when it is shown as a Python warning;
- profiles: `torch.profiler.profile` with `torch.tpu.profiler.TpuProfilerConfig(run_dir=...)`
  for the steps in TPUSCOPE_TRACE_STEPS, written as xplane.pb under `<run>/trace/`.
Steps end at every `optimizer.step()` (PyTorch's global optimizer post-hook): an
eager backend has no mark_step (torch.tpu.optimizers' functional optimizers fire no
hook). Nothing is recorded until TorchTPU has initialised a TPU, which its loader does
at `import torch` only when its PCI scan finds one, so a machine that merely has the
package installed is left alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from tpuscope.collect.session import Session
from tpuscope.collect.trace_steps import ProfilerWindow, trace_dir, window_from_env
from tpuscope.schema_rows import CompileRow

# TorchTPU's eager modes under the names the rest of tpuscope (and the bench) use.
EAGER_MODES = {
    "DEFER_NEVER": "strict",
    "DEFER_AND_FUSE": "fused",
    "DEFER_NEVER_AND_LAUNCH_BLOCKING": "debug",
    "INTERNAL_COMPILE_FX_GRAPH": "compile_fx_graph",
    "INTERNAL_DEFER_ALL": "defer_all",
}
ENV_VARS = (
    "TORCH_TPU_DEFER_AND_FUSE",
    "TORCH_TPU_LAUNCH_BLOCKING",
    "TORCH_DEVICE_BACKEND_AUTOLOAD",
    "TORCH_TPU_PROFILER_OUTPUT_DIR",
    "TORCH_TRACE",
    "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT",
    "TORCH_TPU_ENABLE_DEBUG_CHECKS",
    "TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS",
)
FALLBACK_MESSAGE = re.compile(r"'(?P<op>[^']+)' is not implemented for TPU\. Falling back to CPU")


def mode_label(raw: str | None) -> str | None:
    """'DEFER_AND_FUSE' -> 'fused' (unknown names pass through in lower case)."""
    return None if raw is None else EAGER_MODES.get(raw, raw.lower())


def duration_ns(value: Any) -> int | None:
    """A cache entry's compile duration as ns: timedelta, or float seconds (pybind's
    chrono/absl conversions); anything else is unknown."""
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1e9)
    if isinstance(value, float):
        return int(value * 1e9)
    return None


@dataclass
class CacheStats:
    """torch.tpu._get_cache_stats() as plain numbers."""

    requests: int = 0
    hits: int = 0
    compilations: int = 0
    peak_host_bytes: int = 0
    entry_ns: list[int | None] = field(default_factory=list)

    @classmethod
    def of(cls, perf: Any) -> CacheStats:
        entries = list(getattr(perf, "per_entry_stats", None) or [])
        return cls(
            requests=int(perf.num_cache_reqs),
            hits=int(perf.num_cache_hits),
            compilations=int(perf.num_compilations),
            peak_host_bytes=int(getattr(perf, "peak_compilation_host_memory_bytes", 0) or 0),
            entry_ns=[duration_ns(getattr(e, "compilation_duration", None)) for e in entries],
        )


@dataclass
class TorchTpuApi:
    """The TorchTPU objects tpuscope reads, resolved once from the live package.

    tpu: the `torch.tpu` module; execution_mode: `torch_tpu._internal.execution_mode`;
    loader: `torch_tpu._loader`; torch: the torch module.
    """

    tpu: Any
    execution_mode: Any
    loader: Any
    torch: Any
    version: str | None = None

    @classmethod
    def from_package(cls) -> TorchTpuApi:
        from importlib import metadata

        import torch
        import torch_tpu._internal.execution_mode as execution_mode
        import torch_tpu._loader as loader

        try:
            version = metadata.version("torch_tpu")
        except metadata.PackageNotFoundError:
            version = None
        return cls(
            tpu=torch.tpu,
            execution_mode=execution_mode,
            loader=loader,
            torch=torch,
            version=version,
        )

    def device_initialized(self) -> bool:
        return bool(getattr(self.loader, "_DEVICE_INITIALIZED", False))

    def eager_mode(self) -> str | None:
        """The C++ name of the mode in force: DEFER_NEVER, DEFER_AND_FUSE, ...

        torch_tpu wraps the C++ `_EagerMode` in the public `EagerMode` enum when it can
        (its `.value` is the C++ member) and returns the C++ member itself otherwise
        (INTERNAL_DEFER_ALL). The public member of INTERNAL_COMPILE_FX_GRAPH is named
        `_INTERNAL_COMPILE_FX_GRAPH`, so the C++ name is the one that does not vary.
        """
        mode = _quiet(lambda: self.execution_mode.eager_mode)
        if mode is None:
            return None
        return getattr(getattr(mode, "value", None), "name", None) or getattr(mode, "name", None)

    def cpu_fallback_enabled(self) -> bool | None:
        value = _quiet(lambda: self.execution_mode.enable_cpu_fallback)
        return None if value is None else bool(value)

    def cache_stats(self) -> CacheStats | None:
        perf = _quiet(self.tpu._get_cache_stats)
        return None if perf is None else CacheStats.of(perf)

    def device_meta(self) -> dict[str, Any]:
        """Device kind from the PCI scan (safe anywhere); the count only once a TPU is up."""
        meta: dict[str, Any] = {"device_kind": _quiet(self.tpu.get_device_name)}
        if self.device_initialized():
            meta["device_count"] = _quiet(self.torch.accelerator.device_count)
        return meta

    def profile(self, run_dir: str, rank: int) -> Any:
        """A torch.profiler.profile writing xplane.pb under run_dir (needs a TPU)."""
        profiler = self.torch.profiler
        config = self.tpu.profiler.TpuProfilerConfig(run_dir=run_dir, worker_rank=str(rank))
        activities = [profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.PrivateUse1]
        return profiler.profile(activities=activities, experimental_config=config)


def _quiet(read: Any) -> Any:
    """Call a TorchTPU getter without its ExperimentalApi warnings; None if it fails."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return read()
        except Exception:
            return None


class TpuCollector:
    """One row per optimizer step with TorchTPU's cache deltas, compiles and fallbacks."""

    def __init__(self, session: Session, api: TorchTpuApi) -> None:
        self.session = session
        self.api = api
        self.step = 0
        self.compile_index = 0
        self._prev: CacheStats | None = None
        self._step_start = time.time_ns()
        self._fallbacks: Counter = Counter()  # (op, location) -> count
        self._hook: Any = None
        self._showwarning: Any = None
        self._profiler: ProfilerWindow | None = None
        self._modes_seen: set[str] = set()

    def install(self) -> TpuCollector:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._hook = register_optimizer_step_post_hook(self._after_optimizer_step)
        self._showwarning = warnings.showwarning
        warnings.showwarning = self._on_warning
        self._prev = self.api.cache_stats()
        self._step_start = time.time_ns()
        self.session.set_meta(
            torch_tpu_version=self.api.version,
            torch_tpu_env={k: os.environ[k] for k in ENV_VARS if k in os.environ},
            torch_tpu_device_initialized=self.api.device_initialized(),
        )
        if self.api.device_initialized():
            self._claim()
        return self

    def close_open_step(self) -> None:
        """Nothing to do: a TorchTPU step ends at each optimizer step (a post-step hook), and
        the uninstall that follows records nothing after it."""

    def uninstall(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._showwarning is not None and warnings.showwarning == self._on_warning:
            warnings.showwarning = self._showwarning
        if self._profiler is not None:
            self._profiler.close()

    def _claim(self) -> None:
        """Meta and tracing, once TorchTPU runs on a TPU in this process."""
        mode = self.api.eager_mode()
        meta = {
            "eager_mode": mode_label(mode),
            "torch_tpu_eager_mode": mode,
            "torch_tpu_device_initialized": True,
            "torch_tpu_cpu_fallback": self.api.cpu_fallback_enabled(),
            **self.api.device_meta(),
        }
        if not self.session.proc_meta.get("backend"):
            meta["backend"] = "torch_tpu"
        self.session.set_meta(**meta)
        self._profiler = self._profiler_window()
        if self._profiler is not None:
            self._profiler.step_opened(self.step)

    def _profiler_window(self) -> ProfilerWindow | None:
        window = window_from_env(self.session.warmup)  # "auto" traces too: TorchTPU is a TPU
        if window is None:
            return None
        directory = trace_dir(self.session.run_dir, "torch_tpu")
        holder: dict[str, Any] = {}

        def start(path: str) -> None:
            holder["profile"] = self.api.profile(path, self.session.rank)
            holder["profile"].__enter__()

        def stop() -> None:
            holder.pop("profile").__exit__(None, None, None)

        self.session.set_meta(trace_steps=[window.start, window.stop], trace_dir=str(directory))
        return ProfilerWindow(
            window,
            directory,
            start,
            stop,
            lambda files: self.session.set_meta(trace_files=files),
            lambda: True,
        )

    def _after_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        with contextlib.suppress(Exception):  # never break the program's optimizer.step()
            self.on_step_end("optimizer.step")

    def _on_warning(
        self,
        message: Any,
        category: Any,
        filename: str,
        lineno: int,
        file: Any = None,
        line: Any = None,
    ) -> None:
        match = FALLBACK_MESSAGE.search(str(message))
        if match:
            op = match["op"] if "::" in match["op"] else f"aten::{match['op']}"
            self._fallbacks[(op, f"{filename}:{lineno}")] += 1
        self._showwarning(message, category, filename, lineno, file, line)

    # -- per step --------------------------------------------------------------------
    def on_step_end(self, boundary: str) -> None:
        if not self.api.device_initialized() or self.session.proc_meta.get("backend") not in (
            None,
            "torch_tpu",
        ):
            return
        if "eager_mode" not in self.session.proc_meta:
            self._claim()
        now = time.time_ns()
        stats = self.api.cache_stats() or CacheStats()
        prev = self._prev or CacheStats()
        mode = mode_label(self.api.eager_mode()) or "unknown"
        self._modes_seen.add(mode)
        new_entries = stats.entry_ns[len(prev.entry_ns) :]
        compiles = max(0, stats.compilations - prev.compilations)
        fallbacks, self._fallbacks = self._fallbacks, Counter()
        self._emit(now, boundary, stats, prev, mode, compiles, new_entries, fallbacks)
        if self._profiler is not None:
            self._profiler.step_opened(self.step + 1)
            self._profiler.step_closed(self.step)
        self._prev, self._step_start = stats, now
        self.step += 1

    def _emit(
        self,
        now: int,
        boundary: str,
        stats: CacheStats,
        prev: CacheStats,
        mode: str,
        compiles: int,
        new_entries: list[int | None],
        fallbacks: Counter,
    ) -> None:
        from tpuscope.schema import table_row  # at the first step (it compiles), not at start-up

        known = [ns for ns in new_entries if ns is not None]
        self.session.add(
            "steps",
            table_row(
                "steps",
                step=self.step,
                start_ns=self._step_start,
                end_ns=now,
                wall_ns=now - self._step_start,
                boundary=boundary,
                compiles=compiles,
                compile_ns=sum(known) if known else None,
                executions=stats.requests - prev.requests,
                fallback_ops=sum(fallbacks.values()),
                graph_hashes=[],
            ),
        )
        counters = {
            "torch_tpu.cache_requests": stats.requests - prev.requests,
            "torch_tpu.cache_hits": stats.hits - prev.hits,
            "torch_tpu.compilations": compiles,
            f"torch_tpu.eager_mode/{mode}": 1,
        }
        rows = [
            table_row("metrics", step=self.step, name=n, kind="counter", count=c, total=0.0)
            for n, c in counters.items()
            if c
        ]
        if known:
            rows.append(
                table_row(
                    "metrics",
                    step=self.step,
                    name="torch_tpu.compile_time",
                    kind="metric",
                    count=len(known),
                    total=float(sum(known)),
                )
            )
        self.session.add_many("metrics", rows)
        self.session.add_many(
            "compiles", [self._compile_row(now, mode, new_entries, i) for i in range(compiles)]
        )
        self.session.add_many(
            "fallbacks",
            [
                table_row("fallbacks", step=self.step, op=op, count=count, location=location)
                for (op, location), count in fallbacks.items()
            ],
        )

    def _compile_row(
        self, now: int, mode: str, new_entries: list[int | None], i: int
    ) -> CompileRow:
        self.compile_index += 1
        duration = new_entries[i] if i < len(new_entries) else None
        from tpuscope.schema import table_row  # imported on the first compile, not at start-up

        return table_row(
            "compiles",
            backend="torch_tpu",
            step=self.step,
            index=self.compile_index - 1,
            time_ns=now,
            duration_ns=duration,
            frames=[],
            cause=f"TorchTPU compilation cache miss ({mode} eager mode)",
        )


def install(session: Session) -> TpuCollector:
    """Hook TorchTPU in this process (autostart calls this when torch_tpu is imported)."""
    return TpuCollector(session, TorchTpuApi.from_package()).install()
