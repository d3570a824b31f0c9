"""Read torch_xla's counters and metrics at step boundaries, at a cost the step can afford.

Measured on the README example (TinyLM, ~60-80 ms steps on the CPU, 57 counters and
12 metrics), switching the hook on and off every two steps in one process: reading
every counter and metric at every step added ~2 ms to the step (the reads run right
after the step, on cold caches, and `LazyTracing` alone returns 1024 samples); reading
only what the report and detectors need per step added 0.4-0.7 ms. So:

- every step reads the core counters and metrics below and every `aten::*` fallback
  counter torch_xla has created (its own list of fallback ops names them);
- a full read (every counter, every metric) happens in the first `EARLY_STEPS`
  steps, on any step that compiled or ran a new fallback op (new counters appear
  then), and every `FULL_EVERY` steps; the rows of counters not read on the steps in
  between carry, at the next full read, the delta since the last one, so per-name
  totals stay exact;
- `tpuscope run --deep` (env TPUSCOPE_ALL_METRICS=1) does a full read at every step.
"""

from __future__ import annotations

import os
from typing import Any

ENV_ALL_METRICS = "TPUSCOPE_ALL_METRICS"
FULL_EVERY = 16
EARLY_STEPS = 8
CORE_COUNTERS = ("UncachedCompile", "CachedCompile", "ExecuteComputation", "MarkStep")
CORE_METRICS = ("CompileTime", "EagerOpCompileTime", "ExecuteTime", "TransferFromDeviceTime",
                "TransferFromServerTime", "TransferToDeviceTime", "TensorsGraphSize")

Counters = dict[str, int]
Metrics = dict[str, Any]  # name -> (count, total, samples) as _xla_metric_data returns it


def is_core_counter(name: str) -> bool:
    """Read at every step (a fallback counter is read from the step its op first falls back)."""
    return name in CORE_COUNTERS or name.startswith("aten::")


class CounterReader:
    """Snapshots of torch_xla's counters and metrics: the core ones always, all when due."""

    def __init__(self, xlac: Any, every_step: bool | None = None) -> None:
        self.xlac = xlac
        self.every_step = os.environ.get(ENV_ALL_METRICS) == "1" if every_step is None else every_step
        self.names: list[str] = []
        self.reads = 0
        self._fallback_list = getattr(xlac, "_get_executed_fallback_ops", None)  # torch_xla >= 2.1
        self._fallback_ops: list[str] = []
        self._compiles = -1

    def snapshot(self, full: bool = False) -> tuple[Counters, Metrics]:
        """(counter values, metric data) now: every counter and metric if `full` or due."""
        xlac, value = self.xlac, self.xlac._xla_counter_value
        fallback_ops = list(self._fallback_list()) if self._fallback_list is not None else None
        compiles = value("UncachedCompile") or 0
        full = full or self._full_read_due(fallback_ops, compiles)
        self.reads += 1
        if full:
            self.names = list(xlac._xla_counter_names())
            counters = {name: value(name) or 0 for name in self.names}  # None once cleared
            return counters, {name: xlac._xla_metric_data(name) for name in xlac._xla_metric_names()}
        counters = {name: value(name) or 0 for name in (*CORE_COUNTERS, *self._fallback_ops)}
        metrics = {name: xlac._xla_metric_data(name) for name in CORE_METRICS}
        return counters, {name: data for name, data in metrics.items() if data is not None}

    def _full_read_due(self, fallback_ops: list[str] | None, compiles: int) -> bool:
        due = (
            self.every_step or fallback_ops is None or self.reads < EARLY_STEPS
            or self.reads % FULL_EVERY == 0 or compiles != self._compiles
            or len(fallback_ops) != len(self._fallback_ops)
        )
        self._fallback_ops, self._compiles = fallback_ops or [], compiles
        return due
