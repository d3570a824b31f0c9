"""Plain torch_xla steps kept as integers, and a drain's rows as column chunks in order.

A plain step (no full read, no host transfer, no traced call site, no debug text: most steps
of a training loop) needs nothing but its counter values to make its rows. The step hook
appends them to a `PlainLog`, one `array('q')` row per step (step, start, end, graphs
launched, boundary code, then the per-step counters), so such a step leaves no object the
garbage collector tracks and costs one tuple concatenation and one `extend`. The flush
thread turns a log's new rows into the steps and metrics columns with numpy, handed to the
part writer as numpy arrays, `Coded` strings and `Repeat` constants: nothing is converted
one value at a time (store/parts). The rows are the ones `StepRows._rows` would make one
step at a time, in the same order.
"""

from __future__ import annotations

from array import array
from typing import Any

from tpuscope.collect.xla.counters import FALLBACKS, UNCACHED
from tpuscope.parse.xla_counter_names import is_fallback_counter
from tpuscope.store.columns import Coded, Repeat

HEAD = 5  # step, start_ns, end_ns, launched, boundary code; then the counter values


class PlainLog:
    """Consecutive plain steps reading the same counter names, each step's `before` being the
    previous one's values. Only the step hook appends, and only to the queue's last item; the
    flush takes the rows logged so far (`take`) and leaves a log that is still last in the
    queue for the hook to go on with (a row half-appended is never taken: whole rows only)."""

    __slots__ = ("names", "base", "data", "done", "last", "width")

    def __init__(self, names: tuple[str, ...], before: tuple[int, ...]) -> None:
        self.names = names
        self.base: Any = before  # the counter values before the first row not taken yet
        self.data = array("q")
        self.done = 0  # rows taken by the flush
        self.last = before  # the values of the last row logged (the next step's `before`)
        self.width = HEAD + len(names)

    def take(self) -> tuple[Any, Any] | None:
        """The rows logged since the last take (an int64 matrix) and their counter deltas."""
        import numpy as np  # torch_xla imports numpy; the flush thread only

        rows = len(self.data) // self.width
        if rows == self.done:
            return None
        seg = np.frombuffer(self.data[self.done * self.width : rows * self.width], dtype=np.int64)
        seg = seg.reshape(-1, self.width)
        values = seg[:, HEAD:]
        before = np.vstack((np.asarray(self.base, dtype=np.int64).reshape(1, -1), values[:-1]))
        self.base, self.done = values[-1].copy(), rows
        return seg, values - before


def plain_columns(
    seg: Any, delta: Any, names: tuple[str, ...], boundaries: list[str]
) -> tuple[dict, dict]:
    """The steps and metrics columns of a log's rows (as `_rows` makes them: no compile time,
    no execute time, no transfers, no graph hashes; one counter row per moved counter, step
    by step, in the order read)."""
    import numpy as np

    n = len(seg)
    start, end = seg[:, 1], seg[:, 2]
    steps = {
        "step": seg[:, 0],
        "start_ns": start,
        "end_ns": end,
        "wall_ns": end - start,
        "boundary": Coded(seg[:, 4], boundaries),
        "compiles": delta[:, UNCACHED],
        "compile_ns": Repeat(0, n),
        "executions": seg[:, 3],
        "fallback_ops": delta[:, FALLBACKS].sum(axis=1),
        "transfers_from_device": Repeat(0, n),
        "graph_hashes": Repeat([], n),
    }
    at, column = np.nonzero(delta)
    metrics = {
        "step": seg[at, 0],
        "name": Coded(column, names),
        "kind": Repeat("counter", len(at)),
        "count": delta[at, column],
        "total": Repeat(0.0, len(at)),
    }
    return steps, metrics


def fallback_steps(
    seg: Any, delta: Any, names: tuple[str, ...]
) -> list[tuple[int, dict[str, int]]]:
    """(step, its fallback counter deltas, every namespace) of the rows whose fallback counters moved."""
    import numpy as np

    moved = np.flatnonzero(delta[:, FALLBACKS].sum(axis=1))
    return [
        (
            int(seg[i, 0]),
            {
                n: d
                for n, d in zip(names, delta[i].tolist(), strict=True)
                if d and is_fallback_counter(n)
            },
        )
        for i in moved.tolist()
    ]


STEP_COLUMNS = (
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


class Batch:
    """The steps and metrics rows of one drain as column chunks, in queue order: rows of
    single steps are gathered column-wise (a tuple per step, list appends for metrics) until
    a chunk of arrays (a plain log's, a full read's split) comes, which starts the next one."""

    def __init__(self) -> None:
        self.steps: list[tuple[Any, ...]] = []  # one tuple per step, turned column-wise when cut
        self.metric_rows: dict[str, list[Any]] = self._no_metrics()
        self.chunks: list[tuple[str, dict[str, Any]]] = []

    @staticmethod
    def _no_metrics() -> dict[str, list[Any]]:
        return {"step": [], "name": [], "kind": [], "count": [], "total": []}

    def step(self, *values: Any) -> None:
        self.steps.append(values)

    def metrics(
        self, step: int, counters: dict[str, int], growth: dict[str, tuple[int, float]]
    ) -> None:
        """One row per counter, then one per metric (as counters.metric_columns)."""
        rows = self.metric_rows
        count = len(counters) + len(growth)
        if not count:
            return
        rows["step"] += [step] * count
        rows["name"] += [*counters, *growth]
        rows["kind"] += ["counter"] * len(counters) + ["metric"] * len(growth)
        rows["count"] += [*counters.values(), *(n for n, _ in growth.values())]
        rows["total"] += [0.0] * len(counters) + [float(total) for _, total in growth.values()]

    def arrays(self, table: str, columns: dict[str, Any]) -> None:
        """A chunk of columns (numpy arrays, Coded, Repeat) after the rows gathered so far."""
        if len(next(iter(columns.values()))):
            self._cut()
            self.chunks.append((table, columns))

    def _cut(self) -> None:
        if self.steps:
            self.chunks.append(
                (
                    "steps",
                    dict(zip(STEP_COLUMNS, map(list, zip(*self.steps, strict=True)), strict=True)),
                )
            )
            self.steps = []
        if self.metric_rows["step"]:
            self.chunks.append(("metrics", self.metric_rows))
            self.metric_rows = self._no_metrics()

    def add_to(self, session: Any) -> None:
        from tpuscope.schema import table_columns  # the flush thread: pyarrow is loaded by now

        self._cut()
        for table, columns in self.chunks:
            session.add_columns(table, table_columns(table, **columns))
