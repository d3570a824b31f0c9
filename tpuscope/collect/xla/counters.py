"""Read torch_xla's counters and metrics at step boundaries, at a cost the step can afford.

Measured on the README example (TinyLM, ~60-80 ms steps on the CPU): `_xla_metric_data`
copies a metric's whole sample buffer (up to 1024 samples) into Python tuples, and the
first such copy after a step cost ~1 ms of CPU, nearly all of it in glibc's
`malloc_consolidate` (perf): the step's teardown leaves thousands of small freed
chunks, and the first large allocation merges them all. Counters cost ~2 us each and
allocate nothing large. So:

- every step reads counters only: the core ones, the copy counters and every fallback
  counter (torch_xla's own list of fallback ops names them, in every namespace: `aten::`,
  `torchvision::`, a `torch.library` custom op's; see `is_fallback_counter`);
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
- `tpuscope run --deep` reads the same way (its cost is in its HLO dumps and IR frames, not
  here); env TPUSCOPE_ALL_METRICS=1, set by the user, does a full read at every step.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from tpuscope.parse.xla_counter_names import is_fallback_counter

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
    return name in CORE_COUNTERS or name in COPY_COUNTERS or is_fallback_counter(name)


# the counters read at every step, in this order (fallback counters follow): a step's reading is a
# tuple, compared with the last step's by position (no dict per step)
STEP_COUNTERS = (*CORE_COUNTERS, *COPY_COUNTERS)
UNCACHED, CACHED, EXECUTED = 0, 1, 2
COPIES = slice(len(CORE_COUNTERS), len(STEP_COUNTERS))
FALLBACKS = slice(len(STEP_COUNTERS), None)


@dataclass(slots=True)
class Snapshot:
    """One reading: `values` of `names` (the per-step counters) always; on a full read also
    every counter (`counters`) and every metric."""

    names: tuple[str, ...]
    values: tuple[int, ...]
    metrics: Metrics
    full: bool  # every counter and metric was read
    counters: Counters | None = None  # every counter, on a full read


class CounterReader:
    """Snapshots of torch_xla's counters (the per-step ones always) and metrics (all when due)."""

    def __init__(self, xlac: Any, every_step: bool | None = None) -> None:
        self.xlac = xlac
        self.every_step = (
            os.environ.get(ENV_ALL_METRICS) == "1" if every_step is None else every_step
        )
        self.reads = 0
        self._last_full = (0, 0.0)  # (reads, monotonic time) at the last full read
        self._fallback_list = getattr(xlac, "_get_executed_fallback_ops", None)  # torch_xla >= 2.1
        self.names: tuple[str, ...] = (
            STEP_COUNTERS  # read at every step: then the fallback counters
        )
        self._compiles = -1
        self.step_copies: tuple[
            int, ...
        ] = ()  # the copy counters at the last step (the collector's)

    def snapshot(self, full: bool = False) -> Snapshot:
        """Counter values and metric data now: all of them if `full` or due. The per-step path is
        one call for the fallback list and one per counter (the floor: about 11 us right after
        a step), a tuple, and the host-transfer metric only when a copy counter moved."""
        xlac, value = self.xlac, self.xlac._xla_counter_value
        fallback_ops = self._fallback_list() if self._fallback_list is not None else None
        values = tuple(map(value, self.names))  # None: a counter that never moved
        if None in values:
            values = tuple(v or 0 for v in values)
        full = full or self._full_read_due(fallback_ops, values[UNCACHED])
        self.reads += 1
        if full:
            self._last_full = (self.reads, time.monotonic())
            counters = {
                name: value(name) or 0 for name in xlac._xla_counter_names()
            }  # None once cleared
            metrics = {name: xlac._xla_metric_data(name) for name in xlac._xla_metric_names()}
            return Snapshot(
                self.names,
                tuple(counters.get(name, 0) for name in self.names),
                {n: d for n, d in metrics.items() if d is not None},
                True,
                counters,
            )
        metrics = {}
        if (
            values[COPIES] != self.step_copies
            and (data := xlac._xla_metric_data(HOST_TRANSFER)) is not None
        ):
            metrics[HOST_TRANSFER] = data
        return Snapshot(self.names, values, metrics, False)

    def _full_read_due(self, fallback_ops: list[str] | None, compiles: int) -> bool:
        """A full read is due (first reads, a compile, a new fallback op, the periodic one);
        the per-step names follow torch_xla's list of fallback ops."""
        known = len(self.names) - len(STEP_COUNTERS)
        due = (
            self.every_step
            or fallback_ops is None
            or self.reads < EARLY_READS
            or (
                self.reads - self._last_full[0] >= FULL_EVERY
                and time.monotonic() - self._last_full[1] >= FULL_INTERVAL_S
            )
            or compiles != self._compiles
            or len(fallback_ops) != known
        )
        if fallback_ops is None or len(fallback_ops) != known:
            self.names = (*STEP_COUNTERS, *(fallback_ops or ()))
        self._compiles = compiles
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


def split_by_step(
    metrics: Metrics, old: Metrics, steps: list[int], ends_ns: list[int]
) -> dict[int, Growth]:
    """Each metric's growth since `old`, split over `steps` (which ended at `ends_ns`, in
    order) by the wall-clock time of its new samples: a sample belongs to the first step
    that ended after it, one newer than the last end to the last step. Samples the buffer
    no longer holds (it keeps 1024) are spread evenly over the steps that ended before the
    oldest one it holds, so totals stay exact (an estimate per step: `LazyTracing` takes
    ~850 samples per step of the README example)."""
    per_step: dict[int, Growth] = {step: {} for step in steps}
    for name, (index, counts, totals) in split_arrays(metrics, old, ends_ns).items():
        for i, count, total in zip(index.tolist(), counts.tolist(), totals.tolist(), strict=True):
            per_step[steps[i]][name] = (count, total)
    return {step: growth for step, growth in per_step.items() if growth}


def split_arrays(
    metrics: Metrics, old: Metrics, ends_ns: list[int]
) -> dict[str, tuple[Any, Any, Any]]:
    """split_by_step column-wise, for the flush thread: per metric with growth, (indices of
    the steps that get samples, their sample counts, their totals) as numpy arrays (torch_xla
    imports numpy): about 20 us per metric for a thousand steps, where a loop over the steps
    in Python took a few ms per flush."""
    import numpy as np

    ends = (
        np.asarray(ends_ns, dtype=np.float64) / 1e9
    )  # samples are stamped in seconds, oldest first
    split = {}
    for name, (count, total) in metric_deltas(metrics, old).items():
        recent = np.asarray(metrics[name][2][-count:], dtype=np.float64).reshape(-1, 2)
        stamps, values = recent[:, 0], recent[:, 1]
        bounds = np.append(np.searchsorted(stamps, ends[:-1], side="left"), len(stamps))
        starts = np.concatenate(([0], bounds[:-1]))
        prefix = np.concatenate(([0.0], np.cumsum(values)))
        counts, totals = bounds - starts, prefix[bounds] - prefix[starts]
        if count > len(stamps):  # dropped samples: spread over the steps before the oldest held one
            oldest = stamps[0] if len(stamps) else np.inf
            before = np.flatnonzero(ends <= oldest)
            before = before if len(before) else np.array([0])
            dropped = count - len(stamps)
            share, extra = divmod(dropped, len(before))
            parts = share + (np.arange(len(before)) < extra)
            counts[before] += parts
            totals[before] += (total - float(values.sum())) * parts / dropped
        index = np.flatnonzero(counts)
        split[name] = (index, counts[index], totals[index])
    return split


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
