"""Watch a block of code for recompiles and CPU fallbacks: the engine of the pytest plugin.

A Watch is a short in-process profile — a run in the store, collected by the same
Session and backend collectors as `tpuscope run` and `tpuscope.profile()` — plus the
judgement a test needs: which graphs compiled again (recompiles) and which ops fell back
to the host, with messages that name the step, the cause, the user's line and what
changed. It judges by the report's verdicts (tpuscope.analyze.families: torch_xla, the
user's line and the graph's structure; JAX, the jitted function): a recompile is what the
report calls one, so a bounded set of bucket graphs fails no watch. Value reads
(`.item()`) are host syncs, not fallbacks. The API and messages are the same for both.

    with Watch(name="decode", warmup_compiles=1) as w:
        for _ in range(5):
            model.decode_step(batch)
            torch_xla.sync()
    w.assert_no_recompiles()
    w.assert_no_fallbacks(allow=["aten::_local_scalar_dense"])
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpuscope.analyze.contract import FallbackEvidence, RecompileEvidence
from tpuscope.analyze.gate import fallback_name, op_allowed
from tpuscope.analyze.judge import is_value_read
from tpuscope.collect import autostart
from tpuscope.detect import jax_advice
from tpuscope.detect.tables import RunTables
from tpuscope.launch import env as process_env
from tpuscope.launch.lifecycle import Ending, collect_here, finish_run, stop_here
from tpuscope.schema import Finding
from tpuscope.schema_consts import DEFAULT_WARMUP
from tpuscope.store import Run
from tpuscope.watch import jax_rules as watch_jax
from tpuscope.watch.text import describe_fallbacks, describe_recompiles, plural

__all__ = ["Fallback", "Limits", "Recompile", "Watch", "WatchError", "watch"]


class WatchError(RuntimeError):
    """A watch used the wrong way (nested, read while running); the message says how."""


class LimitExceeded(AssertionError):
    """More recompiles or fallbacks than allowed; the message is the diagnosis."""


@dataclass(frozen=True)
class Limits:
    """What a watched block may do. None means "not checked"."""

    max_recompiles: int | None = 0
    max_fallbacks: int | None = 0
    allow_fallbacks: tuple[str, ...] = ()

    def allows(self, op: str) -> bool:
        """allow entries are op names or globs, with or without the `aten::` prefix."""
        return op_allowed(op, self.allow_fallbacks)


@dataclass(frozen=True)
class Recompile:
    """One recompile (a further compile of a graph family), with what the collector and
    detectors know of it.

    JAX compiles also name the jitted function, where it is defined and which of its
    compiles this is (2 = its first recompile), with a fix for what JAX said differed."""

    step: int
    graph_hash: str | None
    cause: str | None
    location: str | None
    changes: tuple[str, ...] = ()
    finding: Finding | None = None
    function: str | None = None
    defined_at: str | None = None
    number: int | None = None
    fix: str | None = None


@dataclass(frozen=True)
class Fallback:
    """One op that ran on the host inside the watch (aten, torchvision or a custom op)."""

    op: str
    count: int
    step_runs: list[list[int]]  # runs of consecutive steps (tpuscope.step_runs)
    location: str | None
    finding: Finding | None = None
    step_count: int = 0


class Watch:
    """Collects one block into a run and answers: recompiled? fell back to the CPU?

    Without a store the run lives in a temporary folder removed at exit (its tables
    stay in memory on `w.run`); with one it stays there for `tpuscope show` and the
    dashboard. With warm-up, entering clears JAX's in-memory caches when JAX is
    imported, so each watch judges its own calls alone (tpuscope.watch.jax_rules).
    """

    def __init__(
        self,
        name: str = "watch",
        warmup_compiles: int = 1,
        store: str | Path | None = None,
        meta: dict[str, Any] | None = None,
        *,
        warmup_steps: int | None = None,
    ) -> None:
        warmup_compiles = compiles_allowed(warmup_compiles, warmup_steps)
        self.name = name
        self.warmup_compiles = warmup_compiles
        self.store = (
            store if store is None or "://" in str(store) else Path(store)
        )  # a folder or a URL
        self.meta = dict(meta or {})
        self.run: Run | None = None
        self.run_dir: Path | None = None
        self.saved_at: Any = None  # where the run is kept once the watch ended
        self.status = "not started"
        self._temp: Path | None = None

    @property
    def warmup_steps(self) -> int:
        """warmup_compiles, by its older name (it never counted steps)."""
        return self.warmup_compiles

    # -- life cycle -------------------------------------------------------------
    def __enter__(self) -> Watch:
        if autostart.active_session() is not None:
            raise WatchError(
                "tpuscope: this process is already being profiled (tpuscope run, "
                "tpuscope.profile() or another watch); watches do not nest"
            )
        settings = process_env.prepare()
        settings.clear_dump()
        cleared = (
            {"jax_caches_cleared": True} if watch_jax.clear_caches(self.warmup_compiles) else {}
        )
        root = self.store
        if root is None:
            root = self._temp = Path(tempfile.mkdtemp(prefix="tpuscope-watch-"))
        meta = {"command": f"watch {self.name}", **cleared, **self.meta}  # the caller's meta wins
        # the run's step warm-up is every run's; warmup_compiles is the watch's own judgement
        self.run_dir = collect_here(root, self.name, DEFAULT_WARMUP, settings, **meta)
        self.status = "running"
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.status = "finished" if exc_type is None else "exception"
        error = None if exc is None else f"{exc_type.__name__}: {exc}"
        assert self.run_dir is not None
        stopped: BaseException | None = None
        try:
            stop_here(self.run_dir, self.status, error, process_env.prepare())
        except Exception as failure:
            stopped = failure
        # a watch's run is read at once, here, and its parts are few: not merged
        ending = finish_run(self.run_dir, analysis=stopped is None, compact=False, show=self._keep)
        self.saved_at = ending.where  # an object store: the run is shipped now (tables read)
        if self._temp is not None:
            shutil.rmtree(self._temp, ignore_errors=True)
        problem = stopped or ending.error
        if problem is None:
            return
        if not isinstance(problem, Exception):
            raise problem  # Ctrl-C
        if exc_type is None:
            raise WatchError(
                f"tpuscope: could not read watch {self.name!r}: {problem}"
            ) from problem
        # the block's own exception matters more than tpuscope's: let it through
        warnings.warn(f"tpuscope: could not read watch {self.name!r}: {problem}", stacklevel=2)

    def _keep(self, ending: Ending) -> None:
        """Keep the analysis and its tables in memory: a temporary folder goes away at exit."""
        if ending.run is None or ending.report is None:
            return  # not analysed: the watch could not be stopped (said by __exit__)
        self._findings = ending.report.findings
        for table in (
            "meta",
            "steps",
            "compiles",
            "fallbacks",
            "metrics",
            "findings",
            "retraces",
            "call_sites",
        ):
            getattr(ending.run, table)
        self.run = ending.run

    @property
    def running(self) -> bool:
        return self.status == "running"

    def _tables(self) -> Run:
        if self.run is None:
            state = "still running" if self.running else "not started"
            raise WatchError(
                f"tpuscope: watch {self.name!r} is {state}; read it after the with block"
            )
        return self.run

    # -- what happened ----------------------------------------------------------
    @property
    def steps(self) -> int:
        """Step boundaries seen (sync, mark_step, ...; work after the last one counts as one).
        JAX: StepTraceAnnotation blocks or calls of a function jitted inside the block;
        calls of functions jitted before it are invisible (docs/pytest.md)."""
        return len(self._tables().steps)

    @property
    def compiles(self) -> int:
        return len(self._tables().compiles)

    @property
    def compiles_after_warmup(self) -> int:
        """len(recompiles), by its older name."""
        return len(self.recompiles)

    @property
    def findings(self) -> list[Finding]:
        self._tables()
        return list(self._findings)

    @property
    def recompiles(self) -> list[Recompile]:
        """The compiles the report calls recompiles (analyze/families.py's `verdict` column, the
        same families and loop the analysis judges), oldest first: a bounded set of graphs
        (buckets, each compiled once, then run from the cache) and a first pass's distinct graphs
        are not recompiles. `warmup_compiles` >= 1 also lets each family compile that many times
        (1 is the report's rule exactly, 2 lets each family compile twice); 0 judges every compile."""
        run = self._tables()
        families = _families(run)
        if families.empty:
            return []
        judged = families[~families["eager"].astype(bool)]
        if self.warmup_compiles > 0:
            judged = judged[
                (judged["verdict"] == "recompile") & (judged["family_seq"] >= self.warmup_compiles)
            ]
        rules = [f for f in self._findings if f.rule == "recompile"]
        return [self._recompile(row, run, rules) for row in judged.to_dict("records")]

    @property
    def fallbacks(self) -> dict[str, int]:
        """{op: times it ran on the host} in judged steps (warm-up included), every namespace."""
        return {f.op: f.count for f in self.fallback_ops}

    @property
    def fallback_ops(self) -> list[Fallback]:
        frame = self._tables().fallbacks
        frame = frame[~frame["op"].map(is_value_read)] if not frame.empty else frame
        if frame.empty:
            return []
        rules = [f for f in self._findings if f.rule == "cpu_fallback"]
        out = []
        for op, rows in frame.groupby("op", sort=False):
            finding = next((f for f in rules if _finding_op(f) == op), None)
            locations = [loc for loc in rows["location"].dropna() if loc]
            location = locations[0] if locations else (finding.location if finding else None)
            runs, n_steps = Finding.of_steps(rows["step"])
            out.append(
                Fallback(
                    op=str(op),
                    count=int(rows["count"].sum()),
                    step_runs=runs,
                    location=location,
                    finding=finding,
                    step_count=n_steps,
                )
            )
        return sorted(out, key=lambda f: -f.count)

    def _recompile(self, row: dict[str, Any], run: Run, rules: list[Finding]) -> Recompile:
        step, graph, index = int(row["step"]), row.get("graph_hash") or None, int(row["index"])
        finding = next(
            (
                f
                for f in rules
                if any(c.index == index for c in RecompileEvidence.of(f).graphs_recompiled)
            ),
            None,
        )
        function = row.get("function") or None
        diffs = jax_advice.diffs_of(run.retraces, index, function) if function else []
        changes = jax_advice.changes_of(diffs) or _finding_changes(finding, index)
        fix = jax_advice.fix_for(function, diffs, list(changes)) if function else None
        defined_at = next((d["defined_at"] for d in diffs if d.get("defined_at")), None)
        return Recompile(
            step=step,
            graph_hash=graph,
            cause=row.get("cause") or None,
            location=row.get("location") or None,
            changes=tuple(changes),
            finding=finding,
            function=function,
            defined_at=defined_at,
            number=int(row["family_seq"]) + 1 if function else None,
            fix=fix,
        )

    # -- judgement --------------------------------------------------------------
    def problems(self, limits: Limits) -> list[str]:
        """Message blocks for every limit exceeded (empty when within limits)."""
        out = []
        recompiles = self.recompiles
        if limits.max_recompiles is not None and len(recompiles) > limits.max_recompiles:
            settings = process_env.current()
            note = settings.note if settings is not None else None
            out.append(
                describe_recompiles(recompiles, limits.max_recompiles, self.warmup_steps, note)
            )
        denied = self._denied(limits)
        if limits.max_fallbacks is not None and sum(f.count for f in denied) > limits.max_fallbacks:
            out.append(describe_fallbacks(denied, limits.max_fallbacks, limits.allow_fallbacks))
        return out

    def over_limit(self, limits: Limits) -> list[str]:
        """Short verdicts for a summary line: ["4 recompiles > 0", ...]."""
        out = []
        recompiles = len(self.recompiles)
        if limits.max_recompiles is not None and recompiles > limits.max_recompiles:
            out.append(f"{plural(recompiles, 'recompile')} > {limits.max_recompiles}")
        calls = sum(f.count for f in self._denied(limits))
        if limits.max_fallbacks is not None and calls > limits.max_fallbacks:
            out.append(f"{plural(calls, 'fallback')} > {limits.max_fallbacks}")
        return out

    def _denied(self, limits: Limits) -> list[Fallback]:
        return [f for f in self.fallback_ops if not limits.allows(f.op)]

    def assert_within(
        self,
        max_recompiles: int | None = 0,
        max_fallbacks: int | None = 0,
        allow_fallbacks: list[str] | tuple[str, ...] = (),
    ) -> None:
        """Raise LimitExceeded (an AssertionError) naming every limit exceeded."""
        __tracebackhide__ = True
        problems = self.problems(Limits(max_recompiles, max_fallbacks, tuple(allow_fallbacks)))
        if problems:
            raise LimitExceeded("\n".join(problems))

    def assert_no_recompiles(self) -> None:
        """No graph family compiled beyond its first `warmup_compiles` compiles."""
        __tracebackhide__ = True
        self.assert_within(max_recompiles=0, max_fallbacks=None)

    def assert_no_fallbacks(self, allow: list[str] | tuple[str, ...] = ()) -> None:
        """No op ran on the host (any namespace), except those in allow (names or globs)."""
        __tracebackhide__ = True
        self.assert_within(max_recompiles=None, max_fallbacks=0, allow_fallbacks=allow)

    def summary(self, limits: Limits | None = None) -> dict[str, Any]:
        """Plain JSON-able figures (they travel in pytest reports, also across xdist workers)."""
        return {
            "name": self.name,
            "status": self.status,
            "warmup_compiles": self.warmup_compiles,
            "steps": self.steps,
            "compiles": self.compiles,
            "recompiles": len(self.recompiles),
            "fallbacks": {op: int(n) for op, n in self.fallbacks.items()},
            "run": str(self.run_dir),
            "over_limit": self.over_limit(limits) if limits is not None else [],
            "worker": os.environ.get("PYTEST_XDIST_WORKER"),
            "pid": os.getpid(),
        }


def watch(
    name: str = "watch",
    warmup_compiles: int = 1,
    store: str | Path | None = None,
    *,
    warmup_steps: int | None = None,
) -> Watch:
    """`with tpuscope.watch.watch(warmup_compiles=1) as w: ...` outside pytest."""
    return Watch(name=name, warmup_compiles=warmup_compiles, store=store, warmup_steps=warmup_steps)


def compiles_allowed(warmup_compiles: int, warmup_steps: int | None = None) -> int:
    """The compiles of each graph family that are not recompiles: `warmup_compiles`, or its
    older name `warmup_steps` (kept working: it always meant compiles, never steps)."""
    value = warmup_compiles if warmup_steps is None else warmup_steps
    name = "warmup_compiles" if warmup_steps is None else "warmup_steps"
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"tpuscope: {name} must be an integer >= 0, not {value!r}")
    return value


def _families(run: Run) -> Any:
    """The run's graph families as its analysis judges them (detect/tables.RunTables.families:
    the loop's last step per process lets a bounded set be seen as one)."""
    import pandas as pd

    empty = pd.DataFrame()
    return RunTables(
        meta=run.meta, steps=run.steps, compiles=run.compiles, fallbacks=empty, metrics=empty
    ).families


def _finding_op(finding: Finding) -> str | None:
    op = FallbackEvidence.of(finding).op
    return fallback_name(op) if isinstance(op, str) else None


def _finding_changes(finding: Finding | None, index: int) -> list[str]:
    """The recompile detector's diff for this compile ("arg 3: f32[4,41,128] -> f32[4,53,128]")."""
    if finding is None:
        return []
    evidence = RecompileEvidence.of(finding)
    for item in evidence.graphs_recompiled:
        if item.index == index:
            return [str(c) for c in item.changes or []]
    return [str(c) for c in evidence.changes or []]
