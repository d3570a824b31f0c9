"""Step sets as runs of consecutive steps: how a finding says which steps it covers.

A fallback that runs in every step of a million-step program is in steps 2-999999:
one run, not a million numbers (listing them made `show --json` 86 MB and the findings
table 30% of the store). A finding keeps at most MAX_RUNS runs (the first MAX_RUNS - 1
and the last, so a storm that lasts to the end says so) and the count of all its steps,
so what it leaves out is known. Pure and vectorised with numpy (imported on first use:
the schema module that uses this is imported by every profiled process): a million steps
take milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

MAX_RUNS = 64
StepRuns = list[list[int]]  # [[first, last], ...], inclusive, ascending, disjoint


def _as_array(steps: Any) -> Any:
    """Non-negative distinct steps, sorted (negative ones are whole-run totals, not steps)."""
    import numpy as np

    if isinstance(steps, np.ndarray | Sequence) or hasattr(steps, "to_numpy"):
        values = np.asarray(steps.to_numpy() if hasattr(steps, "to_numpy") else steps)
    else:
        values = np.fromiter((int(v) for v in steps if v is not None), dtype=np.int64)
    if values.size and values.dtype.kind == "f":
        values = values[~np.isnan(values)]
    values = values.astype(np.int64, copy=False)
    values = values[values >= 0]
    if values.size > 1 and not bool(
        (values[1:] >= values[:-1]).all()
    ):  # tables are mostly in step order
        values = np.sort(values)
    # not np.unique: numpy 2's hash-based unique took 0.6 s on 2M steps here, this 20 ms
    return values[np.concatenate([[True], values[1:] != values[:-1]])] if values.size else values


def step_runs(steps: Any, cap: int = MAX_RUNS) -> tuple[StepRuns, int]:
    """([[first, last], ...], number of distinct steps) of any iterable or array of steps.

    [0, 1, 2, 5, 7, 8] -> ([[0, 2], [5, 5], [7, 8]], 6). More than `cap` runs keep the
    first cap - 1 and the last one."""
    import numpy as np

    values = _as_array(steps)
    if not values.size:
        return [], 0
    breaks = np.flatnonzero(np.diff(values) != 1)
    firsts = np.concatenate([values[:1], values[breaks + 1]])
    lasts = np.concatenate([values[breaks], values[-1:]])
    if len(firsts) > cap:
        keep = np.concatenate([np.arange(cap - 1), [len(firsts) - 1]])
        firsts, lasts = firsts[keep], lasts[keep]
    return [[int(a), int(b)] for a, b in zip(firsts, lasts, strict=True)], int(values.size)


def runs_count(runs: StepRuns) -> int:
    """Steps the runs themselves cover (fewer than the finding's count when runs were capped)."""
    return sum(last - first + 1 for first, last in runs)


def normalize_runs(value: Any) -> StepRuns:
    """Runs read back from Parquet/pandas/JSON (arrays of pairs) as plain lists of ints."""
    if value is None or isinstance(value, float):
        return []
    return [[int(pair[0]), int(pair[1])] for pair in value]


def runs_text(runs: StepRuns, count: int | None = None, limit: int = 6) -> str:
    """'0-2, 5, 7-8'; with more runs than `limit` (or capped runs): '0-2, 5, ... 90-99 (120 steps)'."""

    def one(pair: Iterable[int]) -> str:
        first, last = pair
        return str(first) if first == last else f"{first}-{last}"

    if not runs:
        return ""
    covered = runs_count(runs)
    count = covered if count is None else count
    if len(runs) <= limit and covered == count:
        return ", ".join(map(one, runs))
    head = ", ".join(one(r) for r in runs[: min(limit, len(runs)) - 1])
    return (
        f"{head}, ... {one(runs[-1])} ({count:,} steps)"
        if head
        else f"{one(runs[0])} ({count:,} steps)"
    )


def expand(runs: StepRuns) -> list[int]:
    """Every step the runs cover (for small runs: tests, short listings)."""
    return [s for first, last in runs for s in range(first, last + 1)]
