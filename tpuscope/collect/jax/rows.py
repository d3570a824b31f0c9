"""What one JAX step records, and the columns its rows become in the flush.

Kept lean on purpose: a jitted train step can take 0.1 ms, and its bookkeeping runs on
the program's thread. Nothing a step leaves behind until the flush (every 2 s) may be an
object the garbage collector tracks: the 2-4 such objects per step of earlier versions (a
record, its dicts, a key tuple) made Python collect every ~175 steps, and once in 20,000
steps scan all of JAX's heap (5-10 us per step at a load of 4-7, as much as the rest of the
step path; the bare program never collected). So:

- `OpenStep`, the open step (its times, read by collect/jax/ready.py, and its counts), has no
  `__init__`: its fields are class defaults until a step sets them. It lives only until the
  step is emitted into `StepLog`: its integers appended to one `array('q')` (which the
  collector does not track), its boundary (a shared string) to a list.
- Host syncs, eager dispatches and calls of other jitted functions go to `EventLog` as
  they happen: (step, event id) in two `array.array` columns (not tracked at all), the
  event's key (kind, name, location, library) interned once per distinct event.

The rows are built column-wise by `StepColumns` in the flush thread, never per step, in
the order the per-step dictionaries of earlier versions gave them.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Sized
from typing import Any

from tpuscope.store.columns import Coded, Repeat

# Host syncs that copy a value to the host (block_until_ready only waits).
VALUE_READS = frozenset(
    {
        "float",
        "int",
        "bool",
        "index",
        "complex",
        "item",
        "tolist",
        "tobytes",
        "print",
        "np.asarray",
        "device_get",
    }
)
HOST_SYNC, EAGER, JIT_CALL = "host_sync", "eager_dispatch", "jit_call"  # EventLog kinds
Key = tuple[str, str, str | None, str | None]  # (kind, name, location, library)


class OpenStep:
    """One step: when it ran (set by the collector and ready.py) and what it did."""

    # -- times (ready.py) --
    step = 0
    boundary = ""
    start_ns = 0  # when the step opened; once emitted, where it starts (see ready.py)
    host_end_ns = 0
    ready_ns = 0
    found_ns = 0  # polled: found ready by this time (a later close), not before (ready.py)
    awaiting = 0
    probe: Any = None  # one output array, asked is_ready() at the close
    ready_at_close = False
    # -- counts (what the step did is in EventLog) --
    compiles = 0
    compile_ns = 0
    jit_calls = 0  # every top-level call of a jitted function
    events = 0  # EventLog entries of this step (syncs, eager dispatches, other jitted calls)
    eager_count = 0
    eager_ns = 0
    reads = 0  # syncs that copied a value to the host (VALUE_READS)
    metrics: dict[str, list[float]] | None = None  # name -> [count, total ns] (compile steps only)

    def has_work(self) -> bool:
        return bool(self.compiles or self.jit_calls or self.eager_count or self.events)

    def metric(self, name: str, value_ns: float | None) -> None:
        if self.metrics is None:
            self.metrics = {}
        entry = self.metrics.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += value_ns or 0.0


STEP_INTS = (
    "step",
    "start_ns",
    "end_ns",
    "compiles",
    "compile_ns",
    "jit_calls",
    "eager_count",
    "eager_ns",
    "reads",
)  # one emitted step's integers, in StepLog.ints
_WIDTH = len(STEP_INTS)


class StepLog:
    """The emitted steps, waiting for the flush: their integers (STEP_INTS) in one `array('q')`,
    their boundaries (shared strings) in a list, a compile step's metrics apart. Emitting a
    step leaves no new object behind (the record is dropped once emitted)."""

    def __init__(self) -> None:
        self.ints = array("q")
        self.boundaries: list[str] = []
        self.metrics: list[tuple[int, dict[str, list[float]]]] = []

    def emit(self, r: OpenStep, start_ns: int, end_ns: int) -> None:
        """A step done, with its final times (ready.py; the program's thread, under the lock)."""
        self.ints.extend(
            (
                r.step,
                start_ns,
                end_ns,
                r.compiles,
                r.compile_ns,
                r.jit_calls,
                r.eager_count,
                r.eager_ns,
                r.reads,
            )
        )  # a tuple that dies at once: nothing for the collector
        self.boundaries.append(r.boundary)
        if r.metrics is not None:
            self.metrics.append((r.step, r.metrics))

    def last_step(self) -> int:
        return self.ints[-_WIDTH] if self.ints else -1

    def take(self) -> StepLog:
        """Everything emitted so far, handed over; this log starts empty (call under the lock)."""
        taken = StepLog()
        taken.ints, taken.boundaries, taken.metrics = self.ints, self.boundaries, self.metrics
        self.ints, self.boundaries, self.metrics = array("q"), [], []
        return taken

    def clear(self) -> None:
        self.take()

    def columns(self) -> Any:
        """Every STEP_INTS column at once, as the rows of a (column, step) numpy int64 view of
        the log (no Python int per value: pyarrow converts them as one buffer each)."""
        import numpy as np  # the flush thread; JAX itself needs numpy

        return np.frombuffer(self.ints, dtype=np.int64).reshape(-1, _WIDTH).T


class EventLog:
    """Each step's syncs, eager dispatches and other jitted calls, in the order they happened:
    parallel `array('q')` columns of step numbers and event ids (steps never decrease)."""

    def __init__(self) -> None:
        self.steps = array("q")
        self.ids = array("q")
        self.keys: list[Key] = []
        self._index: dict[Key, int] = {}

    def add(self, step: int, key: Key) -> None:
        """One event of `step` (the program's thread, under the collector's lock)."""
        self.add_id(step, self.intern(key))

    def intern(self, key: Key) -> int:
        """The id of an event key, given once per distinct key (under the collector's lock)."""
        event = self._index.get(key)
        if event is None:
            event = self._index[key] = len(self.keys)
            self.keys.append(key)
        return event

    def add_id(self, step: int, event: int) -> None:
        """One event of `step` whose id is known (`intern`)."""
        self.steps.append(step)
        self.ids.append(event)

    def take(self, last_step: int) -> tuple[array, array]:
        """Remove and return the events of steps <= last_step (call under the lock)."""
        count = bisect_right(self.steps, last_step)
        steps, ids = self.steps[:count], self.ids[:count]
        del self.steps[:count], self.ids[:count]
        return steps, ids

    def clear(self) -> None:
        del self.steps[:], self.ids[:]


_METRIC_COLUMNS = ("step", "name", "kind", "count", "total")
_SITE_COLUMNS = ("step", "kind", "name", "location", "library_frame", "count")


def _increasing(values: array) -> bool:
    """Each value greater than the one before."""
    return all(a < b for a, b in zip(values, values[1:]))  # noqa: B905  (one shorter by design)


def _counts(ids: array, start: int, stop: int) -> dict[int, int]:
    """Event id -> count among ids[start:stop], in the order each id first occurred."""
    if stop == start + 1:
        return {ids[start]: 1}
    counts: dict[int, int] = {}
    for event in ids[start:stop]:
        counts[event] = counts.get(event, 0) + 1
    return counts


class StepColumns:
    """The steps, metrics and call_sites columns of a batch of emitted steps (flush thread)."""

    def __init__(
        self,
        done: StepLog,
        steps: array | None = None,
        ids: array | None = None,
        keys: list[Key] | None = None,
    ) -> None:
        from tpuscope.schema import table_columns  # pyarrow: in the flush thread, never at start-up

        ints = dict(zip(STEP_INTS, done.columns(), strict=True))
        count = len(done.boundaries)
        self.steps = table_columns(
            "steps",
            step=ints["step"],
            start_ns=ints["start_ns"],
            end_ns=ints["end_ns"],
            wall_ns=ints["end_ns"] - ints["start_ns"],
            boundary=done.boundaries,
            compiles=ints["compiles"],
            compile_ns=ints["compile_ns"],
            executions=ints["jit_calls"] + ints["eager_count"],
            fallback_ops=Repeat(0, count),
            transfers_from_device=ints["reads"],
            graph_hashes=Repeat([], count),
        )
        self.metrics: dict[str, list[Any]] = {name: [] for name in _METRIC_COLUMNS}
        self.sites: dict[str, list[Any]] = {name: [] for name in _SITE_COLUMNS}
        # (metrics, call_sites) when `_single_syncs` built them a column at a time
        self._whole: tuple[dict[str, Sized], dict[str, Sized]] | None = None
        self._keys = keys or []
        self._sync_names: dict[str, str] = {}  # one metric name string per kind, shared by its rows
        if (ids or done.metrics) and not self._single_syncs(
            done, steps or array("q"), ids or array("q")
        ):
            self._events(done, steps or array("q"), ids or array("q"))

    def _single_syncs(self, done: StepLog, steps: array, ids: array) -> bool:
        """A batch whose every event is a host sync, one a step at most, with no compile metrics
        (the batches of a training loop that waits on its loss): its rows built a column at a
        time, the same rows in the same order as `_events` gives them step by step. False (and
        nothing built) for any other batch."""
        keys, emitted = self._keys, done.ints[::_WIDTH]
        if done.metrics or not ids or any(keys[event][0] != HOST_SYNC for event in set(ids)):
            return False
        if not (_increasing(steps) and _increasing(emitted) and set(emitted).issuperset(steps)):
            return False
        import numpy as np  # the flush thread; JAX itself needs numpy

        step, codes, count = (
            np.array(steps, dtype=np.int64),
            np.array(ids, dtype=np.int64),
            len(ids),
        )
        used = set(ids)

        def coded(
            value: Any,
        ) -> Coded:  # a column of value(key) for each event, as codes into the keys
            return Coded(
                codes, [value(keys[event]) if event in used else None for event in range(len(keys))]
            )

        metrics: dict[str, Sized] = {
            "step": step,
            "name": coded(lambda key: self._sync_name(key[1])),
            "kind": Repeat("counter", count),
            "count": Repeat(1, count),
            "total": Repeat(0.0, count),
        }
        sites: dict[str, Sized] = {
            "step": step,
            "kind": Repeat(HOST_SYNC, count),
            "name": coded(lambda key: key[1]),
            "location": coded(lambda key: key[2]),
            "library_frame": coded(lambda key: key[3]),
            "count": Repeat(1, count),
        }
        self._whole = (metrics, sites)
        return True

    def _events(self, done: StepLog, steps: array, ids: array) -> None:
        """Each step's metric and site rows: its events (a run of `steps` equal to its number)
        and its compile metrics, step by step. A step whose only event is one host sync (a
        wait on the loss: most steps of most programs) takes a shortcut to the same two rows."""
        metrics = dict(done.metrics)
        ints, at, total = done.ints, 0, len(steps)
        single = self._single_sync_rows
        for row in range(0, len(ints), _WIDTH):
            step = ints[row]
            while at < total and steps[at] < step:  # no such step was emitted (cannot happen)
                at += 1
            stop = at
            while stop < total and steps[stop] == step:
                stop += 1
            shortcut = stop == at + 1 and step not in metrics and single(step, ids[at])
            if not shortcut and (stop > at or step in metrics):
                counts = _counts(ids, at, stop) if stop > at else {}
                self._metric_rows(ints[row : row + _WIDTH], counts, metrics.get(step))
                self._site_rows(step, counts)
            at = stop

    def _single_sync_rows(self, step: int, event: int) -> bool:
        """The rows of a step whose only event is `event`, if it is a host sync (else False)."""
        kind, name, location, library = self._keys[event]
        if kind != HOST_SYNC:
            return False
        metrics, sites = self.metrics, self.sites
        metrics["step"].append(step)
        metrics["name"].append(self._sync_name(name))
        metrics["kind"].append("counter")
        metrics["count"].append(1)
        metrics["total"].append(0.0)
        sites["step"].append(step)
        sites["kind"].append(kind)
        sites["name"].append(name)
        sites["location"].append(location)
        sites["library_frame"].append(library)
        sites["count"].append(1)
        return True

    def _sync_name(self, kind: str) -> str:
        name = self._sync_names.get(kind)
        if name is None:
            name = self._sync_names[kind] = f"jax.host_syncs/{kind}"
        return name

    def _metric_row(self, step: int, name: str, kind: str, count: int, total: float) -> None:
        metrics = self.metrics
        metrics["step"].append(step)
        metrics["name"].append(name)
        metrics["kind"].append(kind)
        metrics["count"].append(count)
        metrics["total"].append(total)

    def _metric_rows(self, record: array, counts: dict[int, int], metrics: dict | None) -> None:
        """Counters (jit calls per function, eager primitives, host syncs) and timed metrics."""
        step, row, keys = record[0], self._metric_row, self._keys
        calls: dict[str, int] = {}
        eager: dict[str, int] = {}
        syncs: dict[str, int] = {}
        for event, count in counts.items():
            kind, name = keys[event][:2]
            table = calls if kind == JIT_CALL else eager if kind == EAGER else syncs
            table[name] = table.get(name, 0) + count
        if calls:
            row(step, "jax.jit_calls", "counter", record[5], 0.0)
            for name, count in calls.items():
                row(step, f"jax.jit_calls/{name}", "counter", count, 0.0)
        for name, count in eager.items():
            row(step, f"jax.eager/{name}", "counter", count, 0.0)
        for kind, count in syncs.items():
            row(step, f"jax.host_syncs/{kind}", "counter", count, 0.0)
        if eager:
            row(step, "jax.eager_dispatch_time", "metric", record[6], float(record[7]))
        for name, (count, total) in (metrics or {}).items():
            row(step, name, "metric" if total else "counter", int(count), float(total))

    def _site_rows(self, step: int, counts: dict[int, int]) -> None:
        columns, keys = self.sites, self._keys
        for event, count in counts.items():
            kind, name, location, library = keys[event]
            if kind == JIT_CALL:
                continue
            columns["step"].append(step)
            columns["kind"].append(kind)
            columns["name"].append(name)
            columns["location"].append(location)
            columns["library_frame"].append(library)
            columns["count"].append(count)

    def tables(self) -> dict[str, dict[str, Sized]]:
        """Each table's columns, tables without rows left out."""
        from tpuscope.schema import table_columns

        metrics, sites = self._whole or (self.metrics, self.sites)
        out = {
            "steps": self.steps,
            "metrics": table_columns("metrics", **metrics),
            "call_sites": table_columns("call_sites", **sites),
        }
        return {name: columns for name, columns in out.items() if len(columns["step"])}
