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
    UNCACHED,
    Growth,
    Metrics,
    new_samples,
    split_arrays,
)
from tpuscope.collect.xla.fallback_sites import site_rows
from tpuscope.collect.xla.plain import Batch, PlainLog, fallback_steps, plain_columns
from tpuscope.collect.xla.shapes import ModuleShapes, pair_modules
from tpuscope.parse.pt_xla_debug import DebugFileTail, GraphRecord
from tpuscope.parse.xla_counter_names import is_fallback_counter
from tpuscope.schema_rows import CompileRow
from tpuscope.store.columns import Coded, Repeat

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
    raw: (
        tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]] | None
    )  # else (names, values, at the last step)
    growth: Growth  # metric deltas since the previous step
    metrics: Metrics  # the snapshot's metric data (every metric on a full read)
    full: bool
    launched: int
    traced: tuple[Counter, Counter] | None = None  # call sites the tracer saw in this step
    debug_end: int | None = None  # the debug file's size at the step's end (None: not read)
    modules: list[ModuleShapes] | None = (
        None  # HLO modules dumped by the step's end (compile steps)
    )

    def counter_deltas(self) -> dict[str, int]:
        """The counters that moved in the step (a dict built here, off the step, for the rows)."""
        if self.counters is not None:
            return self.counters
        assert self.raw is not None
        names, values, before = self.raw
        return {n: v - b for n, v, b in zip(names, values, before, strict=True) if v != b}

    def plain(self) -> bool:
        """A step without a full read, host transfers, traced call sites or debug text: its rows
        come from its counter values alone, so it goes to a PlainLog (xla/plain.py) instead."""
        return (
            self.raw is not None
            and not self.growth
            and self.traced is None
            and self.debug_end is None
        )

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
        self.unsplit_steps: list[int] = []  # steps since it ...
        self.unsplit_ends: list[int] = []  # ... and when they ended
        self.queue: deque[StepRecord | PlainLog] = deque()
        self.boundaries: list[str] = []  # the boundary names plain steps are logged with, by code
        self._boundary_codes: dict[str, int] = {}
        self._lock = threading.Lock()
        self._failed = False
        _LIVE.add(self)

    def _after_fork(self) -> None:
        """A forked child must not write its parent's queued steps (nor wait on its lock)."""
        self.queue = deque()
        self._lock = threading.Lock()

    def log_plain(
        self,
        names: tuple[str, ...],
        before: tuple[int, ...],
        values: tuple[int, ...],
        head: tuple[int, int, int, int],
        boundary: str,
    ) -> None:
        """A plain step, from the step hook: one row appended to the queue's last PlainLog (a new
        log when the last item is none, or reads other counters, or did not end at `before`);
        `head` is (step, start_ns, end_ns, graphs launched)."""
        queue = self.queue
        log = queue[-1] if queue else None
        if type(log) is not PlainLog or log.names is not names or log.last is not before:
            log = PlainLog(names, before)
            queue.append(log)
        code = self._boundary_codes.get(boundary)
        if code is None:
            code = self._boundary_codes[boundary] = len(self.boundaries)
            self.boundaries.append(boundary)
        log.data.extend((*head, code, *values))
        log.last = values

    def drain(self) -> None:
        """Build the rows of every queued step, as column chunks in step order; a failure is
        one line, once, and stops the rows (never the program). A PlainLog still last in the
        queue stays there (the hook goes on appending to it); its rows so far are taken."""
        with self._lock:
            batch, queue = Batch(), self.queue
            while queue and not self._failed:
                item = queue[0]
                last = len(queue) == 1  # before reading its rows: only the last one can still grow
                try:
                    if isinstance(item, PlainLog):
                        self._plain_rows(item, batch)
                        if last:
                            break
                    else:
                        self._rows(item, batch)
                except Exception as exc:
                    self._failed = True
                    print(
                        f"tpuscope: torch_xla step rows stopped: {type(exc).__name__}: {exc}",
                        file=sys.stderr,
                    )
                queue.popleft()
            batch.add_to(self.session)

    def _plain_rows(self, log: PlainLog, batch: Batch) -> None:
        """The rows of a log's new plain steps at once, with numpy (torch_xla imports it): the
        same rows `_rows` makes one step at a time, at a fraction of the cost."""
        taken = log.take()
        if taken is None:
            return
        seg, delta = taken
        steps, metrics = plain_columns(seg, delta, log.names, self.boundaries)
        self.unsplit_steps += steps["step"].tolist()
        self.unsplit_ends += steps["end_ns"].tolist()
        batch.arrays("steps", steps)
        batch.arrays("metrics", metrics)
        for step, fallbacks in fallback_steps(seg, delta, log.names):
            fallback_rows, read_rows = site_rows(step, fallbacks, None)
            self.session.add_many("fallbacks", fallback_rows)
            self.session.add_many("call_sites", read_rows)

    def _rows(self, record: StepRecord, batch: Batch) -> None:
        self.unsplit_steps.append(record.step)
        self.unsplit_ends.append(record.end_ns)
        split = self.split(record.metrics) if record.full else None
        records: list[GraphRecord] = []
        executions: list[GraphRecord] = []
        if self.debug is not None and record.debug_end is not None:
            records, executions = self.debug.poll(record.debug_end)
        hashes = [e.graph_hash for e in executions if e.graph_hash]
        self._step_rows(record, hashes, split, batch)
        samples = (
            sorted(  # eager mode times each op's compile as EagerOpCompileTime
                s
                for name in COMPILE_METRICS
                for s in new_samples(record.metrics.get(name), record.growth.get(name, (0, 0.0))[0])
            )
            if record.full
            else []
        )  # compile metrics are read on full reads only (a compile asks for one)
        if records or samples:
            self._compile_rows(record, records, samples, record.modules or [])

    def split(self, metrics: Metrics) -> tuple[Growth, dict[str, Any]]:
        """The metric growth of the steps since the last full read, from this full read's
        samples (counters.split_by_step): the last step's (the full-read step: its rows go
        with its counters) and the others' as metrics-table columns (numpy arrays: metric by
        metric, each step that got samples)."""
        import numpy as np

        steps = np.asarray(self.unsplit_steps, dtype=np.int64)
        arrays = split_arrays(metrics, self.full_metrics, self.unsplit_ends)
        self.full_metrics, self.unsplit_steps, self.unsplit_ends = metrics, [], []
        last, own = len(steps) - 1, {}
        at, codes, counts, totals = [], [], [], []
        for code, (name, (index, count, total)) in enumerate(arrays.items()):
            if len(index) and index[-1] == last:
                own[name] = (int(count[-1]), float(total[-1]))
                index, count, total = index[:-1], count[:-1], total[:-1]
            at.append(steps[index])
            codes.append(np.full(len(index), code, dtype=np.int64))
            counts.append(np.asarray(count, dtype=np.int64))
            totals.append(np.asarray(total, dtype=np.float64))
        rows = sum(map(len, at))
        if not rows:
            return own, {"step": []}
        return own, {
            "step": np.concatenate(at),
            "name": Coded(np.concatenate(codes), list(arrays)),
            "kind": Repeat("metric", rows),
            "count": np.concatenate(counts),
            "total": np.concatenate(totals),
        }

    def _step_rows(
        self,
        record: StepRecord,
        graph_hashes: list[str],
        split: tuple[Growth, dict[str, Any]] | None,
        batch: Batch,
    ) -> None:
        """The steps row; the step's counter rows and, on a full read, the metric rows of
        every step since the previous one. `execute_ns` is known on full-read steps only;
        `executions` are the graphs launched in the step (steps.py)."""
        counters, growth = record.counter_deltas(), record.growth
        fallbacks = {n: c for n, c in counters.items() if is_fallback_counter(n)}
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
            batch.arrays("metrics", split[1])
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
            # only where PT_XLA_DEBUG described the graph: its input count checks the pairing, and a
            # compile it says nothing of (an eager-mode op's) would join others by shapes alone
            if module is not None and graph.num_inputs is not None:
                row["input_shapes"], row["output_shapes"] = module.inputs, module.outputs
            rows.append(row)
        self.session.add_many("compiles", rows)

    def _compile_row(
        self, step: int, record: GraphRecord, time_ns: int, duration_ns: int
    ) -> CompileRow:
        from tpuscope.schema import table_row  # the flush thread: pyarrow is loaded by now

        self.compile_index += 1
        return table_row(
            "compiles",
            backend="torch_xla",
            step=step,
            index=self.compile_index - 1,
            time_ns=time_ns,
            duration_ns=duration_ns,
            graph_hash=record.graph_hash or None,
            cause=record.cause or None,
            location=record.location,
            frames=record.frames,
            num_inputs=record.num_inputs,
            num_outputs=record.num_outputs,
            **record.sizes,
        )
