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
    FALLBACKS,
    HOST_TRANSFER,
    UNCACHED,
    Growth,
    Metrics,
    new_samples,
    split_arrays,
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
    counters: dict[str, int] | None  # a full read: every counter's delta since the previous step
    raw: tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]] | None  # else (names, values, at the last step)
    growth: Growth  # metric deltas since the previous step
    metrics: Metrics  # the snapshot's metric data (every metric on a full read)
    full: bool
    launched: int
    traced: tuple[Counter, Counter] | None = None  # call sites the tracer saw in this step
    debug_end: int | None = None  # the debug file's size at the step's end (None: not read)
    modules: list[ModuleShapes] | None = None  # HLO modules dumped by the step's end (compile steps)

    def counter_deltas(self) -> dict[str, int]:
        """The counters that moved in the step (a dict built here, off the step, for the rows)."""
        if self.counters is not None:
            return self.counters
        assert self.raw is not None
        names, values, before = self.raw
        return {n: v - b for n, v, b in zip(names, values, before, strict=True) if v != b}

    def plain(self) -> bool:
        """A step without a full read, host transfers, traced call sites, debug text or dumped
        modules: its rows come from its counter values alone (StepRows._plain_rows)."""
        return self.raw is not None and not self.growth and self.traced is None and self.debug_end is None

    def uncached(self) -> int:
        """UncachedCompile's delta: graphs compiled in the step."""
        if self.counters is not None:
            return self.counters.get("UncachedCompile", 0)
        assert self.raw is not None
        return self.raw[1][UNCACHED] - self.raw[2][UNCACHED]


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
            batch, plain = _Batch(), []
            while self.queue and not self._failed:
                record = self.queue.popleft()
                try:
                    if record.plain() and (not plain or plain[-1].raw[0] is record.raw[0]):  # type: ignore[index]
                        plain.append(record)
                        continue
                    self._plain_rows(plain, batch)
                    plain = [record] if record.plain() else []
                    if not plain:
                        self._rows(record, batch)
                except Exception as exc:
                    self._failed = True
                    print(
                        f"tpuscope: torch_xla step rows stopped: {type(exc).__name__}: {exc}",
                        file=sys.stderr,
                    )
            try:
                self._plain_rows(plain, batch)
            except Exception as exc:
                self._failed = True
                print(f"tpuscope: torch_xla step rows stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
            batch.add_to(self.session)

    def _plain_rows(self, records: list[StepRecord], batch: _Batch) -> None:
        """The rows of consecutive plain steps (see StepRecord.plain) at once, with numpy (torch_xla
        imports it): the same rows `_rows` makes one step at a time, at a fraction of the cost."""
        if not records:
            return
        import numpy as np

        names = records[0].raw[0]  # type: ignore[index]
        delta = (np.array([r.raw[1] for r in records], dtype=np.int64)  # type: ignore[index]
                 - np.array([r.raw[2] for r in records], dtype=np.int64))  # type: ignore[index]
        steps = [r.step for r in records]
        self.unsplit += [(r.step, r.end_ns) for r in records]
        fallback_ops = delta[:, FALLBACKS].sum(axis=1).tolist()
        batch.steps += [
            (r.step, r.start_ns, r.end_ns, r.end_ns - r.start_ns, r.boundary, uncached, 0, r.launched, None, ops, 0, [])
            for r, uncached, ops in zip(records, delta[:, UNCACHED].tolist(), fallback_ops, strict=True)
        ]
        at, column = np.nonzero(delta)  # step by step, counters in the order read (as counter_deltas)
        batch.metric_columns({
            "step": [steps[i] for i in at.tolist()], "name": [names[c] for c in column.tolist()],
            "kind": ["counter"] * len(at), "count": delta[at, column].tolist(), "total": [0.0] * len(at),
        })
        for i, ops in enumerate(fallback_ops):
            if ops:
                fallbacks = {n: c for n, c in records[i].counter_deltas().items() if n.startswith("aten::")}
                fallback_rows, read_rows = site_rows(steps[i], fallbacks, None)
                self.session.add_many("fallbacks", fallback_rows)
                self.session.add_many("call_sites", read_rows)

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
        ) if record.full else []  # compile metrics are read on full reads only (a compile asks for one)
        if records or samples:
            self._compile_rows(record, records, samples, record.modules or [])

    def split(self, metrics: Metrics) -> tuple[Growth, dict[str, list[Any]]]:
        """The metric growth of the steps since the last full read, from this full read's
        samples (counters.split_by_step): the last step's (the full-read step: its rows go
        with its counters) and the others' as metrics-table columns."""
        steps, ends = [step for step, _ in self.unsplit], [end for _, end in self.unsplit]
        arrays = split_arrays(metrics, self.full_metrics, ends)
        self.full_metrics, self.unsplit = metrics, []
        last, own = len(steps) - 1, {}
        columns: dict[str, list[Any]] = {"step": [], "name": [], "kind": [], "count": [], "total": []}
        for name, (index, counts, totals) in arrays.items():
            if len(index) and index[-1] == last:
                own[name] = (int(counts[-1]), float(totals[-1]))
                index, counts, totals = index[:-1], counts[:-1], totals[:-1]
            columns["step"] += [steps[i] for i in index.tolist()]
            columns["name"] += [name] * len(index)
            columns["kind"] += ["metric"] * len(index)
            columns["count"] += counts.tolist()
            columns["total"] += totals.tolist()
        return own, columns

    def _step_rows(
        self,
        record: StepRecord,
        graph_hashes: list[str],
        split: tuple[Growth, dict[str, list[Any]]] | None,
        batch: _Batch,
    ) -> None:
        """The steps row; the step's counter rows and, on a full read, the metric rows of
        every step since the previous one. `execute_ns` is known on full-read steps only;
        `executions` are the graphs launched in the step (xla_steps)."""
        counters, growth = record.counter_deltas(), record.growth
        fallbacks = {n: c for n, c in counters.items() if n.startswith("aten::")}
        own = split[0] if split is not None else None
        batch.step(
            record.step,
            record.start_ns,
            record.end_ns,
            record.end_ns - record.start_ns,
            record.boundary,
            record.uncached(),
            int(sum(growth.get(n, (0, 0.0))[1] for n in COMPILE_METRICS)),
            record.launched,
            None if own is None else int(sum(own.get(n, (0, 0.0))[1] for n in EXECUTE_TIMES)),
            sum(fallbacks.values()),
            growth.get(HOST_TRANSFER, (0, 0.0))[0],
            graph_hashes,
        )
        if split is not None:
            batch.metric_columns(split[1])
        batch.metrics(record.step, counters, own or {})
        if fallbacks or record.traced is not None:
            fallback_rows, read_rows = site_rows(record.step, fallbacks, record.traced)
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
    """The steps and metrics rows of one drain, column-wise (a tuple per step, transposed
    at the end; list appends for metrics): a fraction of a dict per row, and the session
    gets one chunk per table per flush."""

    def __init__(self) -> None:
        self.steps: list[tuple[Any, ...]] = []  # one tuple per step, turned column-wise at the end
        self.metric_rows: dict[str, list[Any]] = {
            "step": [],
            "name": [],
            "kind": [],
            "count": [],
            "total": [],
        }

    def step(self, *values: Any) -> None:
        self.steps.append(values)

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

    def metric_columns(self, columns: dict[str, list[Any]]) -> None:
        for name, values in columns.items():
            self.metric_rows[name] += values

    def add_to(self, session: Session) -> None:
        from tpuscope.schema import table_columns  # the flush thread: pyarrow is loaded by now

        if self.steps:
            columns = dict(zip(_STEP_COLUMNS, map(list, zip(*self.steps, strict=True)), strict=True))
            session.add_columns("steps", table_columns("steps", **columns))
        if self.metric_rows["step"]:
            session.add_columns("metrics", table_columns("metrics", **self.metric_rows))
