"""The rows of torch_xla steps, built off the step: in the flush thread, batched.

The step hook (collector.XlaCollector.on_step_end) only reads what must be read at the step
(the counters, the time, the debug file's size, the HLO dump on a compile step) and
queues a `StepRecord`. Everything else happens here, in step order, when the session
flushes (every 2 s, in its thread) or closes: the steps row, the per-step metric rows,
the split of a full read's metric samples over the steps since the previous one, the
PT_XLA_DEBUG text of each step (read up to the size it had when the step ended, so each
compile block lands in its own step exactly as if it were parsed at the step), compile
rows paired with CompileTime samples and dumped modules, fallback and call-site rows.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

from tpuscope.collect.session import Session
from tpuscope.collect.xla.counters import (
    HOST_TRANSFER,
    Growth,
    Metrics,
    new_samples,
    split_by_step,
)
from tpuscope.collect.xla.fallback_sites import site_rows
from tpuscope.collect.xla.shapes import ModuleShapes, pair_modules
from tpuscope.parse.pt_xla_debug import DebugFileTail, GraphRecord

COMPILE_TIME = "CompileTime"
EAGER_COMPILE_TIME = "EagerOpCompileTime"
COMPILE_METRICS = (COMPILE_TIME, EAGER_COMPILE_TIME)
EXECUTE_TIMES = ("ExecuteTime", "EagerOpExecuteTime")


@dataclass(slots=True)
class StepRecord:
    """What the step hook saw at one step's end; the rest is derived from it later."""

    step: int
    boundary: str
    start_ns: int
    end_ns: int
    counters: dict[str, int]  # deltas since the previous step
    growth: Growth  # metric deltas since the previous step
    metrics: Metrics  # the snapshot's metric data (every metric on a full read)
    full: bool
    launched: int
    fallbacks: dict[str, int]
    traced: tuple[Counter, Counter] | None  # call sites the tracer saw in this step
    debug_end: int | None  # the debug file's size at the step's end (None: not read)
    modules: list[ModuleShapes] | None  # HLO modules dumped by the step's end (compile steps)


_LIVE: weakref.WeakSet[StepRows] = (
    weakref.WeakSet()
)  # reset in a forked child (one hook per process)


def _after_fork_in_child() -> None:
    for rows in list(_LIVE):
        rows._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class StepRows:
    """Turns queued StepRecords into rows, in order, from whichever thread flushes."""

    def __init__(self, session: Session, debug: DebugFileTail | None) -> None:
        self.session = session
        self.debug = debug
        self.compile_index = 0
        self.full_metrics: Metrics = {}  # the last full read's metric data
        self.unsplit: list[tuple[int, int]] = []  # steps since it, and when they ended
        self.queue: deque[StepRecord] = deque()
        self._lock = threading.Lock()
        self._failed = False
        _LIVE.add(self)

    def _after_fork(self) -> None:
        """A forked child must not write its parent's queued steps (nor wait on its lock)."""
        self.queue = deque()
        self._lock = threading.Lock()

    def drain(self) -> None:
        """Build the rows of every queued step, as one batch of columns per table; a failure
        is one line, once, and stops the rows (never the program)."""
        with self._lock:
            batch = _Batch()
            while self.queue and not self._failed:
                record = self.queue.popleft()
                try:
                    self._rows(record, batch)
                except Exception as exc:
                    self._failed = True
                    print(
                        f"tpuscope: torch_xla step rows stopped: {type(exc).__name__}: {exc}",
                        file=sys.stderr,
                    )
            batch.add_to(self.session)

    def _rows(self, record: StepRecord, batch: _Batch) -> None:
        self.unsplit.append((record.step, record.end_ns))
        split = self.split(record.metrics) if record.full else None
        records, executions = ([], [])
        if self.debug is not None and record.debug_end is not None:
            records, executions = self.debug.poll(record.debug_end)
        hashes = [e.graph_hash for e in executions if e.graph_hash]
        self._step_rows(record, hashes, split, batch)
        samples = sorted(  # eager mode times each op's compile as EagerOpCompileTime
            s
            for name in COMPILE_METRICS
            for s in new_samples(record.metrics.get(name), record.growth.get(name, (0, 0.0))[0])
        )
        if records or samples:
            self._compile_rows(record, records, samples, record.modules or [])

    def split(self, metrics: Metrics) -> dict[int, tuple[dict[str, int], Growth]]:
        """Metric rows of the steps since the last full read, from this full read's samples."""
        steps, ends = [step for step, _ in self.unsplit], [end for _, end in self.unsplit]
        split = split_by_step(metrics, self.full_metrics, steps, ends)
        self.full_metrics, self.unsplit = metrics, []
        return {step: ({}, split.get(step, {})) for step in steps}

    def _step_rows(
        self,
        record: StepRecord,
        graph_hashes: list[str],
        split: dict[int, tuple[dict[str, int], Growth]] | None,
        batch: _Batch,
    ) -> None:
        """The steps row; the step's counter rows and, on a full read, the metric rows of
        every step since the previous one. `execute_ns` is known on full-read steps only;
        `executions` are the graphs launched in the step (xla_steps)."""
        counters, growth = record.counters, record.growth
        own = split.get(record.step, ({}, {}))[1] if split is not None else None
        batch.step(
            record.step,
            record.start_ns,
            record.end_ns,
            record.end_ns - record.start_ns,
            record.boundary,
            counters.get("UncachedCompile", 0),
            int(sum(growth.get(n, (0, 0.0))[1] for n in COMPILE_METRICS)),
            record.launched,
            None if own is None else int(sum(own.get(n, (0, 0.0))[1] for n in EXECUTE_TIMES)),
            sum(record.fallbacks.values()),
            growth.get(HOST_TRANSFER, (0, 0.0))[0],
            graph_hashes,
        )
        if split:
            for step, (step_counters, step_metrics) in split.items():
                if step != record.step:
                    batch.metrics(step, step_counters, step_metrics)
        batch.metrics(record.step, counters, own or {})
        if record.fallbacks or record.traced is not None:
            fallback_rows, read_rows = site_rows(record.step, record.fallbacks, record.traced)
            self.session.add_many("fallbacks", fallback_rows)
            self.session.add_many("call_sites", read_rows)

    def _compile_rows(
        self,
        record: StepRecord,
        records: list[GraphRecord],
        samples: list[tuple[float, float]],
        modules: list[ModuleShapes],
    ) -> None:
        """Pair the debug text's compile blocks with CompileTime samples and dumped modules, in order."""
        count = max(len(records), len(samples))
        records = records + [GraphRecord(kind="compile") for _ in range(count - len(records))]
        paired = (
            pair_modules([r.num_inputs for r in records], modules) if modules else [None] * count
        )
        rows = []
        for i, (graph, module) in enumerate(zip(records, paired, strict=True)):
            stamp, duration = samples[i] if i < len(samples) else (record.end_ns / 1e9, 0.0)
            row = self._compile_row(record.step, graph, int(stamp * 1e9), int(duration))
            if module is not None:
                row["input_shapes"], row["output_shapes"] = module.inputs, module.outputs
            rows.append(row)
        self.session.add_many("compiles", rows)

    def _compile_row(
        self, step: int, record: GraphRecord, time_ns: int, duration_ns: int
    ) -> dict[str, Any]:
        from tpuscope.schema import table_row  # the flush thread: pyarrow is loaded by now

        self.compile_index += 1
        return table_row(
            "compiles", backend="torch_xla", step=step, index=self.compile_index - 1,
            time_ns=time_ns, duration_ns=duration_ns, graph_hash=record.graph_hash or None,
            cause=record.cause or None, location=record.location, frames=record.frames,
            num_inputs=record.num_inputs, num_outputs=record.num_outputs, **record.sizes,
        )


_STEP_COLUMNS = (
    "step",
    "start_ns",
    "end_ns",
    "wall_ns",
    "boundary",
    "compiles",
    "compile_ns",
    "executions",
    "execute_ns",
    "fallback_ops",
    "transfers_from_device",
    "graph_hashes",
)


class _Batch:
    """The steps and metrics rows of one drain, column-wise: one list append per value costs
    a fraction of a dict per row, and the session gets one chunk per table per flush."""

    def __init__(self) -> None:
        self.steps: dict[str, list[Any]] = {name: [] for name in _STEP_COLUMNS}
        self._step_lists = tuple(self.steps.values())
        self.metric_rows: dict[str, list[Any]] = {
            "step": [],
            "name": [],
            "kind": [],
            "count": [],
            "total": [],
        }

    def step(self, *values: Any) -> None:
        for column, value in zip(self._step_lists, values, strict=True):
            column.append(value)

    def metrics(self, step: int, counters: dict[str, int], growth: Growth) -> None:
        """One row per counter, then one per metric (as metric_columns)."""
        rows = self.metric_rows
        count = len(counters) + len(growth)
        if not count:
            return
        rows["step"] += [step] * count
        rows["name"] += [*counters, *growth]
        rows["kind"] += ["counter"] * len(counters) + ["metric"] * len(growth)
        rows["count"] += [*counters.values(), *(n for n, _ in growth.values())]
        rows["total"] += [0.0] * len(counters) + [float(total) for _, total in growth.values()]

    def add_to(self, session: Session) -> None:
        if self.steps["step"]:
            session.add_columns("steps", self.steps)
        if self.metric_rows["step"]:
            session.add_columns("metrics", self.metric_rows)
