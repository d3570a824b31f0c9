"""The report's rules over the rows read so far: which new rows are a new problem to say
(a recompile site, a CPU fallback op) and which are more of one already said."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pandas as pd

from tpuscope.analyze.frames import records
from tpuscope.analyze.judge import AFTER_LOOP

MAX_LINE = 240  # characters of what changed, at most


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


GRACE_STEPS = (
    3  # the site tracer traces the 2 steps after an op first appears (collect/fallback_sites)
)


class AlertJudge:
    """Takes the rows of new parts and returns the problems they show, as the report would."""

    def __init__(self) -> None:
        self.compiles = pd.DataFrame()
        self.retraces = pd.DataFrame()
        self._judged_rows: set[tuple[Any, Any, int]] = set()
        self._sites: set[str] = set()
        self._ops: dict[str, _Op] = {}
        self._last_step: dict[tuple[str, int], int] = {}
        self._loop_last: dict[
            str, int
        ] = {}  # 'host/pid' -> the loop's last step seen ("end" left out)
        self._unsynced: set[tuple[str, int]] = set()  # steps of a loop with no sync (PodSteps)
        self._procs: dict[tuple[str, int], dict[str, Any]] = {}
        self._deferred = False  # compile rows of a process whose backend its meta does not say yet

    def update(
        self, new: dict[str, pd.DataFrame], meta: dict[str, Any], ended: bool = False
    ) -> tuple[list[Problem], list[Again]]:
        """New problems and further recompiles in these rows. `meta` is the run's (with its
        processes); `ended`: the program is over, nothing more will come for a fallback's site."""
        self._procs = {
            (str(p.get("host")), int(p.get("pid") or 0)): p for p in meta.get("processes", [])
        }
        self._note_loop(new.get("steps"))
        for name in ("steps", "fallbacks", "compiles"):
            frame = new.get(name)
            if frame is not None and not frame.empty:
                for key, step in frame.groupby(["host", "pid"], dropna=False)["step"].max().items():
                    host, pid = cast(tuple[Any, Any], key)  # the two group columns
                    process = (str(host), int(pid))
                    self._last_step[process] = max(self._last_step.get(process, -1), int(step))
        self.retraces = _grown(self.retraces, new.get("retraces"))
        self.compiles = _grown(self.compiles, new.get("compiles"))
        problems: list[Problem] = []
        again: list[Again] = []
        if not self.compiles.empty and ("compiles" in new or self._deferred or ended):
            self._recompiles(meta, problems, again, ended)
        if "fallbacks" in new:
            self._add_fallbacks(new["fallbacks"])
        problems.extend(self._fallbacks(meta, ended))
        return problems, again

    # recompiles -----------------------------------------------------------------------------
    def _note_loop(self, steps: pd.DataFrame | None) -> None:
        """The loop's last step per process so far: a bounded set is seen by the steps after it."""
        if steps is None or steps.empty:
            return
        from tpuscope.analyze.pod_sql import PodSteps

        self._unsynced |= PodSteps.over_frame(steps, 0).unsynced_steps()
        loop = steps[steps["boundary"].astype(str) != AFTER_LOOP] if "boundary" in steps else steps
        for group, step in loop.groupby(["host", "pid"], dropna=False)["step"].max().items():
            host, pid = cast(tuple[Any, Any], group)  # the two group columns
            key = f"{host}/{pid}"
            self._loop_last[key] = max(self._loop_last.get(key, -1), int(step))

    def _tables(self, meta: dict[str, Any], compiles: pd.DataFrame) -> Any:
        from tpuscope.analyze.families import graph_families, process_backends
        from tpuscope.detect.tables import RunTables

        empty = pd.DataFrame()
        tables = RunTables(
            meta=meta,
            steps=empty,
            compiles=compiles,
            fallbacks=empty,
            metrics=empty,
            extra={"retraces": self.retraces},
        )
        # the report's families over the loop seen so far (its steps are not kept here)
        tables.__dict__["families"] = graph_families(
            compiles, process_backends(meta), self._loop_last, self._unsynced
        )
        return tables

    def _recompiles(
        self, meta: dict[str, Any], problems: list[Problem], again: list[Again], ended: bool = False
    ) -> None:
        """Say the report's recompiles. A family whose new graphs may still turn out a bounded set
        (buckets: the report's low note, never "recompile") waits until it is one (nothing to
        say), can no longer be one (a new graph beyond the set), or the program ended."""
        from tpuscope.analyze.families import may_be_bounded
        from tpuscope.detect.compile_changes import recompile_item, site_of

        mask = [
            self._backend_known(h, p)
            for h, p in zip(self.compiles["host"], self.compiles["pid"], strict=True)
        ]
        self._deferred = not all(mask)
        known = self.compiles[mask]
        if known.empty:
            return
        tables = self._tables(meta, known)
        families = tables.families
        new = pd.Series(
            [
                (h, p, int(i)) not in self._judged_rows
                for h, p, i in zip(
                    families["host"], families["pid"], families["index"], strict=True
                )
            ],
            index=families.index,
            dtype=bool,
        )
        for row in families[new & (families["verdict"] == "bounded")].to_dict("records"):
            self._judged_rows.add(
                (row["host"], row["pid"], int(row["index"]))
            )  # a note, not an alert
        fresh = families[new & families["recompile"].astype(bool)]
        if not ended and not fresh.empty:
            waiting = {
                f
                for f in fresh["family"].unique()
                if may_be_bounded(families[families["family"] == f])
            }
            self._deferred = self._deferred or bool(waiting)
            fresh = fresh[~fresh["family"].isin(waiting)]
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
            found = recompile_item(row, records(earlier), self.retraces, diff=True)
            problems.append(self._recompile_problem(site, row, found))
        again.extend(counted.values())

    def _backend_known(self, host: Any, pid: Any) -> bool:
        proc = self._procs.get((str(host), int(pid)))
        return bool(proc and proc.get("backend"))

    def _recompile_problem(self, site: str, row: dict[str, Any], item: dict[str, Any]) -> Problem:
        from tpuscope.detect.compile_changes import where_text

        location = (
            row.get("location")
            if isinstance(row.get("location"), str) and row.get("location")
            else None
        )
        function = row.get("function") if isinstance(row.get("function"), str) else None
        where = where_text(site, location, function)
        label = (
            f"{function} at {_short(location)}"
            if function and location
            else (function or f"the graph from {where}")
        )
        changes = "; ".join(item["changes"][:2])
        if len(changes) > MAX_LINE:
            changes = changes[: MAX_LINE - 3] + "..."
        line = f"{self._prefix(row)}recompile of {label} ({_seconds(item['duration_s'])})" + (
            f": {changes}" if changes else ""
        )
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
            line = (
                f"{self._prefix({'host': state.process[0], 'pid': state.process[1], 'step': state.first_step})}"
                f"new CPU fallback {state.op}{where} ({_calls(per_step)})"
            )
            out.append(Problem("cpu_fallback", state.op, line, state.op, location))
        return out

    def _compile_site(self, meta: dict[str, Any], state: _Op) -> str | None:
        """The line torch_xla's compile analyses name for the op's step (the report's rule for
        a fallback whose call site was never traced: a program with no step boundary)."""
        from tpuscope.detect import common

        if self.compiles.empty:
            return None
        return common.value_read_site(
            self._tables(meta, self.compiles), state.counts or [state.first_step]
        )

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
    return (
        more.reset_index(drop=True) if frame.empty else pd.concat([frame, more], ignore_index=True)
    )


def _before(family: pd.DataFrame, row: dict[str, Any]) -> pd.DataFrame:
    """The family's compiles before this one (families are in time order)."""
    same = (
        (family["host"] == row["host"])
        & (family["pid"] == row["pid"])
        & (family["index"] == row["index"])
    )
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
