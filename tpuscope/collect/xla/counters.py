"""Read torch_xla's counters and metrics at step boundaries, at a cost the step can afford.

Measured on the README example (TinyLM, ~60-80 ms steps on the CPU): `_xla_metric_data`
copies a metric's whole sample buffer (up to 1024 samples) into Python tuples, and the
first such copy after a step cost ~1 ms of CPU, nearly all of it in glibc's
`malloc_consolidate` (perf): the step's teardown leaves thousands of small freed
chunks, and the first large allocation merges them all. Counters cost ~2 us each and
allocate nothing large. So:

- every step reads counters only: the core ones, the copy counters and every `aten::*`
  fallback counter (torch_xla's own list of fallback ops names them);
  `TransferFromDeviceTime` (host reads, per step for the steps table and the call-site
  tracer) is read only when a copy counter moved, as every device-to-host read moves one;
- a full read (every counter, every metric) happens in the first 2 steps, on any step
  that compiled or ran a new fallback op (new counters appear then), once both
  `FULL_EVERY` steps and `FULL_INTERVAL_S` (the flush interval) have passed since the
  last one, and at exit (~3 ms each here: every 16 steps of 1 ms would cost 20%). Metric
  samples carry their wall-clock time, so a full read splits each metric's growth over
  the steps since the previous one by sample time (`split_by_step`): every step gets its
  metric rows, written about a flush interval late (exact unless a metric took more than
  its buffer's 1024 samples in between). A counter not read per step gets its delta
  since the previous full read as a row of the full-read step, so per-name totals stay
  exact;
- `tpuscope run --deep` (env TPUSCOPE_ALL_METRICS=1) does a full read at every step.
"""

from __future__ import annotations

import bisect
import os
import time
from dataclasses import dataclass
from typing import Any

ENV_ALL_METRICS = "TPUSCOPE_ALL_METRICS"
FULL_EVERY = 16  # steps, and
FULL_INTERVAL_S = 2.0  # seconds (the flush interval) since the last full read
EARLY_READS = 3  # the read at install and the first 2 steps (warm-up, when counters appear)
CORE_COUNTERS = ("UncachedCompile", "CachedCompile", "ExecuteComputation", "MarkStep")
COPY_COUNTERS = ("xla::_to_cpu", "xla::_to_copy")  # one of them moves on every device-to-host read
HOST_TRANSFER = "TransferFromDeviceTime"

Counters = dict[str, int]
Metrics = dict[str, Any]  # name -> (count, total, samples) as _xla_metric_data returns it
Growth = dict[str, tuple[int, float]]  # name -> (new samples, accumulator delta)


def is_core_counter(name: str) -> bool:
    """Read at every step (a fallback counter is read from the step its op first falls back)."""
    return name in CORE_COUNTERS or name in COPY_COUNTERS or name.startswith("aten::")


@dataclass
class Snapshot:
    counters: Counters
    metrics: Metrics
    full: bool  # every counter and metric was read


class CounterReader:
    """Snapshots of torch_xla's counters (core ones always) and metrics (all when due)."""

    def __init__(self, xlac: Any, every_step: bool | None = None) -> None:
        self.xlac = xlac
        self.every_step = os.environ.get(ENV_ALL_METRICS) == "1" if every_step is None else every_step
        self.reads = 0
        self._last_full = (0, 0.0)  # (reads, monotonic time) at the last full read
        self._fallback_list = getattr(xlac, "_get_executed_fallback_ops", None)  # torch_xla >= 2.1
        self._fallback_ops: list[str] = []
        self._compiles = -1
        self._copies: tuple[int, ...] = ()
        self._copies_before: tuple[int, ...] = ()  # at the snapshot before the last one

    def snapshot(self, full: bool = False) -> Snapshot:
        """Counter values and metric data now: all of them if `full` or due."""
        xlac, value = self.xlac, self.xlac._xla_counter_value
        self._copies_before = self._copies
        fallback_ops = list(self._fallback_list()) if self._fallback_list is not None else None
        compiles = value("UncachedCompile") or 0
        full = full or self._full_read_due(fallback_ops, compiles)
        self.reads += 1
        if full:
            self._last_full = (self.reads, time.monotonic())
            counters = {name: value(name) or 0 for name in xlac._xla_counter_names()}  # None once cleared
            metrics = {name: xlac._xla_metric_data(name) for name in xlac._xla_metric_names()}
            self._copies = tuple(counters.get(name, 0) for name in COPY_COUNTERS)
            return Snapshot(counters, {n: d for n, d in metrics.items() if d is not None}, True)
        counters = {name: value(name) or 0 for name in (*CORE_COUNTERS, *COPY_COUNTERS, *self._fallback_ops)}
        copies, metrics = tuple(counters[name] for name in COPY_COUNTERS), {}
        if copies != self._copies and (data := xlac._xla_metric_data(HOST_TRANSFER)) is not None:
            metrics[HOST_TRANSFER] = data
        self._copies = copies
        return Snapshot(counters, metrics, False)

    def unconsumed(self) -> None:
        """The last snapshot did not become a step: the next one reads the host-transfer
        metric again if a copy counter moved since the one before."""
        self._copies = self._copies_before

    def _full_read_due(self, fallback_ops: list[str] | None, compiles: int) -> bool:
        due = (
            self.every_step or fallback_ops is None or self.reads < EARLY_READS
            or (self.reads - self._last_full[0] >= FULL_EVERY
                and time.monotonic() - self._last_full[1] >= FULL_INTERVAL_S)
            or compiles != self._compiles
            or len(fallback_ops) != len(self._fallback_ops)
        )
        self._fallback_ops, self._compiles = fallback_ops or [], compiles
        return due


def counter_deltas(counters: Counters, old: Counters) -> dict[str, int]:
    return {n: v - old.get(n, 0) for n, v in counters.items() if v != old.get(n, 0)}


def metric_deltas(metrics: Metrics, old: Metrics) -> Growth:
    """(new samples, accumulator delta) of every metric that got samples."""
    deltas = {}
    for name, data in metrics.items():
        before = old.get(name)
        count = data[0] - (before[0] if before else 0)
        if count:
            deltas[name] = (count, data[1] - (before[1] if before else 0.0))
    return deltas


def new_samples(data: Any, count: int) -> list[tuple[float, float]]:
    """The last `count` (timestamp_s, value) samples of a metric, oldest first."""
    if count <= 0 or data is None:
        return []
    return [(float(t), float(v)) for t, v in data[2][-count:]]


def split_by_step(metrics: Metrics, old: Metrics, steps: list[int], ends_ns: list[int]) -> dict[int, Growth]:
    """Each metric's growth since `old`, split over `steps` (which ended at `ends_ns`, in
    order) by the wall-clock time of its new samples: a sample belongs to the first step
    that ended after it, one newer than the last end to the last step. Samples the buffer
    no longer holds (it keeps 1024) are spread evenly over the steps that ended before the
    oldest one it holds, so totals stay exact (an estimate per step: `LazyTracing` takes
    ~850 samples per step of the README example)."""
    per_step: dict[int, Growth] = {step: {} for step in steps}
    ends_s = [end / 1e9 for end in ends_ns]  # samples are stamped in seconds, oldest first
    for name, (count, total) in metric_deltas(metrics, old).items():
        recent = metrics[name][2][-count:]
        stamps, values = zip(*recent, strict=True) if recent else ((), ())
        bounds = [bisect.bisect_left(stamps, end) for end in ends_s[:-1]] + [len(stamps)]
        start = 0
        for step, stop in zip(steps, bounds, strict=True):
            if stop > start:
                per_step[step][name] = (stop - start, sum(values[start:stop]))
            start = max(start, stop)
        if count > len(recent):
            oldest = stamps[0] if stamps else float("inf")
            _spread(per_step, name, [s for s, end in zip(steps, ends_s, strict=True) if end <= oldest] or steps[:1],
                    count - len(recent), total - sum(values))
    return {step: growth for step, growth in per_step.items() if growth}


def _spread(per_step: dict[int, Growth], name: str, steps: list[int], count: int, total: float) -> None:
    """Add `count` samples worth `total` to `steps`, as evenly as whole samples allow."""
    share, extra = divmod(count, len(steps))
    for i, step in enumerate(steps):
        if part := share + (i < extra):
            have = per_step[step].get(name, (0, 0.0))
            per_step[step][name] = (have[0] + part, have[1] + total * part / count)


def metric_columns(rows: dict[int, tuple[Counters, Growth]]) -> dict[str, list[Any]]:
    """Metrics-table rows, column-wise: per step, one row per counter, then per metric."""
    columns: dict[str, list[Any]] = {"step": [], "name": [], "kind": [], "count": [], "total": []}
    for step, (counters, metrics) in rows.items():
        columns["step"] += [step] * (len(counters) + len(metrics))
        columns["name"] += [*counters, *metrics]
        columns["kind"] += ["counter"] * len(counters) + ["metric"] * len(metrics)
        columns["count"] += [*counters.values(), *(count for count, _ in metrics.values())]
        columns["total"] += [0.0] * len(counters) + [float(total) for _, total in metrics.values()]
    return columns
