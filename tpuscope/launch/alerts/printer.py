"""Saying alerts, rate-limited: each problem once, the rest summed up (see the package doc)."""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from typing import IO

from tpuscope.launch.alerts.judge import Again, Problem

REPEAT_S = 10.0
MAX_REPEAT_S = 300.0
MAX_NEW = 5  # new-problem lines per REPEAT_S window


class AlertPrinter:
    """Prints problems once each and sums up the rest (see the module doc); `clock` is
    injectable for tests."""

    def __init__(
        self,
        out: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        repeat_s: float = REPEAT_S,
        max_repeat_s: float = MAX_REPEAT_S,
        max_new: int = MAX_NEW,
    ) -> None:
        self.out = out
        self.clock = clock
        self.interval = repeat_s
        self.max_interval = max_repeat_s
        self.repeat_s = repeat_s
        self.max_new = max_new
        self.lines = 0
        self._new_times: deque[float] = deque()
        self._labels: dict[str, str] = {}
        self._totals: dict[str, int] = {}
        self._pending: dict[str, Again] = {}
        self._folded: list[Problem] = []
        self._last_sum: float | None = None

    def say(self, text: str) -> None:
        out = self.out or sys.stderr
        out.write(f"tpuscope: {text}\n")
        out.flush()
        self.lines += 1

    def new(self, problem: Problem) -> None:
        now = self.clock()
        self._labels[problem.key] = problem.label
        self._totals[problem.key] = self._totals.get(problem.key, 0) + 1
        while self._new_times and now - self._new_times[0] >= self.repeat_s:
            self._new_times.popleft()
        if self._last_sum is None:
            self._last_sum = now
        if len(self._new_times) >= self.max_new:
            self._folded.append(problem)
            return
        self._new_times.append(now)
        self.say(problem.line)

    def again(self, item: Again) -> None:
        self._totals[item.key] = self._totals.get(item.key, 0) + item.count
        pending = self._pending.setdefault(item.key, Again(item.key, 0))
        pending.count += item.count
        pending.steps.extend(item.steps)

    def tick(self, final: bool = False) -> None:
        """Print the summing-up line if one is due (or, at the end, if anything is counted)."""
        if not (self._pending or self._folded):
            return
        now = self.clock()
        if not final and self._last_sum is not None and now - self._last_sum < self.interval:
            return
        since = now - (self._last_sum if self._last_sum is not None else now)
        parts = []
        for key, item in sorted(self._pending.items(), key=lambda kv: -kv[1].count)[:3]:
            low, high = (min(item.steps), max(item.steps)) if item.steps else (None, None)
            steps = (
                "" if low is None else f"step {low}; " if low == high else f"steps {low}-{high}; "
            )
            parts.append(
                f"{item.count} more recompile{'s' * (item.count != 1)} of {self._labels.get(key, key)} "
                f"({steps}{self._totals[key]} in all)"
            )
        hidden = len(self._pending) - 3
        if hidden > 0:
            parts.append(f"more at {hidden} other site{'s' * (hidden != 1)}")
        if self._folded:
            n = len(self._folded)
            parts.append(
                f"{n} more new problem{'s' * (n != 1)} ({', '.join(p.label for p in self._folded[:3])}"
                f"{', ...' if n > 3 else ''}; the report lists them)"
            )
        window = "" if final and since < 1 else f"in the last {since:.0f} s: "
        self.say(window + "; ".join(parts))
        self._pending, self._folded = {}, []
        self._last_sum = now
        self.interval = min(self.interval * 2, self.max_interval)
