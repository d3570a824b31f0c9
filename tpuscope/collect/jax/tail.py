"""Where a JAX loop's last step ends: at the first thing its steps never did.

A step runs from one call of the step function to the next, so the last call's step has no
next call to end it: everything the program does after its loop (an evaluation, a final
prediction) would be that step's. On a v5e, Equinox's ViT example ran its test loop, 156
batches of its model outside jit, in the step after its 1,000th call: a 52 s "step" whose
64,584 eager ops made the loop's 73 a step read as 138 (docs/tpu.md).

The mark: in a loop of a jitted step function that has run a few steps, the open step's first
compile of anything but the step function (an op outside jit, another jitted function) is
where its work may leave the loop. From there the step's counts go to a second accumulator
and its compile rows are held. The next call of the step function unmarks it (the compile was
the loop's, counts merged, rows written as they were); the run's end splits it: the step
ends at the mark and the rest becomes the after-the-loop step (boundary AFTER_LOOP), its
events, compile rows and host callbacks' runs numbered as that step.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpuscope.collect.jax.rows import EventLog, OpenStep

LOOP_STEPS = 3  # calls of the step function before a compile may mark the loop's end
_COUNTS = ("compiles", "compile_ns", "jit_calls", "events", "eager_count", "eager_ns", "reads")


@dataclass
class TailMark:
    """The open step's first compile of another function, and its counts up to it."""

    step: int
    t_ns: int  # when the compile's tracing began (wall clock ns)
    before: OpenStep  # the step's own accumulator (the step clock's), its counts up to the mark
    events_before: int  # the step's EventLog entries made before the mark
    hook_ns: int = 0  # tpuscope's hook time on the program's path before the mark
    rows: list[tuple[str, Sequence[Mapping[str, Any]]]] = field(default_factory=list)  # held rows

    @classmethod
    def at(cls, step: int, t_ns: int, before: OpenStep, events: EventLog, hook_ns: int) -> TailMark:
        count = len(events.steps) - bisect_left(events.steps, step)
        return cls(step, t_ns, before, count, hook_ns)

    def hold(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Compile and retrace rows made after the mark: their step is known at unmark or split."""
        self.rows.append((table, rows))

    def resume(self, after: OpenStep, session: Any) -> OpenStep:
        """The loop went on (its step function was called again): the step's accumulator with
        the counts made since the mark, the held rows written with the step's number."""
        merge_counts(self.before, after)
        for table, rows in self.rows:
            session.add_many(table, rows)
        return self.before

    def renumber(
        self, events: EventLog, step: int
    ) -> list[tuple[str, Sequence[Mapping[str, Any]]]]:
        """The events and held rows made after the mark become `step`'s (the after-the-loop
        step); the rows are returned for writing."""
        first = bisect_left(events.steps, self.step) + self.events_before
        for index in range(first, len(events.steps)):
            events.steps[index] = step
        return [
            (table, [{**row, "step": step} if row.get("step", -1) >= 0 else row for row in rows])
            for table, rows in self.rows
        ]


def merge_counts(into: OpenStep, more: OpenStep) -> None:
    """`more`'s counts added to `into` (an unmarked step's two accumulators made one again)."""
    for name in _COUNTS:
        setattr(into, name, getattr(into, name) + getattr(more, name))
    if more.metrics:
        into.metrics = into.metrics or {}
        for name, (count, total) in more.metrics.items():
            entry = into.metrics.setdefault(name, [0, 0.0])
            entry[0] += count
            entry[1] += total


def copy_counts(into: OpenStep, source: OpenStep) -> None:
    """`source`'s counts as `into`'s (the after-the-loop step takes what followed the mark)."""
    for name in _COUNTS:
        setattr(into, name, getattr(source, name))
    into.metrics = source.metrics


@dataclass
class HeldRuns:
    """Host callbacks' runs (callbacks.py: (step, start ns, ...)) of a marked step, which the
    flush thread would write before the mark is resolved: held until it is, then written,
    those of a split step from its mark on as the after-the-loop step's."""

    runs: list[tuple[int, ...]] = field(default_factory=list)
    split: tuple[int, int, int] | None = None  # (the marked step, the mark's ns, the after step)

    def place(self, runs: list[Any], marked_step: int | None) -> list[Any]:
        """Of these runs, the ones to write now (`marked_step`: the open step's, if marked)."""
        if marked_step is not None:
            self.runs += [r for r in runs if r[0] >= marked_step]
            return [r for r in runs if r[0] < marked_step]
        runs, self.runs = self.runs + runs, []
        if self.split is None:
            return runs
        step, mark_ns, after = self.split
        return [(after, *r[1:]) if r[0] == step and r[1] >= mark_ns else r for r in runs]
