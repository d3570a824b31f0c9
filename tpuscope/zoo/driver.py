"""The sweep driver: the catalog's cells, sharded, resumed, run N at a time, with a progress bar.

Each cell is its own process (cell.run_cell); the driver only waits on them, so -j N threads
here are N cell processes at once. `shard=(k, n)` keeps every n-th model type starting at the
k-th (1-based), with all its cells: n machines with the same arguments split one sweep into one
store. A cell whose record
exists is finished and skipped (resume), unless its status is in `retry`; so is a cell that an
earlier store ran (`earlier`: its cells.csv rows, a store not kept), whose row joins the table
instead (table.merged_rows). A default cell that
failed in transformers' experts kernel is followed by its workaround cell (cell.workaround:
`<scenario>+batched_mm`), resumed the same way.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpuscope.zoo import catalog
from tpuscope.zoo.cell import record_path, run_cell, variant, workaround

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

DEFAULT_SCENARIOS = ("train", "generate")


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """'2/4' -> (2, 4); None stays None; anything else raises ValueError."""
    if not text:
        return None
    k, _, n = text.partition("/")
    shard = (int(k), int(n))
    if not 1 <= shard[0] <= shard[1]:
        raise ValueError(f"--shard {text}: K/N with 1 <= K <= N")
    return shard


def plan(
    scenarios: Iterable[str] = DEFAULT_SCENARIOS,
    tasks: Iterable[str] | None = None,
    only: Iterable[str] = (),
    exclude: Iterable[str] = (),
    shard: tuple[int, int] | None = None,
) -> list[tuple[catalog.Entry, str]]:
    """The cells a sweep with these arguments covers (finished or not), in run order."""
    cells = catalog.cells(catalog.select(catalog.entries(tasks), only, exclude), scenarios)
    if shard:  # by model type: a type's cells stay together on one machine
        k, n = shard
        types = list(dict.fromkeys(entry.model_type for entry, _ in cells))
        mine = set(types[k - 1 :: n])
        cells = [(entry, scenario) for entry, scenario in cells if entry.model_type in mine]
    return cells


def load_record(store: Path, model_type: str, scenario: str) -> dict[str, Any] | None:
    try:
        return json.loads(record_path(store, model_type, scenario).read_text())
    except (OSError, ValueError):
        return None


def run_sweep(
    store: str | Path,
    scenarios: Iterable[str] = DEFAULT_SCENARIOS,
    tasks: Iterable[str] | None = None,
    only: Iterable[str] = (),
    exclude: Iterable[str] = (),
    jobs: int = 1,
    shard: tuple[int, int] | str | None = None,
    timeout: float = 900,
    retry: Iterable[str] = (),
    progress: bool | None = None,
    target: str = "v5e",
    on_cell: Callable[[dict[str, Any]], None] | None = None,
    earlier: Iterable[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Run every unfinished cell of the plan; returns the records of all its cells (old and new),
    not the earlier store's rows (the table joins those)."""
    store = Path(store)
    shard = parse_shard(shard) if isinstance(shard, str) else shard
    retry = set(retry)
    ran_before = {(r["model_type"], r["scenario"]) for r in earlier if r["status"] not in retry}
    cells = plan(scenarios, tasks, only, exclude, shard)
    records: dict[tuple[str, str], dict[str, Any]] = {}
    todo: list[tuple[catalog.Entry, str, bool]] = []  # (entry, scenario, default cell to run too)
    for entry, scenario in cells:
        old = load_record(store, entry.model_type, scenario)
        if old is None and (entry.model_type, scenario) in ran_before:
            continue  # finished in the earlier store (its workaround cell too, when it needed one)
        if old is not None and old.get("status") not in retry:
            records[(entry.model_type, scenario)] = old
            experts = workaround(old)
            if experts:
                other = load_record(store, entry.model_type, variant(scenario, experts))
                if other is not None and other.get("status") not in retry:
                    records[(entry.model_type, variant(scenario, experts))] = other
                else:
                    todo.append((entry, scenario, False))
        else:
            todo.append((entry, scenario, True))
    show = sys.stderr.isatty() if progress is None else progress

    def run(entry: catalog.Entry, scenario: str, default: bool) -> list[dict[str, Any]]:
        first = (
            run_cell(entry, scenario, store, timeout, target)
            if default
            else records[(entry.model_type, scenario)]
        )
        experts = workaround(first)
        second = [run_cell(entry, scenario, store, timeout, target, experts)] if experts else []
        return ([first] if default else []) + second

    with _Progress(len(todo), show) as bar, ThreadPoolExecutor(max(1, jobs)) as pool:
        futures = {pool.submit(run, *job): job for job in todo}
        for future in as_completed(futures):
            done = future.result()
            for record in done:
                records[(record["model_type"], record["scenario"])] = record
                if on_cell:
                    on_cell(record)
            bar.advance(
                ", ".join(f"{r['model_type']}/{r['scenario']}: {r['status']}" for r in done)
            )
    order = [(e.model_type, s) for e, s in cells]
    order += [key for key in records if key not in set(order)]
    return [records[key] for key in sorted(order, key=_order(order)) if key in records]


def _order(cells: list[tuple[str, str]]) -> Callable[[tuple[str, str]], tuple[int, str]]:
    """Plan order, each workaround cell right after its default cell."""
    rank = {key: i for i, key in enumerate(cells)}
    return lambda key: (rank.get((key[0], key[1].split("+")[0]), len(rank)), key[1])


class _Progress:
    """A rich progress bar with ETA on a terminal; nothing otherwise."""

    def __init__(self, total: int, show: bool) -> None:
        self.total, self.show = total, show and total > 0
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> _Progress:
        if self.show:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("zoo"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.description}"),
                transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task("", total=self.total)
        return self

    def advance(self, text: str) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, advance=1, description=text)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
