"""Live alerts: one `tpuscope:` line on stderr per new problem, while the program runs.

    tpuscope: step 812: recompile of the graph from train.py:44 (3.1 s): arg 0: f32[8,128] -> f32[8,136]
    tpuscope: step 815: new CPU fallback aten::nonzero at model.py:88 (3 calls per step)

Where they are computed: in the process that reads the run, never in the program's.
`tpuscope run`'s launcher runs a watcher thread that reads the part files the program's
processes flush (every 2 s, collect/session.py) as they appear, each part once. The
program's step path pays nothing (no work, no lock, no GIL shared with the watcher:
another process), every process of the run (spawned workers, ranks) is seen by one
watcher, and the watcher judges exactly the rows the final analysis will read.
`tpuscope.profile(alerts=True)` runs the same watcher as a thread of the program itself
(it has no launcher): off the step path, but sharing the process.

The same rules as the final report (tpuscope/detect/run_analysis.py):
- a recompile is a further compile of a graph family (analyze/families.graph_families over
  every compile row read so far; a family's first compile is never one, wherever it
  happens); one alert per call site (detect/recompile.site_of, as the report has one card
  per site), saying what changed against the closest earlier compile of the family
  (detect/recompile.recompile_item) and its measured compile time;
- a CPU fallback is an `aten::*` op that is not a value read (analyze/judge.is_value_read),
  in any step; one alert per op, at the user's line the site tracer found (it traces the
  steps after an op first appears; the alert waits for that), else at the line torch_xla's
  compile analyses name (detect/common.value_read_site), with its calls per step since
  it first ran.
Compile rows of a process are judged once its own meta names its backend (written in the
same flush), so a row is never judged with less than the report will know.

Rate limits (AlertPrinter): a problem is said once. Further recompiles at a site already
said are counted, and one line sums them up, at most once per REPEAT_S seconds, an
interval that doubles after each such line up to MAX_REPEAT_S: a storm prints one line,
then a count after 10 s, 20 s, 40 s ... At most MAX_NEW new-problem lines per REPEAT_S;
the ones past that are counted in the next summing-up line. When the program has ended,
one last read takes the rows of its last seconds and a last summing-up line prints what
is still counted; the report follows.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pandas as pd

POLL_S = 1.0
REPEAT_S = 10.0
MAX_REPEAT_S = 300.0
MAX_NEW = 5  # new-problem lines per REPEAT_S window
MAX_LINE = 240  # characters of what changed, at most
# Columns read from each table's parts (never the metrics table: it is most of a run's rows).
COLUMNS = {
    "compiles": ["host", "pid", "step", "index", "time_ns", "duration_ns", "graph_hash", "cause",
                 "location", "frames", "num_inputs", "input_shapes", "output_shapes", "input_gb"],
    "fallbacks": ["host", "pid", "step", "op", "count", "location"],
    "steps": ["host", "pid", "step"],
    "retraces": None,  # JAX's explanations, every column (few rows)
}


# -- reading the parts as they appear --------------------------------------------------------

class PartTail:
    """The part files of some tables of a run, each read once, as they appear."""

    def __init__(self, run_dir: Path, columns: dict[str, list[str] | None] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.columns = COLUMNS if columns is None else columns
        self._seen: dict[str, set[str]] = {name: set() for name in self.columns}

    def poll(self) -> dict[str, pd.DataFrame]:
        """The rows of the parts written since the last poll, per table (absent: none new)."""
        from tpuscope.store.parts import read_part
        from tpuscope.store.run import table_to_frame

        out: dict[str, pd.DataFrame] = {}
        for name, columns in self.columns.items():
            folder = self.run_dir / name
            try:
                with os.scandir(folder) as scan:
                    names = sorted(e.name for e in scan
                                   if e.name.startswith("part-") and e.name.endswith(".parquet"))
            except OSError:
                continue
            seen = self._seen[name]
            frames = []
            for part in names:
                if part in seen:
                    continue
                seen.add(part)
                table = read_part(folder / part, columns=_present(folder / part, columns), warn=[])
                if table is not None and table.num_rows:
                    frames.append(table_to_frame(table))
            if frames:
                out[name] = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        return out


def _present(path: Path, columns: list[str] | None) -> list[str] | None:
    """The wanted columns this part has (a part from an older writer may lack one)."""
    if columns is None:
        return None
    import pyarrow.parquet as pq

    try:
        names = set(pq.read_schema(path).names)
    except Exception:  # damaged: read_part says so (quietly) and skips it
        return columns
    return [c for c in columns if c in names]


# -- judging: the report's rules over the rows so far ------------------------------------------

@dataclass
class Problem:
    """A new problem to say: a recompile site or a fallback op."""

    rule: str  # "recompile" or "cpu_fallback"
    key: str  # the site or the op: what the report has one card for
    line: str  # the alert, without the "tpuscope: " prefix
    label: str  # how a summing-up line names it ("the graph from train.py:44")
    location: str | None = None


@dataclass
class Again:
    """Further recompiles at a site already said."""

    key: str
    count: int
    steps: list[int] = field(default_factory=list)


@dataclass
class _Op:
    """A fallback op seen, maybe not said yet (waiting for the tracer's call site)."""

    op: str
    process: tuple[str, int]
    first_step: int
    location: str | None = None
    counts: dict[int, int] = field(default_factory=dict)  # step -> calls, in its first process
    said: bool = False


GRACE_STEPS = 3  # the site tracer traces the 2 steps after an op first appears (collect/fallback_sites)


class AlertJudge:
    """Takes the rows of new parts and returns the problems they show, as the report would."""

    def __init__(self) -> None:
        self.compiles = pd.DataFrame()
        self.retraces = pd.DataFrame()
        self._judged_rows: set[tuple[Any, Any, int]] = set()
        self._sites: set[str] = set()
        self._ops: dict[str, _Op] = {}
        self._last_step: dict[tuple[str, int], int] = {}
        self._procs: dict[tuple[str, int], dict[str, Any]] = {}
        self._deferred = False  # compile rows of a process whose backend its meta does not say yet

    def update(self, new: dict[str, pd.DataFrame], meta: dict[str, Any], ended: bool = False
               ) -> tuple[list[Problem], list[Again]]:
        """New problems and further recompiles in these rows. `meta` is the run's (with its
        processes); `ended`: the program is over, nothing more will come for a fallback's site."""
        self._procs = {(str(p.get("host")), int(p.get("pid") or 0)): p for p in meta.get("processes", [])}
        for name in ("steps", "fallbacks", "compiles"):
            frame = new.get(name)
            if frame is not None and not frame.empty:
                for key, step in frame.groupby(["host", "pid"], dropna=False)["step"].max().items():
                    process = (str(key[0]), int(key[1]))
                    self._last_step[process] = max(self._last_step.get(process, -1), int(step))
        self.retraces = _grown(self.retraces, new.get("retraces"))
        self.compiles = _grown(self.compiles, new.get("compiles"))
        problems: list[Problem] = []
        again: list[Again] = []
        if not self.compiles.empty and ("compiles" in new or self._deferred):
            self._recompiles(meta, problems, again)
        if "fallbacks" in new:
            self._add_fallbacks(new["fallbacks"])
        problems.extend(self._fallbacks(meta, ended))
        return problems, again

    # recompiles -----------------------------------------------------------------------------
    def _tables(self, meta: dict[str, Any], compiles: pd.DataFrame) -> Any:
        from tpuscope.detect.registry import RunTables

        empty = pd.DataFrame()
        return RunTables(meta=meta, steps=empty, compiles=compiles, fallbacks=empty, metrics=empty,
                         extra={"retraces": self.retraces})

    def _recompiles(self, meta: dict[str, Any], problems: list[Problem], again: list[Again]) -> None:
        from tpuscope.detect.recompile import recompile_item, site_of

        mask = [self._backend_known(h, p) for h, p in zip(self.compiles["host"], self.compiles["pid"], strict=True)]
        self._deferred = not all(mask)
        known = self.compiles[mask]
        if known.empty:
            return
        tables = self._tables(meta, known)
        families = tables.families
        fresh = families[families["recompile"].astype(bool)]
        fresh = fresh[[(h, p, int(i)) not in self._judged_rows
                       for h, p, i in zip(fresh["host"], fresh["pid"], fresh["index"], strict=True)]]
        if fresh.empty:
            return
        counted: dict[str, Again] = {}
        for row in fresh.to_dict("records"):
            self._judged_rows.add((row["host"], row["pid"], int(row["index"])))
            site = site_of(row | {"backend": tables.backend})
            if site in self._sites:
                item = counted.setdefault(site, Again(site, 0))
                item.count += 1
                if int(row["step"]) >= 0:
                    item.steps.append(int(row["step"]))
                continue
            self._sites.add(site)
            earlier = _before(families[families["family"] == row["family"]], row)
            item = recompile_item(row, earlier.to_dict("records"), self.retraces, diff=True)
            problems.append(self._recompile_problem(site, row, item))
        again.extend(counted.values())

    def _backend_known(self, host: Any, pid: Any) -> bool:
        proc = self._procs.get((str(host), int(pid)))
        return bool(proc and proc.get("backend"))

    def _recompile_problem(self, site: str, row: dict[str, Any], item: dict[str, Any]) -> Problem:
        from tpuscope.detect.recompile import where_text

        location = row.get("location") if isinstance(row.get("location"), str) and row.get("location") else None
        function = row.get("function") if isinstance(row.get("function"), str) else None
        where = where_text(site, location, function)
        label = f"{function} at {_short(location)}" if function and location else (
            function or f"the graph from {where}")
        changes = "; ".join(item["changes"][:2])
        if len(changes) > MAX_LINE:
            changes = changes[: MAX_LINE - 3] + "..."
        line = (f"{self._prefix(row)}recompile of {label} ({_seconds(item['duration_s'])})"
                + (f": {changes}" if changes else ""))
        return Problem("recompile", site, line, label, location)

    # fallbacks ------------------------------------------------------------------------------
    def _add_fallbacks(self, rows: pd.DataFrame) -> None:
        from tpuscope.analyze.judge import is_value_read

        for row in rows.to_dict("records"):
            op = row.get("op")
            if not isinstance(op, str) or is_value_read(op) or int(row.get("step", -1)) < 0:
                continue
            process = (str(row["host"]), int(row["pid"]))
            state = self._ops.get(op)
            if state is None:
                state = self._ops[op] = _Op(op, process, int(row["step"]))
            if process == state.process:
                step = int(row["step"])
                state.first_step = min(state.first_step, step)
                state.counts[step] = state.counts.get(step, 0) + int(row.get("count") or 0)
            where = row.get("location")
            if state.location is None and isinstance(where, str) and where:
                state.location = where

    def _fallbacks(self, meta: dict[str, Any], ended: bool) -> list[Problem]:
        out = []
        for state in self._ops.values():
            if state.said:
                continue
            last = self._last_step.get(state.process, state.first_step)
            if state.location is None and not ended and last < state.first_step + GRACE_STEPS:
                continue  # the tracer is still looking for its call site
            state.said = True
            location = state.location or self._compile_site(meta, state)
            steps = max(last - state.first_step + 1, 1)
            per_step = sum(state.counts.values()) / steps
            where = f" at {_short(location)}" if location else ""
            line = (f"{self._prefix({'host': state.process[0], 'pid': state.process[1], 'step': state.first_step})}"
                    f"new CPU fallback {state.op}{where} ({_calls(per_step)})")
            out.append(Problem("cpu_fallback", state.op, line, state.op, location))
        return out

    def _compile_site(self, meta: dict[str, Any], state: _Op) -> str | None:
        """The line torch_xla's compile analyses name for the op's step (the report's rule for
        a fallback whose call site was never traced: a program with no step boundary)."""
        from tpuscope.detect import common

        if self.compiles.empty:
            return None
        return common.value_read_site(self._tables(meta, self.compiles), state.counts or [state.first_step])

    # words ----------------------------------------------------------------------------------
    def _prefix(self, row: dict[str, Any]) -> str:
        step = row.get("step")
        parts = []
        if len([p for p in self._procs.values() if p.get("backend")]) > 1:
            proc = self._procs.get((str(row.get("host")), int(row.get("pid") or 0)), {})
            parts.append(f"rank {proc.get('rank', '?')}")
        if step is not None and int(step) >= 0:
            parts.append(f"step {int(step)}")
        return ", ".join(parts) + ": " if parts else ""


def _grown(frame: pd.DataFrame, more: pd.DataFrame | None) -> pd.DataFrame:
    if more is None or more.empty:
        return frame
    return more.reset_index(drop=True) if frame.empty else pd.concat([frame, more], ignore_index=True)


def _before(family: pd.DataFrame, row: dict[str, Any]) -> pd.DataFrame:
    """The family's compiles before this one (families are in time order)."""
    same = (family["host"] == row["host"]) & (family["pid"] == row["pid"]) & (family["index"] == row["index"])
    position = int(same.to_numpy().argmax())
    return family.iloc[:position]


def _short(location: str | None) -> str:
    from tpuscope.detect.common import file_and_line

    return file_and_line(location)


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds >= 0.1 else f"{seconds * 1e3:.0f} ms"


def _calls(per_step: float) -> str:
    value = round(per_step, 1)
    text = f"{value:g}"
    return f"{text} call{'s' if value != 1 else ''} per step"


# -- saying it, rate-limited ------------------------------------------------------------------

class AlertPrinter:
    """Prints problems once each and sums up the rest (see the module doc); `clock` is
    injectable for tests."""

    def __init__(self, out: IO[str] | None = None, clock: Callable[[], float] = time.monotonic,
                 repeat_s: float = REPEAT_S, max_repeat_s: float = MAX_REPEAT_S, max_new: int = MAX_NEW) -> None:
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
            steps = "" if low is None else f"step {low}; " if low == high else f"steps {low}-{high}; "
            parts.append(f"{item.count} more recompile{'s' * (item.count != 1)} of {self._labels.get(key, key)} "
                         f"({steps}{self._totals[key]} in all)")
        hidden = len(self._pending) - 3
        if hidden > 0:
            parts.append(f"more at {hidden} other site{'s' * (hidden != 1)}")
        if self._folded:
            n = len(self._folded)
            parts.append(f"{n} more new problem{'s' * (n != 1)} ({', '.join(p.label for p in self._folded[:3])}"
                         f"{', ...' if n > 3 else ''}; the report lists them)")
        window = "" if final and since < 1 else f"in the last {since:.0f} s: "
        self.say(window + "; ".join(parts))
        self._pending, self._folded = {}, []
        self._last_sum = now
        self.interval = min(self.interval * 2, self.max_interval)


# -- the watcher ------------------------------------------------------------------------------

class AlertWatcher:
    """Reads a run's new parts every POLL_S seconds on a thread of its own and prints alerts.
    Start it after the program's process exists (`tpuscope run` starts it once the child
    runs, so the thread inherits the launcher's blocked signals); `stop()` makes the last read."""

    def __init__(self, run_dir: str | Path, out: IO[str] | None = None, poll_s: float = POLL_S,
                 printer: AlertPrinter | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.poll_s = poll_s
        self.tail = PartTail(self.run_dir)
        self.judge = AlertJudge()
        self.printer = printer or AlertPrinter(out)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._broken = False
        self._lock = threading.Lock()
        self.polls = 0
        self.cpu_ns = 0  # the watcher's own CPU time (kept in the run's meta as alerts_cost)

    def start(self) -> AlertWatcher:
        self._thread = threading.Thread(target=self._loop, name="tpuscope-alerts", daemon=True)
        self._thread.start()
        return self

    def stop(self, final: bool = True) -> None:
        """Stop polling; with `final`, read what the program's last flush wrote and sum up."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if final:
            self.poll(ended=True)
            if not self._broken:
                self.printer.tick(final=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def poll(self, ended: bool = False) -> None:
        """One read of the new parts; alerts and due summing-up lines printed."""
        if self._broken:
            return
        with self._lock:
            start = time.thread_time_ns()
            try:
                self._poll(ended)
            finally:
                self.cpu_ns += time.thread_time_ns() - start
                self.polls += 1

    def _poll(self, ended: bool) -> None:
        try:
            new = self.tail.poll()
            if not new and not ended:
                self.printer.tick()
                return
            from tpuscope.store.runstore import read_meta

            meta = read_meta(self.run_dir)
            problems, again = self.judge.update(new, meta, ended=ended)
            for problem in problems:
                self.printer.new(problem)
            for item in again:
                self.printer.again(item)
            if not ended:
                self.printer.tick()
        except Exception as exc:  # never a false alert, never a crash: stop and say so once
            self._broken = True
            self.printer.say(f"live alerts stopped ({type(exc).__name__}: {exc}); "
                             "the report at the end is not affected")

    @property
    def cost(self) -> dict[str, float]:
        return {"polls": self.polls, "cpu_s": round(self.cpu_ns / 1e9, 3), "lines": self.printer.lines}
