"""What one JAX step records, and the columns its rows become in the flush.

Kept lean on purpose: a jitted train step can take 0.1 ms, and a StepRecord is made
once per step on the program's thread. It is one object for the step's times (read by
jax_ready) and its counts, with no `__init__` and no `__slots__`: its fields are class
defaults until a step sets them, so making one costs a bare object, and a step that only
called the step function sets four of them. Dictionaries are created only when
something else happened (a sync, an eager op, a compile's metrics). The rows are built
column-wise by `StepColumns` in the flush thread, never per step.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

# Host syncs that copy a value to the host (block_until_ready only waits).
VALUE_READS = frozenset({"float", "int", "bool", "index", "complex", "item", "tolist", "tobytes",
                         "print", "np.asarray", "device_get"})


def _bump(table: dict | None, key: Any) -> dict:
    if table is None:
        return {key: 1}
    table[key] = table.get(key, 0) + 1
    return table


class StepRecord:
    """One step: when it ran (set by the collector and jax_ready) and what it did."""

    # -- times (jax_ready) --
    step = 0
    boundary = ""
    start_ns = 0  # when the step opened; once emitted, where it starts (see jax_ready)
    end_ns = 0  # set when emitted
    host_end_ns = 0
    ready_ns = 0
    awaiting = 0
    probe: Any = None  # one output array, asked is_ready() at the close
    ready_at_close = False
    # -- counts --
    compiles = 0
    compile_ns = 0
    jit_calls = 0  # every top-level call of a jitted function
    calls: dict[str, int] | None = None  # per function, except calls of the step function
    eager: dict[str, int] | None = None  # primitive -> eager dispatches
    eager_count = 0
    eager_ns = 0
    syncs: dict[str, int] | None = None  # kind -> count
    reads = 0  # syncs that copied a value to the host (VALUE_READS)
    sites: dict[tuple[str, str, str | None, str | None], int] | None = None  # (kind, name, location, library)
    metrics: dict[str, list[float]] | None = None  # name -> [count, total ns]

    def has_work(self) -> bool:
        return bool(self.compiles or self.jit_calls or self.eager or self.syncs)

    def call(self, name: str) -> None:
        self.jit_calls += 1
        self.calls = _bump(self.calls, name)

    def sync(self, kind: str, location: str | None, library: str | None = None) -> None:
        """Once or more per step (a wait on the loss): the counts are bumped inline."""
        syncs, sites, site = self.syncs, self.sites, ("host_sync", kind, location, library)
        if syncs is None:
            self.syncs = {kind: 1}
        else:
            syncs[kind] = syncs.get(kind, 0) + 1
        if sites is None:
            self.sites = {site: 1}
        else:
            sites[site] = sites.get(site, 0) + 1
        if kind in VALUE_READS:
            self.reads += 1

    def dispatch(self, primitive: str, location: str | None, library: str | None, elapsed_ns: int) -> None:
        self.eager = _bump(self.eager, primitive)
        self.eager_count += 1
        self.eager_ns += elapsed_ns
        self.sites = _bump(self.sites, ("eager_dispatch", primitive, location, library))

    def metric(self, name: str, value_ns: float | None) -> None:
        if self.metrics is None:
            self.metrics = {}
        entry = self.metrics.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += value_ns or 0.0


_STEP_FIELDS = attrgetter("step", "start_ns", "end_ns", "boundary", "compiles", "compile_ns", "jit_calls",
                          "eager_count", "reads", "calls", "eager", "syncs", "metrics", "sites")
_METRIC_COLUMNS = ("step", "name", "kind", "count", "total")
_SITE_COLUMNS = ("step", "kind", "name", "location", "library_frame", "count")


class StepColumns:
    """The steps, metrics and call_sites columns of a batch of emitted steps (flush thread)."""

    def __init__(self, records: list[StepRecord]) -> None:
        from tpuscope.schema import table_columns  # pyarrow: in the flush thread, never at start-up

        fields = list(zip(*map(_STEP_FIELDS, records), strict=True)) if records else [()] * 14
        step, start, end, boundary, compiles, compile_ns, jit_calls, eager_count, reads = fields[:9]
        count = len(records)
        self.steps = table_columns(
            "steps", step=list(step), start_ns=list(start), end_ns=list(end),
            wall_ns=[e - s for s, e in zip(start, end, strict=True)], boundary=list(boundary),
            compiles=list(compiles), compile_ns=list(compile_ns),
            executions=[j + e for j, e in zip(jit_calls, eager_count, strict=True)],
            fallback_ops=[0] * count, transfers_from_device=list(reads), graph_hashes=[[]] * count)
        self.metrics: dict[str, list[Any]] = {name: [] for name in _METRIC_COLUMNS}
        self.sites: dict[str, list[Any]] = {name: [] for name in _SITE_COLUMNS}
        for record, calls, eager, syncs, metrics, sites in zip(records, *fields[9:], strict=True):
            if calls or eager or syncs or metrics:
                self._metric_rows(record, calls, eager, syncs, metrics)
            if sites:
                self._site_rows(record.step, sites)

    def _metric_row(self, step: int, name: str, kind: str, count: int, total: float) -> None:
        metrics = self.metrics
        metrics["step"].append(step)
        metrics["name"].append(name)
        metrics["kind"].append(kind)
        metrics["count"].append(count)
        metrics["total"].append(total)

    def _metric_rows(self, record: StepRecord, calls: dict | None, eager: dict | None, syncs: dict | None,
                     metrics: dict | None) -> None:
        """Counters (jit calls per function, eager primitives, host syncs) and timed metrics."""
        step, row = record.step, self._metric_row
        if calls:
            row(step, "jax.jit_calls", "counter", record.jit_calls, 0.0)
            for name, count in calls.items():
                row(step, f"jax.jit_calls/{name}", "counter", count, 0.0)
        for name, count in (eager or {}).items():
            row(step, f"jax.eager/{name}", "counter", count, 0.0)
        for kind, count in (syncs or {}).items():
            row(step, f"jax.host_syncs/{kind}", "counter", count, 0.0)
        if eager:
            row(step, "jax.eager_dispatch_time", "metric", record.eager_count, float(record.eager_ns))
        for name, (count, total) in (metrics or {}).items():
            row(step, name, "metric" if total else "counter", int(count), float(total))

    def _site_rows(self, step: int, sites: dict) -> None:
        columns = self.sites
        for (kind, name, location, library), count in sites.items():
            columns["step"].append(step)
            columns["kind"].append(kind)
            columns["name"].append(name)
            columns["location"].append(location)
            columns["library_frame"].append(library)
            columns["count"].append(count)

    def tables(self) -> dict[str, dict[str, list[Any]]]:
        """Each table's columns, tables without rows left out."""
        from tpuscope.schema import table_columns

        out = {"steps": self.steps, "metrics": table_columns("metrics", **self.metrics),
               "call_sites": table_columns("call_sites", **self.sites)}
        return {name: columns for name, columns in out.items() if columns["step"]}
